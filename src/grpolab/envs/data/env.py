"""`data`: your tasks from data files, your tools from a module of typed functions, a verifier chosen by name.

The rows are read and every one is checked before the environment exists (a bad row is a UserError naming its
file, line and field, with the count of other bad rows; nothing is half-loaded): its fields (`rows.TaskRow`), a
unique id, reference calls that name real tools with arguments their schemas accept, an answer the verifier can
read, and (for the built-in verifiers, which need no tool output) a reference answer that passes it. Rows without
a split are held out when a stable hash of their prompt falls under `data_env.heldout_fraction` (20%): the split
does not change when rows are added or reordered, and the same prompt never lands in both splits.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpolab.envs.base import SPLITS, Environment, Evidence, Split, Task, Verdict
from grpolab.envs.data.modules import tools_from_module
from grpolab.envs.data.rows import ROW_FIX, Row, TaskRow, parse_row, read_rows
from grpolab.envs.data.verifiers import AnswerCheck, check_for
from grpolab.errors import UserError
from grpolab.tools import ToolBox

if TYPE_CHECKING:  # the config stands above the environments (it reads the reward table, which reads them)
    from grpolab.config import DataEnvConfig

NO_FILES_FIX = "name your JSONL file or saved dataset in the config's `data = [...]` or --data (docs/data-env.md)"
_ENDINGS = {
    "exact": "Reply with the answer alone, nothing else.",
    "numeric": "State the result as one number in one short sentence.",
    "regex": "Give the final answer in one short sentence.",
    "json": "Reply with the answer as JSON alone.",
    "get_reward": "When you are done, say in one short sentence what you did or found.",
}


def default_instructions(has_tools: bool, verifier: str) -> str:
    """The task instructions when the config gives none: what the tools are for, and the answer's form."""
    parts = ["You are a careful assistant."]
    parts.append(
        "Use the tools to work out the answer instead of guessing it." if has_tools else "Answer the user's question."
    )
    parts.append(_ENDINGS.get(verifier, ""))
    return " ".join(p for p in parts if p)


def heldout_by_hash(prompt: str, fraction: float) -> bool:
    """Whether a row without a split is held out: the first 8 bytes of the prompt's SHA-256, as a fraction of 2**64,
    fall under `fraction`."""
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


