"""Verifying answers that state one result number: extraction, hedges, sign words, grounding in tool output."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from grpolab.envs.base import Verdict

_NUMBER_RE = re.compile(r"(?<![\w.])([-−]?)\$?(\d[\d,]*(?:\.\d+)?|\.\d+)")
_DECREASE = re.compile(r"\b(fell|fall|decreas\w*|declin\w*|drop\w*|down|lost|los\w*|shr[ai]nk\w*|lower)\b", re.I)
_INCREASE = re.compile(r"\b(rose|rise|increas\w*|gain\w*|grew|grow\w*|up|climb\w*|higher)\b", re.I)
ANSWER_TOLERANCE = 0.0051
"""A result matches when it rounds to the truth at two decimals (14.17 or 14.1667 for 14.1666...)."""


_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n")


def result_sentence_end(answer: str, results: Sequence[float]) -> int | None:
    """The end of the first sentence that states one of `results` (the numbers the episode's computing tool
    returned; the verifier's own grounding rule, at its tolerance), just past its `.`, `!` or `?` when whitespace
    follows or at the line break; None while no such sentence is complete. This is where a one-result answer is
    done: "ACME's stock changed by 14.17% in Q3 (from $120.00 to $137.00). This ..." ends after "00)." when the
    calculator returned 14.1667 (the point in "14.17" is not an end: a sentence ends where whitespace follows).
    - Sentences that only restate inputs ("PINN Q4 report: EPS $0.09 vs estimate $0.39.") and steps before the
      computation ("I compute (137 - 120) / 120 * 100.") state no result, so they do not end the answer.
    - The sentence ends the answer only once the text after it has begun, and not with a tag: "The difference is
      0.4.\n<tool_call>..." is a step before another call."""
    for match in _NUMBER_RE.finditer(answer):
        numbers = extract_numbers(match.group())
        if not numbers or not _among(numbers[0], results, ANSWER_TOLERANCE):
            continue
        end = _SENTENCE_END.search(answer, match.start())
        if end is None:
            return None
        after = answer[end.end() :].lstrip()
        if not after or after.startswith("<"):
            return None
        return end.end() if end.group() != "\n" else end.start()
    return None


def _among(value: float, values: Sequence[float], tol: float) -> bool:
    return any(_near(abs(value), abs(v), tol) for v in values)


def extract_numbers(text: str) -> list[float]:
    """Numbers written in text ("$1,234.5", "-3", "14.17%"), as floats. Never raises."""
    out = []
    for sign, digits in _NUMBER_RE.findall(text or ""):
        try:
            value = float(digits.replace(",", ""))
        except ValueError:
            continue
        if math.isfinite(value):
            out.append(-value if sign else value)
    return out


def numbers_in(values: Any) -> list[float]:
    """All numbers inside a JSON-like value (dict values, lists, numeric strings)."""
    if isinstance(values, bool):
        return []
    if isinstance(values, (int, float)):
        return [float(values)] if math.isfinite(values) else []
    if isinstance(values, str):
        return extract_numbers(values)
    if isinstance(values, dict):
        return [n for v in values.values() for n in numbers_in(v)]
    if isinstance(values, (list, tuple)):
        return [n for v in values for n in numbers_in(v)]
    return []


def _near(a: float, b: float, tol: float = ANSWER_TOLERANCE) -> bool:
    return abs(a - b) <= tol


def numeric_verdict(
    answer: str,
    truth: float,
    context: list[float],
    grounding: list[float] | None,
    signed: bool = True,
) -> Verdict:
    """Check a final answer that should state one result number.

    - Numbers that restate the inputs (prompt, tool arguments, looked-up facts: `context`) are not candidates.
    - More than one distinct candidate is a hedge and fails ("maybe 14% or 15%").
    - The candidate must match the truth at two decimals; with `signed`, its direction must match too, written
      either as a minus sign or a word (fell, decreased...).
    - With `grounding` (numbers from real tool output in this episode), the result must appear there.
    """
    numbers = extract_numbers(answer)
    candidates = [n for n in numbers if not any(_near(abs(n), abs(c), 1e-9) for c in context)]
    if not candidates:
        candidates = [n for n in numbers if _near(abs(n), abs(truth))]
        if not candidates:
            return Verdict(False, "no result number in the final answer")
    distinct: list[float] = []
    for n in candidates:
        if not any(_near(abs(n), abs(d)) for d in distinct):
            distinct.append(n)
    if len(distinct) > 1:
        shown = ", ".join(f"{d:g}" for d in distinct[:4])
        return Verdict(False, f"hedged: {len(distinct)} candidate results ({shown})")
    value = distinct[0]
    if not _near(abs(value), abs(truth)):
        return Verdict(False, f"answer {value:g} does not match expected {truth:.2f}")
    if signed and truth != 0:
        said_down = value < 0 or (bool(_DECREASE.search(answer)) and not _INCREASE.search(answer))
        if said_down != (truth < 0):
            return Verdict(False, f"wrong direction: expected {'a decrease' if truth < 0 else 'an increase'}")
    if grounding is not None and not any(_near(abs(value), abs(g)) for g in grounding):
        return Verdict(False, f"not grounded: {value:g} does not appear in any real tool output of this episode")
    return Verdict(True, f"correct: {value:g} (expected {truth:.2f}), grounded in tool output")
