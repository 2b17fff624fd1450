"""Tools: typed Python functions whose JSON schema comes from their signature and docstring.

`Tool.run(arguments)` is the only way the lab executes a tool: it validates the arguments against the schema
(jsonschema), runs the function with a wall-clock timeout, turns exceptions and timeouts into `{"error": ...}`
responses, and caps the output size. It never raises on model-supplied arguments.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from transformers.utils import get_json_schema

from grpolab.calculator import CalculatorError, calculate

MAX_OUTPUT_CHARS = 2000
DEFAULT_TIMEOUT_S = 5.0

# One shared worker pool: a timed-out call cannot be killed (Python threads can't be), so it keeps its worker
# until it returns; built-in tools bound their own work (see calculator limits) so that stays rare and short.
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="grpolab-tool")


@dataclass
class Tool:
    """A callable tool with its JSON schema (OpenAI/HF `{"type": "function", "function": {...}}` shape)."""

    fn: Callable[..., Any]
    timeout_s: float = DEFAULT_TIMEOUT_S
    schema: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.schema = get_json_schema(self.fn)
        self.schema["function"].pop("return", None)
        self._validator = jsonschema.Draft202012Validator(self.parameters)

    @property
    def name(self) -> str:
        return self.schema["function"]["name"]

    @property
    def parameters(self) -> dict[str, Any]:
        return self.schema["function"]["parameters"]

    def validation_error(self, arguments: Any) -> str | None:
        """Why these arguments do not fit the schema, or None when they do."""
        if not isinstance(arguments, dict):
            return "arguments must be a JSON object"
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))
        if not errors:
            return None
        err = errors[0]
        where = ".".join(str(p) for p in err.path) or "arguments"
        return f"{where}: {err.message[:200]}"

    def run(self, arguments: Any) -> dict[str, Any]:
        """Validate and execute; always returns a JSON-serialisable dict, `{"error": ...}` on any failure."""
        problem = self.validation_error(arguments)
        if problem:
            return {"error": f"invalid arguments for {self.name}: {problem}"}
        future = _POOL.submit(self.fn, **arguments)
        try:
            value = future.result(timeout=self.timeout_s)
        except FutureTimeout:
            return {"error": f"{self.name} timed out after {self.timeout_s:g}s"}
        except Exception as exc:  # a tool's own failure is a response the model sees, not a crash
            return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        return cap_output(value if isinstance(value, dict) else {"result": value})


def cap_output(response: dict[str, Any], limit: int = MAX_OUTPUT_CHARS) -> dict[str, Any]:
    """Keep a response under `limit` characters of JSON; larger ones are replaced by a truncated preview."""
    try:
        text = json.dumps(response)
    except (TypeError, ValueError):
        return {"error": "tool returned a value that is not JSON-serialisable"}
    if len(text) <= limit:
        return response
    return {"error": f"output truncated to {limit} characters", "preview": text[:limit]}


def calculator(expression: str) -> dict[str, Any]:
    """Evaluate an arithmetic expression exactly, e.g. percent change as (new - old) / old * 100.

    Args:
        expression: Arithmetic using numbers, + - * / ** and parentheses, e.g. "(137 - 120) / 120 * 100".
    """
    try:
        return {"result": round(calculate(expression), 10)}
    except CalculatorError as exc:
        return {"error": str(exc)}


class ToolBox:
    """The tools of one environment, by name."""

    def __init__(self, tools: list[Tool]):
        self.tools = {t.name: t for t in tools}

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema for t in self.tools.values()]

    def __contains__(self, name: object) -> bool:
        return name in self.tools

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def execute(self, name: str | None, arguments: Any) -> dict[str, Any]:
        """Run a named tool; an unknown name is an error response, not an exception."""
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            return {"error": f"unknown tool {str(name)[:60]!r}; available: {', '.join(self.tools)}"}
        return tool.run(arguments)