class DataEnv(Environment):
    name = "data"
    description = "Your tasks from a JSONL file or a saved dataset, your typed tools, a verifier by name"

    def __init__(self, files: list[str] | None, settings: DataEnvConfig | None, task_kinds: list[str] | None = None):
        if not files:
            raise UserError("env 'data' has no task file", NO_FILES_FIX)
        if settings is None:
            raise UserError("env 'data' has no [data_env] settings", "build it with grpolab.envs.env_for(config)")
        self.settings = settings
        self.toolbox = self._toolbox()
        self.check: AnswerCheck = self._check()
        self.thought_required = self.settings.thought_required
        self.instructions = self.settings.instructions or default_instructions(
            bool(self.toolbox.tools), self.verifier_name
        )
        self.task_kinds: list[str] | None = list(task_kinds) if task_kinds else None
        """Kinds to serve (None: all). `grpolab.envs.get_env` sets it from `task_kinds` once it has checked them."""
        self._tasks = self._load(files)
        self._example: str | None = None

    no_tools = "env data has no tools (set data_env.tools to your tools module)"
    """Why a row may not name reference calls when there are no tools (a subclass's own tools say otherwise)."""

    def _toolbox(self) -> ToolBox:
        """The tools: `data_env.tools`'s functions (a subclass may have its own)."""
        return ToolBox(tools_from_module(self.settings.tools) if self.settings.tools else [])

    def _check(self) -> AnswerCheck:
        """The verifier `data_env.verifier` names (exact when unset)."""
        return check_for(self.settings)

    @property
    def verifier_name(self) -> str:
        """The verifier's name as instructions and errors say it: `data_env.verifier`, exact when unset."""
        return self.settings.verifier or "exact"

    @property
    def example(self) -> str:  # type: ignore[override]
        """The first train task's reference solution (built on first use: it runs the task's tools)."""
        if self._example is None:
            task = self._tasks["train"][0]
            self._example = f"User: {task.prompt}\n" + self.reference_transcript(task)
        return self._example

    @example.setter
    def example(self, text: str) -> None:
        self._example = text

    def tasks(self, split: Split) -> list[Task]:
        return [t for t in self._tasks[split] if not self.task_kinds or t.kind in self.task_kinds]

    def verify(self, task: Task, final_answer: str, evidence: Evidence) -> Verdict:
        return self.check.verify(final_answer, task, evidence)

    def _load(self, files: list[str]) -> dict[Split, list[Task]]:
        rows = [row for f in files for row in read_rows(Path(f))]
        shown = ", ".join(files)
        if not rows:
            raise UserError(f"no tasks in {shown}", 'write one JSON object per line: {"prompt": ..., "answer": ...}')
        problems: list[str] = []
        ids: dict[str, str] = {}
        out: dict[Split, list[Task]] = {split: [] for split in SPLITS}
        for row in rows:
            parsed = parse_row(row)
            built = self._task(row, parsed, ids) if isinstance(parsed, TaskRow) else parsed
            if isinstance(built, str):
                problems.append(built)
                continue
            task, split = built
            out[split].append(task)
        if problems:
            more = f" (and {len(problems) - 1} more bad rows)" if len(problems) > 1 else ""
            raise UserError(problems[0] + more, ROW_FIX)
        for split in (s for s in SPLITS if not out[s]):
            other: Split = "heldout" if split == "train" else "train"
            raise UserError(
                f"no {split} tasks in {shown} ({len(out[other])} {other}: rows without a split are held out "
                f"by a hash of their prompt, about {self.settings.heldout_fraction:.0%} of them)",
                f'mark some rows "split": "{split}"',
            )
        return out

    def _task(self, row: Row, parsed: TaskRow, ids: dict[str, str]) -> tuple[Task, Split] | str:
        """The row as a Task with its split, or what is wrong with it (naming the row and the field)."""
        where = row.where
        task_id = parsed.id or row.default_id
        if task_id in ids:
            return f"{where}: field 'id': {task_id!r} is also the id of {ids[task_id]}"
        ids[task_id] = where
        calls = [(c.name, c.arguments) for c in parsed.reference_calls]
        if (calls or parsed.needs_tools) and not self.toolbox.tools:
            field = "reference_calls" if calls else "needs_tools"
            return f"{where}: field '{field}': {self.no_tools}"
        for i, (name, arguments) in enumerate(calls):
            tool = self.toolbox.get(name)
            if tool is None:
                known = ", ".join(self.toolbox.tools)
                return f"{where}: field 'reference_calls.{i}.name': unknown tool {name!r} (tools: {known})"
            problem = tool.validation_error(arguments)
            if problem:
                return f"{where}: field 'reference_calls.{i}.arguments': {problem}"
        try:
            truth = self.check.truth(parsed.answer)
        except ValueError as exc:
            return f"{where}: field 'answer': {exc}"
        if parsed.reference_answer is None and not self.check.answer_is_reference:
            return f"{where}: field 'reference_answer': required when the answer is a pattern (give one it matches)"
        answer = parsed.answer if isinstance(parsed.answer, str) else json.dumps(parsed.answer)
        task = Task(
            id=task_id,
            prompt=parsed.prompt,
            answer=answer,
            truth=truth,
            kind=parsed.kind,
            needs_tools=bool(calls) if parsed.needs_tools is None else parsed.needs_tools,
            reference_calls=calls,
            reference_thought=self._thought(parsed, calls),
            reference_answer=answer if parsed.reference_answer is None else parsed.reference_answer,
            meta=dict(parsed.meta),
        )
        if not self.check.user_code:  # the built-in verifiers read no tool output: the reference must pass now
            verdict = self.check.verify(task.reference_answer, task, Evidence(task.prompt, calls, []))
            if not verdict.passed:
                given = "" if parsed.reference_answer is not None else " (it defaults to the answer)"
                return (
                    f"{where}: field 'reference_answer': {task.reference_answer!r}{given} fails verifier "
                    f"{self.verifier_name} ({verdict.reason})"
                )
        split = parsed.split or row.source_split
        if split is None:
            split = "heldout" if heldout_by_hash(parsed.prompt, self.settings.heldout_fraction) else "train"
        return task, split

    def _thought(self, parsed: TaskRow, calls: list[tuple[str, dict[str, Any]]]) -> str:
        """The row's reference thought, or (where thoughts are required) one that names the tools it calls."""
        if parsed.reference_thought is not None or not self.thought_required:
            return parsed.reference_thought or ""
        if calls:
            names = ", ".join(dict.fromkeys(name for name, _ in calls))
            return f"I will call {names} to work out the answer."
        return "I can answer this question directly."
