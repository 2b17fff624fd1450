"""The verifiers of env `data`, by name: how a row's answer becomes the truth, and how a final answer is judged.

- exact: the final answer equals the answer once both are normalised (Unicode NFKC, case folded, runs of
  whitespace made one space, quotes, `*` and end punctuation stripped at either end).
- numeric: the final answer states one result number equal to the answer within `tolerance` (default: equal
  when rounded to two decimals); numbers that restate the prompt or a call's arguments are not results, and more
  than one result is a hedge (as `grpolab.envs.numeric` rules for finance and arithmetic).
- regex: the answer is a pattern found in the final answer; or, with `pattern` set, that pattern's match (its
  first group, if it has one) equals the answer under exact's normalisation. Patterns are compiled once by the
  `regex` engine (Python's syntax) and matched with its timeout (`REGEX_TIMEOUT_S`): a backtracking pattern on
  degenerate model text (`^(a+)+b$` on 30 repeated letters took 39 s with `re`) fails that answer, with the reason.
- json: the final answer (whole, in a ```json fence, or from its first `{` or `[`) parses to the answer's value.
- module:function: your `function(final_answer, task, evidence)` returns a Verdict, a bool, or a score in [0, 1]
  (1 passes). What it raises propagates, so that the reward records NaN rather than a silent 0.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import regex as regex_engine

from grpolab.envs.base import Evidence, Task, Verdict
from grpolab.envs.data.modules import load_function
from grpolab.envs.numeric import ANSWER_TOLERANCE, extract_numbers, numbers_in
from grpolab.files.limits import MAX_NESTING
from grpolab.files.nesting import too_deep
from grpolab.files.user_input import NotFinite, loads_finite

if TYPE_CHECKING:  # the config stands above the environments (it reads the reward table, which reads them)
    from grpolab.config import DataEnvConfig

_SHOWN = 80
"""Characters of a final answer quoted in a verdict's reason."""
REGEX_TIMEOUT_S = 1.0
"""Seconds one match of a regex verifier's pattern may take on one final answer (model text is untrusted)."""


@lru_cache(maxsize=1024)
def compiled(pattern: str) -> regex_engine.Pattern:
    """A verifier's pattern compiled once (the `regex` engine, Python's syntax); ValueError when it is not one."""
    try:
        return regex_engine.compile(pattern)
    except (regex_engine.error, OverflowError, RecursionError) as exc:
        raise ValueError(f"not a valid regular expression ({exc})") from None


def bounded_search(pattern: regex_engine.Pattern, text: str) -> regex_engine.Match | None:
    """`pattern.search(text)` within `REGEX_TIMEOUT_S` (TimeoutError past it)."""
    return pattern.search(text, timeout=REGEX_TIMEOUT_S)


def _timed_out(pattern: str) -> Verdict:
    return Verdict(False, f"the pattern {_shown(pattern)} timed out after {REGEX_TIMEOUT_S:g} s on the final answer")


@dataclass(frozen=True)
class AnswerCheck:
    """A verifier: `truth` turns a row's answer into what `verify` compares with (ValueError: a bad answer)."""

    truth: Callable[[Any], Any]
    verify: Callable[[str, Task, Evidence], Verdict]
    user_code: bool = False
    """A user's function: not run on the reference answers when the rows load (it may need real tool output)."""
    answer_is_reference: bool = True
    """The answer as written passes as a final answer (a pattern need not): rows may leave reference_answer out."""


def normalise(text: str) -> str:
    """Text as exact compares it: NFKC, case folded, whitespace runs as one space, quotes and end marks trimmed."""
    folded = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    return folded.strip(" .!?,;:'\"`*")


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def _as_text(answer: Any) -> str:
    if isinstance(answer, (dict, list)):
        raise ValueError("this verifier needs a string or a number")
    return answer if isinstance(answer, str) else json.dumps(answer)


def exact(settings: DataEnvConfig) -> AnswerCheck:
    def verify(final: str, task: Task, evidence: Evidence) -> Verdict:
        if normalise(final) == normalise(task.truth):
            return Verdict(True, f"correct: {_shown(task.truth)}")
        return Verdict(False, f"expected {_shown(task.truth)}, got {_shown(final.strip())}")

    return AnswerCheck(_as_text, verify)


def numeric(settings: DataEnvConfig) -> AnswerCheck:
    tolerance = ANSWER_TOLERANCE if settings.tolerance is None else settings.tolerance

    def truth(answer: Any) -> float:
        if isinstance(answer, bool) or isinstance(answer, (dict, list)):
            raise ValueError("verifier numeric needs a number")
        if isinstance(answer, (int, float)):
            return float(answer)
        numbers = extract_numbers(answer)
        if len(numbers) != 1:
            raise ValueError(f"verifier numeric needs one number, {answer!r} holds {len(numbers)}")
        return numbers[0]

    def verify(final: str, task: Task, evidence: Evidence) -> Verdict:
        context = numbers_in(evidence.prompt) + [n for _, args in evidence.calls for n in numbers_in(args)]
        numbers = extract_numbers(final)
        results = [n for n in numbers if not any(abs(n - c) <= 1e-9 for c in context)]
        if not results:  # the result may equal an input: then it is the one near the truth
            results = [n for n in numbers if abs(n - task.truth) <= tolerance]
        distinct: list[float] = []
        for n in results:
            if not any(abs(n - d) <= tolerance for d in distinct):
                distinct.append(n)
        if not distinct:
            return Verdict(False, "no result number in the final answer")
        if len(distinct) > 1:
            shown = ", ".join(f"{d:g}" for d in distinct[:4])
            return Verdict(False, f"hedged: {len(distinct)} candidate results ({shown})")
        if abs(distinct[0] - task.truth) > tolerance:
            return Verdict(False, f"answer {distinct[0]:g} is not {task.truth:g} (within {tolerance:g})")
        return Verdict(True, f"correct: {distinct[0]:g} (expected {task.truth:g})")

    return AnswerCheck(truth, verify)


