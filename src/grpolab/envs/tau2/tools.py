"""τ²-bench's retail tools, bound to one episode's database, with the interface `grpolab.tools.ToolBox` calls.

Each call goes through tau2's own `Environment.get_response` (the tool, then the environment's sync, the response
as tau2 serialises it), so a response is what the benchmark's agent would read. Two departures: `calculate` is
grpolab's calculator (tau2's runs `eval` on the model's text, which grpolab never does; it changes no database, so
no verdict can move), and a response longer than `MAX_RESPONSE_CHARS` is cut with a note (none in the benchmark's
database is: the longest, the laptop's product details, is 3,370 characters of JSON).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from grpolab.calculator import CalculatorError, calculate
from grpolab.envs.tau2.package import tau2
from grpolab.tools import argument_problem, cap_output

MAX_RESPONSE_CHARS = 4000
"""Longer than grpolab's 2,000 (`tools.MAX_OUTPUT_CHARS`): 24 of the 50 products' details exceed it (3,370 at most)."""


class ToolSpec:
    """A retail tool's name, schema and argument validator: the same for every episode, so built once (tau2 makes
    a pydantic model per tool from its docstring each time it lists its tools, a third of an episode's start)."""

    def __init__(self, tool: Any):
        self.name = tool.name
        self.schema = without_titles(tool.openai_schema)
        self.parameters = self.schema["function"]["parameters"]
        self.validator = jsonschema.Draft202012Validator(self.parameters)


def without_titles(schema: Any) -> Any:
    """A JSON schema without pydantic's `title` strings ("Order Id" for `order_id`, "parameters"): they repeat the
    names, and are 360 of the system prompt's 4.9k SmolLM2 tokens. A property named `title` (a schema, not a
    string) is kept."""
    if isinstance(schema, dict):
        return {k: without_titles(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(schema, list):
        return [without_titles(v) for v in schema]
    return schema


def tool_specs(env: Any) -> list[ToolSpec]:
    """The specs of a tau2 environment's tools, in its order."""
    return [ToolSpec(tool) for tool in env.get_tools()]


class Tau2Tool:
    """One retail tool of one episode's tau2 environment."""

    def __init__(self, env: Any, spec: ToolSpec):
        self.env, self.name = env, spec.name
        self.schema, self.parameters, self._validator = spec.schema, spec.parameters, spec.validator

    def validation_error(self, arguments: Any) -> str | None:
        return argument_problem(self._validator, arguments)

    def run(self, arguments: Any) -> dict[str, Any]:
        problem = self.validation_error(arguments)
        if problem:
            return {"error": f"invalid arguments for {self.name}: {problem}"}
        if self.name == "calculate":
            return _calculate(arguments["expression"])
        tau2()
        from tau2.data_model.message import ToolCall

        call = ToolCall(id="call", name=self.name, arguments=arguments)
        message = self.env.get_response(call)
        return response_dict(message.content, message.error)


def response_dict(content: str | None, error: bool) -> dict[str, Any]:
    """tau2's response text as the JSON object grpolab inserts: an object as is, anything else under "result"."""
    if error:
        return {"error": str(content or "")[:500]}
    try:
        value = json.loads(content) if content else None
    except ValueError:
        value = content
    response = value if isinstance(value, dict) else {"result": value}
    return cap_output(response, MAX_RESPONSE_CHARS)


def _calculate(expression: str) -> dict[str, Any]:
    """What tau2's `calculate` answers (the result rounded to 2 places, as text), without `eval`."""
    if not all(char in "0123456789+-*/(). " for char in expression):
        return {"error": "Error: Invalid characters in expression"}
    try:
        return {"result": str(round(float(calculate(expression)), 2))}
    except CalculatorError as exc:
        return {"error": f"Error: {exc}"}
