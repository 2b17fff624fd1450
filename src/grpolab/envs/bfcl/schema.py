"""BFCL's function dialect as tools: "dict", "float", "tuple", "any"... converted to JSON Schema.

The schema reward validates calls with jsonschema as in every environment, so BFCL's parameter types are mapped
to JSON Schema types; the AST checker keeps reading the original (`SchemaTool.bfcl`).
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema

_TYPES: dict[str, str | None] = {
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
    enum = out.get("enum")
    if out.get("type") == "array" and isinstance(enum, list) and not any(isinstance(e, list) for e in enum):
        # BFCL writes the allowed values of an array's items on the array itself
        items = out["items"] if isinstance(out.get("items"), dict) else {}
        out["items"] = {**items, "enum": out.pop("enum")}
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
        self._validator: Any = None  # built on first use: most of the 8,000 functions are never validated

    @property
    def name(self) -> str:
        return self.schema["function"]["name"]

    def validation_error(self, arguments: Any) -> str | None:
        if not isinstance(arguments, dict):
            return "arguments must be a JSON object"
        if self._validator is None:
            self._validator = jsonschema.Draft202012Validator(self.schema["function"]["parameters"])
        try:
            errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(map(str, e.path)))
        except (jsonschema.SchemaError, jsonschema.exceptions.UnknownType, TypeError, ValueError, re.error):
            return None  # a user file's broken schema cannot judge the call (and is not the model's fault)
        err = next(iter(errors), None)
        return None if err is None else f"{'.'.join(map(str, err.path)) or 'arguments'}: {err.message[:200]}"

    def run(self, arguments: Any) -> dict[str, Any]:
        return {"error": "BFCL functions are not executed: the call is the answer"}
