"""BFCL's AST checker for Python functions, re-implemented: does a list of decoded calls answer a BFCL task?

The runtime must not import `bfcl_eval` (its package pulls dozens of dependencies), so this module follows
`bfcl_eval/eval_checker/ast_eval/ast_checker.py` (bfcl-eval 2026.3.23, `Language.PYTHON`) rule by rule, quirks
included, because agreeing with the leaderboard matters more than tidier rules. `benchmarks/bfcl_parity.py` runs
BFCL's own checker on the same outputs and reports any disagreement.

The rules, in BFCL's order, each failure named by BFCL's error type:
- category dispatch: "parallel" in the name -> every expected call matched greedily, in order, to a not yet
  matched output call (no backtracking); "multiple" -> one call, checked against the first expected call's
  function; otherwise (simple) exactly one call, checked against the task's first function.
- the function name matches exactly; required parameters are present; every given parameter is declared and
  appears in the answer.
- types: the declared type's Python type, compared exactly (`True` is not an integer; "any" means a string); an int
  is accepted for a float; arrays check their items' type one level deep; a value whose type equals the type of
  the answer's values is accepted as a "variable" (the answer gives a different type than the schema declares)
  and then compared exactly.
- values: strings after lower-casing and removing spaces and ,./-_*^ (and ' -> "); lists with their top-level
  strings standardised; dicts key by key against `{key: [acceptable...]}` (top-level strings standardised, "" =
  the key may be left out); lists of dicts item by item; anything else by Python equality (so 5 == 5.0).
- "" among the acceptable values means the parameter may be omitted (and an empty list matches it).
- irrelevance categories: correct when the output decodes to no call; relevance: correct when it decodes to one
  or more. A malformed call makes the whole output undecodable, as BFCL's decoders are all or nothing.

Where BFCL would raise on odd data (an undeclared type, an answer of the wrong shape), this checker returns a
failure instead: it never raises, whatever the model wrote.
"""

from __future__ import annotations

import re
from typing import Any

Result = tuple[bool, str]
"""(passed, "error_type: detail") or (True, "matches ...")."""

_STRIP = re.compile(r"[ ,./\-_*^]")
PYTHON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
"""BFCL's PYTHON_TYPE_MAPPING (note "any" is a string there)."""
_NESTED = ("array", "tuple")


def standardize(text: str) -> str:
    """BFCL's standardize_string: remove spaces and ,./-_*^, lower-case, single quotes to double."""
    return _STRIP.sub("", text).lower().replace("'", '"')


def _std(value: Any) -> Any:
    return standardize(value) if type(value) is str else value


def _omittable(acceptable: Any) -> bool:
    """ "" among the acceptable values: the parameter (or dict key) may be left out."""
    return isinstance(acceptable, list | str | dict) and "" in acceptable


def _answer_type(acceptable: list[Any]) -> type | None:
    """The type of the first acceptable value that is not the "may be omitted" marker."""
    return next((type(a) for a in acceptable if a != ""), None)


def _type_check(value: Any, acceptable: list[Any], expected: type, nested: type | None) -> tuple[bool, bool]:
    """(type ok, value is a "variable"), as BFCL's type_checker: exact type, nested arrays one level deep."""
    answer_type = _answer_type(acceptable)
    is_variable = answer_type is not None and answer_type is not expected
    if type(value) is expected:
        if nested is None:
            return True, is_variable
        for item in acceptable:
            # an acceptable value that is not a list ("" for omitted) passes the item check, as in BFCL
            if type(item) is not list or all(_type_check(v, item, nested, None)[0] for v in value):
                return True, is_variable
        return False, is_variable
    if answer_type is not None and type(value) is answer_type:
        return True, True
    return False, is_variable


def _string_ok(value: str, acceptable: list[Any]) -> bool:
    return standardize(value) in [standardize(a) for a in acceptable if type(a) is str]


