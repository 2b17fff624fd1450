"""`bfcl`: function calling in the Berkeley Function Calling Leaderboard's format (single turn, nothing executed).

The model sees the offered functions as JSON schemas and must answer with the right `<tool_call>` block(s), or
with no call when none of the functions fits (irrelevance categories). The completion reward is BFCL's AST check
(`grpolab.envs.bfcl.checker`).

Data: the installed `bfcl-eval` package's single-turn categories (`grpolab.envs.bfcl.data`), or BFCL question
files given with `--data FILE` (repeatable). A task's kind is its BFCL category, so `task_kinds` (`--category`)
selects categories; package categories are read on first use. Live categories are held out entirely.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpolab.envs.base import Environment, Split, Task, Verdict
from grpolab.envs.bfcl.checker import check_output
from grpolab.envs.bfcl.data import (
    Source,
    category_of,
    heldout_ids,
    needs_answers,
    package_sources,
    read_jsonl,
    user_source,
)
from grpolab.envs.bfcl.schema import SchemaTool, to_json_schema
from grpolab.errors import UserError
from grpolab.tools import ToolBox

__all__ = ["BFCLEnv", "SchemaTool", "to_json_schema"]
NO_CALL = "(no call: none of the offered functions fits)"


class BFCLEnv(Environment):
    name = "bfcl"
    description = "Berkeley Function Calling Leaderboard format: emit the right call(s); AST-checked, nothing executed"
    instructions = (
        "You are a function-calling assistant. Answer the user's request by calling the right function(s) with "
        "the right arguments, and write nothing else. If none of the functions fits the request, do not call any."
    )
    executes_tools = False
    thought_required = False  # BFCL's answer is the call blocks and nothing else

    def __init__(self, data: list[str] | None = None, task_kinds: list[str] | None = None):
        self.toolbox = ToolBox([])
        self.task_kinds: list[str] | None = list(task_kinds) if task_kinds else None
        """Categories to serve (None: all). `grpolab.envs.get_env` sets it from `--category` / `task_kinds`."""
        self._tools: dict[str, ToolBox] = {}
        self._tasks: dict[str, dict[Split, list[Task]]] = {}
        self._sources: dict[str, Source] = {}
        if data:
            for path in data:  # user files are read now, so a bad path fails before any model loads
                self._load_source(user_source(Path(path)))
        else:
            self._sources = package_sources()
        self._check_kinds(self.task_kinds)

    @property
    def kinds(self) -> list[str]:
        """The categories this environment can serve (known without reading the package's files)."""
        return list(self._sources) if self._sources else list(self._tasks)

    def _check_kinds(self, kinds: list[str] | None) -> None:
        unknown = sorted(set(kinds or []) - set(self.kinds))
        if unknown:
            raise UserError(f"unknown BFCL category {unknown[0]!r}", f"use some of: {', '.join(self.kinds)}")

    def _selected(self) -> list[str]:
        self._check_kinds(self.task_kinds)
        return [k for k in self.kinds if not self.task_kinds or k in self.task_kinds]

    def tasks(self, split: Split) -> list[Task]:
        out: list[Task] = []
        for category in self._selected():
            if category not in self._tasks:
                self._load_source(self._sources[category])
            out += self._tasks[category][split]
        return out

    def _load_source(self, source: Source) -> None:
        answers = {}
        if source.answers is not None:
            answers = {row["id"]: row.get("ground_truth") for row in read_jsonl(source.answers)}
        rows = [
            r for r in read_jsonl(source.questions) if r["id"] in answers or not needs_answers(category_of(r["id"]))
        ]
        heldout = heldout_ids([r["id"] for r in rows])
        for row in rows:
            task = self._task(row, answers.get(row["id"]), source.questions)
            split: Split = "heldout" if task.id in heldout else "train"
            self._tasks.setdefault(task.kind, {"train": [], "heldout": []})[split].append(task)

    def _task(self, row: dict[str, Any], truth: Any, path: Path) -> Task:
        functions, question = row.get("function"), row.get("question")
        if not isinstance(functions, list) or not all(_is_function(f) for f in functions):
            raise UserError(f"{path}: {row['id']} has no valid 'function' list", "each function needs a 'name'")
        turns = question[0] if isinstance(question, list) and question and isinstance(question[0], list) else question
        if not isinstance(turns, list) or not all(isinstance(m, dict) for m in turns):
            raise UserError(f"{path}: {row['id']} has no valid 'question'", "give a list of chat messages")
        last_user = max((i for i, m in enumerate(turns) if m.get("role") == "user"), default=None)
        if last_user is None:
            raise UserError(f"{path}: {row['id']} has no user message", "end 'question' with a user message")
        category = category_of(row["id"])
        meta = {"functions": functions, "history": turns[:last_user]}
        prompt = str(turns[last_user].get("content", ""))
        if not needs_answers(category):
            relevance = "irrelevance" not in category  # relevance: any call is right; irrelevance: none is
            calls = [(functions[0]["name"], {})] if relevance and functions else []
            answer = "(any call)" if relevance else NO_CALL
            return Task(
                id=row["id"],
                kind=category,
                prompt=prompt,
                answer=answer,
                truth=[],
                needs_tools=relevance,
                reference_calls=calls,
                reference_answer="",
                meta=meta,
            )
        if not isinstance(truth, list):
            raise UserError(f"{path}: {row['id']} has no ground_truth list", "check its possible_answer file")
        reference = [_reference_call(call, functions) for call in truth if isinstance(call, dict) and len(call) == 1]
        return Task(
            id=row["id"],
            kind=category,
            prompt=prompt,
            answer=json.dumps(truth),
            truth=truth,
            reference_calls=reference,
            reference_answer="",
            meta=meta,
        )

    def toolbox_for(self, task: Task) -> ToolBox:
        if task.id not in self._tools:
            self._tools[task.id] = ToolBox([SchemaTool(f) for f in task.meta["functions"]])  # type: ignore[misc]
        return self._tools[task.id]

    def messages(self, task: Task) -> list[dict[str, str]]:
        """The lab's system prompt (with the task's own system message appended), earlier turns, the question."""
        system = self.system_prompt(task)
        history = []
        for m in task.meta.get("history", []):
            if m.get("role") == "system":
                system += "\n\n" + str(m.get("content", ""))
            else:
                history.append({"role": str(m.get("role")), "content": str(m.get("content", ""))})
        return [{"role": "system", "content": system}, *history, {"role": "user", "content": task.prompt}]

    def verify(self, task: Task, final_answer: str, evidence: Any) -> Verdict:
        return Verdict(False, "BFCL tasks are answered by calls")

    def verify_calls(self, task: Task, calls: list) -> Verdict:
        made = [(c.name, c.arguments) for c in calls if c.ok]
        ok, reason = check_output(made, len(made) == len(calls), task.truth, task.meta["functions"], task.kind)
        return Verdict(ok, reason)


def _is_function(f: Any) -> bool:
    return isinstance(f, dict) and isinstance(f.get("name"), str)


_OMIT = object()


def _reference_call(expected: dict[str, Any], functions: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """One expected call with each parameter at its first acceptable value ("" first: left out, unless required)."""
    ((name, params),) = expected.items()
    function = next((f for f in functions if f["name"] == name), {})
    required = (function.get("parameters") or {}).get("required") or []
    params = params if isinstance(params, dict) else {}
    return name, {k: v for k, accs in params.items() if (v := _first_value(accs, k in required)) is not _OMIT}


def _first_value(acceptable: Any, required: bool = False) -> Any:
    """A parameter's first acceptable value (nested answers resolved); _OMIT where "" (may be omitted) comes first."""
    for v in acceptable if isinstance(acceptable, list) else []:
        if v == "":
            if required:
                continue
            return _OMIT
        return _resolve(v)
    return _OMIT


def _resolve(v: Any) -> Any:
    if isinstance(v, dict) and v and all(isinstance(x, list) for x in v.values()):  # {key: [acceptable...]}
        return {k: r for k, x in v.items() if (r := _first_value(x)) is not _OMIT}
    if isinstance(v, list):
        return [_resolve(x) for x in v]
    return v