def regex(settings: DataEnvConfig) -> AnswerCheck:
    if settings.pattern:
        pattern = compiled(settings.pattern)

        def verify_match(final: str, task: Task, evidence: Evidence) -> Verdict:
            try:
                match = bounded_search(pattern, final)
            except TimeoutError:
                return _timed_out(settings.pattern)
            if match is None:
                return Verdict(False, f"no match of {_shown(settings.pattern)} in the final answer")
            found = match.group(1) if pattern.groups else match.group(0)
            if normalise(found or "") == normalise(task.truth):
                return Verdict(True, f"correct: {_shown(task.truth)}")
            return Verdict(False, f"expected {_shown(task.truth)}, the pattern found {_shown(found or '')}")

        return AnswerCheck(_as_text, verify_match)

    def truth(answer: Any) -> str:
        text = _as_text(answer)
        compiled(text)  # ValueError: a row whose answer is not a pattern
        return text

    def verify(final: str, task: Task, evidence: Evidence) -> Verdict:
        try:
            found = bounded_search(compiled(task.truth), final)
        except TimeoutError:
            return _timed_out(task.truth)
        if found:
            return Verdict(True, f"matches {_shown(task.truth)}")
        return Verdict(False, f"no match of {_shown(task.truth)} in {_shown(final.strip())}")

    return AnswerCheck(truth, verify, answer_is_reference=False)


def parse_json_answer(text: str) -> Any:
    """The JSON value a final answer gives: the whole text, a ```json fence's content, or the value that starts
    at its first `{` or `[`. ValueError when there is none (model text: never raises anything else)."""
    fence = re.search(r"```(?:json)?\s*\n(.*?)```", text, re.S)
    candidates = [text.strip()] + ([fence.group(1).strip()] if fence else [])
    for candidate in candidates:
        try:
            return _finite_json(candidate)
        except ValueError:
            pass
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if starts and not too_deep(text[min(starts) :]):
        try:
            value, _ = json.JSONDecoder().raw_decode(text, min(starts))
            return _finite_json(json.dumps(value))  # NaN, Infinity and 1e400 are refused as in a whole answer
        except (ValueError, RecursionError):
            pass
    raise ValueError("no JSON value in the final answer")


def _finite_json(text: str) -> Any:
    if too_deep(text):
        raise ValueError(f"nests deeper than {MAX_NESTING} levels")
    try:
        return loads_finite(text)
    except (NotFinite, RecursionError) as exc:
        raise ValueError(str(exc)) from None


def same_json(a: Any, b: Any) -> bool:
    """JSON equality where true is not 1 (Python's == says it is) and 1 is 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def json_value(settings: DataEnvConfig) -> AnswerCheck:
    def truth(answer: Any) -> Any:
        if not isinstance(answer, str):
            return answer
        try:
            return _finite_json(answer)
        except ValueError as exc:
            raise ValueError(f"a string answer must be JSON text for verifier json ({exc})") from None

    def verify(final: str, task: Task, evidence: Evidence) -> Verdict:
        try:
            value = parse_json_answer(final)
        except ValueError as exc:
            return Verdict(False, str(exc))
        if same_json(value, task.truth):
            return Verdict(True, "correct: the JSON value equals the answer")
        return Verdict(False, f"JSON {_shown(json.dumps(value))} differs from {_shown(json.dumps(task.truth))}")

    return AnswerCheck(truth, verify)


CHECKS: dict[str, Callable[[DataEnvConfig], AnswerCheck]] = {  # the names are config.DATA_VERIFIERS
    "exact": exact,
    "numeric": numeric,
    "regex": regex,
    "json": json_value,
}


def user_check(spec: str) -> AnswerCheck:
    """`module:function`: the user's function judges; its answer is the row's answer as written."""
    function = load_function(spec, "verifier module")

    def verify(final: str, task: Task, evidence: Evidence) -> Verdict:
        return as_verdict(function(final, task, evidence), spec)

    return AnswerCheck(lambda answer: answer, verify, user_code=True)


def as_verdict(value: Any, spec: str) -> Verdict:
    """A user verifier's return value as a Verdict (a bool passes or fails; a score in [0, 1] passes at 1)."""
    if isinstance(value, Verdict):
        return value
    if isinstance(value, bool):
        return Verdict(value, f"{spec} returned {value}")
    if isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= 1:
        return Verdict(value >= 1, f"{spec} scored {value:g}", score=float(value))
    raise TypeError(f"verifier {spec} returned {value!r}; return a Verdict, a bool, or a score in [0, 1]")


def check_for(settings: DataEnvConfig) -> AnswerCheck:
    """The verifier the config names, exact when it names none (a user's is imported now: a missing module fails
    before any model loads)."""
    name = settings.verifier or "exact"
    if name in CHECKS:
        return CHECKS[name](settings)
    return user_check(name)