def _list_ok(value: list[Any], acceptable: list[Any]) -> bool:
    # BFCL indexes every acceptable value; "" becomes [] (so [] matches an omittable list) and a string its
    # characters; anything without a length would make BFCL raise and matches nothing here
    options = [[_std(x) for x in a] for a in acceptable if isinstance(a, list | str)]
    return [_std(v) for v in value] in options


def _dict_ok(value: Any, acceptable: list[Any]) -> tuple[bool, str]:
    """BFCL's dict_checker: each key of `value` known and its (top-level standardised) value acceptable."""
    why = "dict_checker:unclear"
    for answer in acceptable:
        if answer == "":
            continue
        if not isinstance(answer, dict) or not isinstance(value, dict):
            why = "dict_checker:unclear"
            continue
        why = ""
        for key, v in value.items():
            if key not in answer:
                why = f"value_error:dict_key: unexpected key {key!r}"
                break
            options = answer[key] if isinstance(answer[key], list | str) else []
            if _std(v) not in [_std(o) for o in options]:
                why = f"value_error:dict_value: {key!r} = {v!r} not in {options!r}"
                break
        if not why:
            missing = next((k for k, opts in answer.items() if k not in value and not _omittable(opts)), None)
            if missing is None:
                return True, ""
            why = f"value_error:dict_key: missing key {missing!r}"
    return False, why


def _list_of_dicts_ok(value: list[Any], acceptable: list[Any]) -> tuple[bool, str]:
    why = "list_dict_checker:unclear"
    for answer in acceptable:
        if not isinstance(answer, list | str) or len(value) != len(answer):
            why = "value_error:list_dict_count: wrong number of dicts"
            continue
        for v, a in zip(value, answer):
            ok, why = _dict_ok(v, [a])
            if not ok:
                break
        else:
            return True, ""
    return False, why


def _param_ok(param: str, value: Any, acceptable: list[Any], spec: dict[str, Any]) -> Result:
    """One given parameter against its declared type and acceptable values."""
    type_name = spec.get("type")
    expected = PYTHON_TYPES.get(type_name) if isinstance(type_name, str) else None
    nested = None
    if expected is not None and type_name in _NESTED:
        items = spec.get("items")
        item_type = items.get("type") if isinstance(items, dict) else None
        nested = PYTHON_TYPES.get(item_type) if isinstance(item_type, str) else None
    if type_name == "float" and type(value) is int:
        value = float(value)  # Python's int-to-float promotion, as BFCL allows
    is_variable = False
    if expected is not None:  # an undeclared type (BFCL would raise): no type check, plain comparison below
        ok, is_variable = _type_check(value, acceptable, expected, nested)
        if not ok:
            return False, f"type_error: {param!r} is {type(value).__name__} {value!r}, expected {type_name}"
    if expected is not None and not is_variable:
        if expected is dict:
            ok, why = _dict_ok(value, acceptable)
            return ok, why and f"{why} (in {param!r})"
        if expected is list and nested is dict:
            ok, why = _list_of_dicts_ok(value, acceptable)
            return ok, why and f"{why} (in {param!r})"
        if expected is str:
            ok = _string_ok(value, acceptable)
            return ok, "" if ok else f"value_error:string: {param!r} = {value!r} not in {acceptable!r}"
        if expected is list:
            ok = _list_ok(value, acceptable)
            return ok, "" if ok else f"value_error:list/tuple: {param!r} = {value!r} not in {acceptable!r}"
    if value not in acceptable:
        return False, f"value_error:others: {param!r} = {value!r} not in {acceptable!r}"
    return True, ""


