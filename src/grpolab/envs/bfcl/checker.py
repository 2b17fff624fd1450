"""A BFCL-style AST checker: is a list of (name, arguments) calls one of the acceptable answers?

Follows BFCL's ast_checker: the function name; required parameters present; no unexpected parameters; Python
types (an int is accepted where a float is expected); values among the acceptable ones, strings compared after
lower-casing and removing spaces and ,./-_*^; "" among the acceptable values means the parameter may be omitted;
parallel calls matched in any order. Each failure names its BFCL error type.
"""

from __future__ import annotations

import re
from itertools import permutations
from typing import Any

_STRIP = re.compile(r"[ ,./\-_*^]")
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "float": (float, int),
    "number": (float, int),
    "string": (str,),
    "boolean": (bool,),
    "array": (list,),
    "tuple": (list,),
    "dict": (dict,),
    "object": (dict,),
}


def normalize(value: Any) -> Any:
    if isinstance(value, str):
        return _STRIP.sub("", value.lower())
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    return value


def _type_ok(value: Any, bfcl_type: str | None) -> bool:
    if bfcl_type is None or bfcl_type == "any" or bfcl_type not in _PY_TYPES:
        return True
    if isinstance(value, bool) and bfcl_type != "boolean":
        return False
    return isinstance(value, _PY_TYPES[bfcl_type])


def _is_nested_spec(a: Any) -> bool:
    """BFCL writes nested dict answers as {key: [acceptable...]}."""
    return isinstance(a, dict) and bool(a) and all(isinstance(v, list) for v in a.values())


def _matches(value: Any, a: Any) -> bool:
    if _is_nested_spec(a) and isinstance(value, dict):
        if not set(value) <= set(a):
            return False
        return all(
            (k in value and _value_ok(value[k], accs)) or (k not in value and "" in accs) for k, accs in a.items()
        )
    if isinstance(a, list) and isinstance(value, list) and any(_is_nested_spec(x) for x in a):
        return len(a) == len(value) and all(_matches(v, x) for v, x in zip(value, a))
    if normalize(a) == normalize(value):
        return True
    numeric = (int, float)
    return (
        isinstance(a, numeric)
        and isinstance(value, numeric)
        and not isinstance(value, bool)
        and float(a) == float(value)
    )


def _value_ok(value: Any, acceptable: list[Any]) -> bool:
    return any(a != "" and _matches(value, a) for a in acceptable)


def check_call(
    name: str, args: dict[str, Any], expected: dict[str, dict[str, list[Any]]], functions: dict[str, dict[str, Any]]
) -> tuple[bool, str]:
    """One call against one expected {function: {param: [acceptable...]}}. Returns (ok, BFCL error type: detail)."""
    ((want_name, params),) = expected.items()
    if name != want_name and name.replace("_", ".") != want_name.replace("_", "."):
        return False, f"simple_function_checker:wrong_func_name: {name!r} instead of {want_name!r}"
    spec = (functions.get(want_name) or {}).get("parameters") or {}
    props, required = spec.get("properties", {}), spec.get("required", [])
    for p in required:
        if p not in args:
            return False, f"simple_function_checker:missing_required: {p!r}"
    for p, value in args.items():
        if p not in params:
            return False, f"simple_function_checker:unexpected_param: {p!r}"
        if not _type_ok(value, (props.get(p) or {}).get("type")):
            return (
                False,
                f"type_error:simple: {p!r} is {type(value).__name__}, expected {(props.get(p) or {}).get('type')}",
            )
        if not _value_ok(value, params[p]):
            return False, f"value_error: {p!r} = {value!r} not in {params[p]!r}"
    for p, acceptable in params.items():
        if p not in args and "" not in acceptable:
            return False, f"simple_function_checker:missing_optional: {p!r} must be given"
    return True, f"matches {want_name}"


def check_calls(
    calls: list[tuple[str | None, dict[str, Any] | None]],
    truth: list[dict[str, Any]],
    functions: dict[str, dict[str, Any]],
) -> tuple[bool, str]:
    """All expected calls made (in any order), and no others."""
    if not calls:
        return False, "no call made"
    if len(calls) != len(truth):
        return False, f"parallel_function_checker:wrong_count: {len(calls)} calls, expected {len(truth)}"
    first_error = ""
    orders = permutations(range(len(truth))) if len(truth) <= 6 else [tuple(range(len(truth)))]
    for order in orders:
        for (name, args), j in zip(calls, order):
            ok, why = check_call(name or "", args or {}, truth[j], functions)
            if not ok:
                first_error = first_error or why
                break
        else:
            return True, "all calls match" if len(truth) > 1 else why
    return False, first_error
