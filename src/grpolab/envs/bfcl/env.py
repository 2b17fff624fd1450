"""`bfcl`: function calling in the Berkeley Function Calling Leaderboard's format (single turn, nothing executed).

The model sees the offered functions as JSON schemas and must answer with the right `<tool_call>` block(s). The
completion reward is a BFCL-style AST match (`grpolab.envs.bfcl.checker`). BFCL's schema dialect ("dict", Python
type names) is converted to JSON Schema so the schema reward validates calls with jsonschema like everywhere else.
Data: BFCL JSON Lines question files with their `possible_answer` files beside them (`--data FILE`, repeatable);
by default the three categories in shared/data/bfcl. Held-out split: 20% of ids, fixed seed.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import jsonschema

from grpolab.envs.base import Environment, Split, Task, Verdict
from grpolab.envs.bfcl.checker import check_calls
from grpolab.errors import UserError
from grpolab.tools import ToolBox

HELDOUT_FRACTION = 0.2
SPLIT_SEED = 1234
_TYPES = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "list": "array",
    "int": "integer",
    "bool": "boolean",
    "str": "string",
    "any": None,
}


def to_json_schema(schema: Any) -> Any:
    """BFCL's parameter dialect -> JSON Schema (structural: only schema nodes are touched)."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    t = out.get("type")
    if isinstance(t, str) and t in _TYPES:
        if _TYPES[t] is None:
            out.pop("type")
        else:
            out["type"] = _TYPES[t]
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: to_json_schema(v) for k, v in out["properties"].items()}
    if "items" in out:
        out["items"] = to_json_schema(out["items"])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = to_json_schema(out["additionalProperties"])
    out.pop("optional", None)
    return out


class SchemaTool:
    """A tool that is offered but never run: a name, a schema and validation (the `Tool` interface minus `run`)."""

    def __init__(self, function: dict[str, Any]):
        params = to_json_schema(function.get("parameters") or {"type": "object", "properties": {}})
        self.schema = {
            "type": "function",
            "function": {
                "name": function["name"],
                "description": function.get("description", ""),
                "parameters": params,
            },
        }
        self.bfcl = function
        self._validator = jsonschema.Draft202012Validator(params)

    @property
    def name(self) -> str:
        return self.schema["function"]["name"]

    def validation_error(self, arguments: Any) -> str | None:
        if not isinstance(arguments, dict):
            return "arguments must be a JSON object"
        err = next(iter(sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))), None)
        return None if err is None else f"{'.'.join(map(str, err.path)) or 'arguments'}: {err.message[:200]}"

    def run(self, arguments: Any) -> dict[str, Any]:
        return {"error": "BFCL functions are not executed: the call is the answer"}


def default_data() -> list[Path]:
    """The shared BFCL files: $GRPOLAB_BFCL_DIR, or shared/data/bfcl beside or above the working directory."""
    candidates = [Path(os.environ["GRPOLAB_BFCL_DIR"])] if os.environ.get("GRPOLAB_BFCL_DIR") else []
    roots = [Path.cwd().resolve(), Path(__file__).resolve().parent]
    for root in [r for start in roots for r in (start, *start.parents)]:
        candidates += [root / "shared" / "data" / "bfcl", root.parent / "shared" / "data" / "bfcl"]
    for c in candidates:
        files = sorted(p for p in c.glob("BFCL_*.json") if "possible_answer" not in p.name) if c.is_dir() else []
        if files:
            return files
    raise UserError("no BFCL data found", "pass --data FILE (a BFCL question file) or set GRPOLAB_BFCL_DIR")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read BFCL file {path} ({exc})", "pass a BFCL JSON Lines question file")


class BFCLEnv(Environment):
    name = "bfcl"
    description = "Berkeley Function Calling Leaderboard format: emit the right call(s); AST-checked, nothing executed"
    instructions = (
        "You are a function-calling assistant. Answer the user's request by calling the right function(s) with "
        "the right arguments. Write one <tool_call> block per call and nothing else."
    )
    executes_tools = False
    thought_required = False  # BFCL's answer is the call blocks and nothing else

    def __init__(self, data: list[str] | None = None):
        files = [Path(p) for p in data] if data else default_data()
        self.toolbox = ToolBox([])
        self._tasks: dict[Split, list[Task]] = {"train": [], "heldout": []}
        self._tools: dict[str, ToolBox] = {}
        for path in files:
            self._load(path)

    def _load(self, path: Path) -> None:
        if not path.is_file():
            raise UserError(f"BFCL data file not found: {path}", "check the path given to --data")
        answers_path = path.with_name(path.name.replace(".json", ".possible_answer.json"))
        if not answers_path.is_file():
            raise UserError(f"no possible_answer file beside {path}", f"put {answers_path.name} next to it")
        answers = {row["id"]: row["ground_truth"] for row in _read_jsonl(answers_path)}
        rows = [r for r in _read_jsonl(path) if r.get("id") in answers]
        ids = sorted(r["id"] for r in rows)
        random.Random(SPLIT_SEED).shuffle(ids)
        heldout = set(ids[: max(1, int(len(ids) * HELDOUT_FRACTION))])
        for row in rows:
            task = self._task(row, answers[row["id"]])
            self._tasks["heldout" if row["id"] in heldout else "train"].append(task)

    def _task(self, row: dict[str, Any], truth: list[dict[str, Any]]) -> Task:
        tools = [SchemaTool(f) for f in row["function"]]
        self._tools[row["id"]] = ToolBox(tools)  # type: ignore[list-item]
        turns = row["question"][0] if row["question"] and isinstance(row["question"][0], list) else row["question"]
        prompt = next((m["content"] for m in reversed(turns) if m.get("role") == "user"), "")
        reference = [
            (name, {k: _first_value(v) for k, v in params.items() if _first_value(v) is not _OMIT})
            for call in truth
            for name, params in call.items()
        ]
        category = row["id"].rsplit("_", 1)[0]
        return Task(
            id=row["id"],
            kind=category,
            prompt=prompt,
            answer=json.dumps(truth),
            truth=truth,
            reference_calls=reference,
            reference_answer="",
            meta={"functions": {t.name: t.bfcl for t in tools}},
        )

    def tasks(self, split: Split) -> list[Task]:
        return self._tasks[split]

    def toolbox_for(self, task: Task) -> ToolBox:
        return self._tools[task.id]

    def verify(self, task: Task, final_answer: str, evidence: Any) -> Verdict:
        return Verdict(False, "BFCL tasks are answered by calls")

    def verify_calls(self, task: Task, calls: list) -> Verdict:
        made = [(c.name, c.arguments) for c in calls if c.ok]
        if len(made) != len(calls):
            return Verdict(False, "a call is malformed")
        ok, reason = check_calls(made, task.truth, task.meta["functions"])
        return Verdict(ok, reason)


_OMIT = object()


def _first_value(acceptable: list[Any]) -> Any:
    """The reference value of a parameter: its first acceptable value, nested specs resolved; _OMIT to leave out."""
    for v in acceptable:
        if v == "" or v is None:
            continue
        return _resolve(v)
    return _OMIT


def _resolve(v: Any) -> Any:
    if isinstance(v, dict) and v and all(isinstance(x, list) for x in v.values()):
        return {k: r for k, x in v.items() if (r := _first_value(x)) is not _OMIT}
    if isinstance(v, list):
        return [_resolve(x) for x in v]
    return v