def check_call(name: str, args: dict[str, Any], expected: dict[str, Any], function: dict[str, Any] | None) -> Result:
    """One decoded call against one expected `{function: {param: [acceptable...]}}`, BFCL's simple_function_checker.

    `function` is the BFCL description the call is checked against (found by the caller, as BFCL does)."""
    if not isinstance(function, dict) or not isinstance(expected, dict) or len(expected) != 1:
        return False, "simple_function_checker:unclear: the task's answer names no offered function"
    answers = next(iter(expected.values()))
    params = function.get("parameters") if isinstance(function.get("parameters"), dict) else {}
    props = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    required = params.get("required") if isinstance(params.get("required"), list) else []
    want = function.get("name")
    if name != want:
        return False, f"simple_function_checker:wrong_func_name: {name!r} instead of {want!r}"
    if not isinstance(answers, dict):
        return False, "simple_function_checker:unclear: malformed answer"
    for p in required:
        if p not in args:
            return False, f"simple_function_checker:missing_required: {p!r}"
    for p, value in args.items():
        if p not in props or p not in answers:
            return False, f"simple_function_checker:unexpected_param: {p!r}"
        spec = props[p] if isinstance(props[p], dict) else {}
        acceptable = answers[p] if isinstance(answers[p], list) else []
        ok, why = _param_ok(p, value, acceptable, spec)
        if not ok:
            return False, why
    for p, acceptable in answers.items():
        if p not in args and not _omittable(acceptable):
            return False, f"simple_function_checker:missing_optional: {p!r} must be given"
    return True, f"matches {want}"


def _find(functions: list[dict[str, Any]], name: Any) -> dict[str, Any] | None:
    return next((f for f in functions if isinstance(f, dict) and f.get("name") == name), None)


def _expected_name(expected: Any) -> Any:
    return next(iter(expected), None) if isinstance(expected, dict) else None


Call = tuple[str, dict[str, Any]]
"""A decoded call: (function name, arguments)."""


def check_calls(
    calls: list[Call], truth: list[dict[str, Any]], functions: list[dict[str, Any]], category: str
) -> Result:
    """Decoded calls against a task's answer (BFCL's ast_checker; the category picks simple/multiple/parallel)."""
    if not truth:
        return False, "no possible answer for this task"
    if "parallel" in category:
        if len(calls) != len(truth):
            return False, f"parallel_function_checker_no_order:wrong_count: {len(calls)} calls, expected {len(truth)}"
        matched: set[int] = set()
        for i, expected in enumerate(truth):
            function = _find(functions, _expected_name(expected))
            first_error = ""
            for j, (name, args) in enumerate(calls):
                if j in matched:
                    continue
                ok, why = check_call(name, args, expected, function)
                if ok:
                    matched.add(j)
                    break
                first_error = first_error or why
            else:
                return (
                    False,
                    f"parallel_function_checker_no_order:cannot_find_match: expected call {i + 1} ({first_error})",
                )
        return True, f"all {len(truth)} calls match"
    kind = "multiple" if "multiple" in category else "simple"
    if len(calls) != (len(truth) if kind == "multiple" else 1):
        expected = len(truth) if kind == "multiple" else 1
        return False, f"{kind}_function_checker:wrong_count: {len(calls)} calls, expected {expected}"
    function = _find(functions, _expected_name(truth[0])) if kind == "multiple" else (functions or [None])[0]
    name, args = calls[0]
    return check_call(name, args, truth[0], function)


def check_output(
    calls: list[Call], decodes: bool, truth: list[dict[str, Any]], functions: list[dict[str, Any]], category: str
) -> Result:
    """A whole model output: its well-formed calls, and whether it decodes (False when any call is malformed)."""
    made_a_call = decodes and bool(calls)
    if "irrelevance" in category:
        if made_a_call:
            return False, f"irrelevance_error:decoder_success: called {calls[0][0]!r}, but no function fits"
        return True, "no call made, as none of the functions fits" if decodes else "output does not decode to a call"
    if "relevance" in category:
        return (True, f"called {calls[0][0]!r}") if made_a_call else (False, "relevance_error: no call decoded")
    if not decodes:
        return False, "ast_decoder:decoder_failed: a call is malformed"
    if not calls:
        return False, "no call made"
    return check_calls(calls, truth, functions, category)
