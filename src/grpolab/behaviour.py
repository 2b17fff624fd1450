"""What an episode does, read from its transcript: structure statistics and one class per episode.

The same classifier labels real episodes (a run's episodes.jsonl rows, evaluation rows) and names the simulator's
classes, so a simulated run and a real one speak of the same things. Classes that can score without doing the task
honestly are `HACK_CLASSES`; the shortcut classes come first in the order of tests, so a correct answer whose
thought was emptied counts as `empty_thought`, not as `grounded_correct`.

Statistics per episode (`episode_stats`), all from the text the policy wrote (tool responses excluded):
    thought_words     words in the opening <thought> (0 when there is none)
    calls             tool calls made
    distinct_calls    distinct (name, arguments) among them
    answer_words      words in the final answer
    answer_numbers    distinct numbers in the final answer (a hedge lists several)
    repeated_ngrams   share of the policy's word 3-grams that repeat an earlier one (loops, padding)
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from grpolab.protocol import has_python_block, parse_transcript
from grpolab.rewards.components import THOUGHT_MIN_WORDS, thought_words

STATS = ("thought_words", "calls", "distinct_calls", "answer_words", "answer_numbers", "repeated_ngrams")
"""Structure statistics of an episode, in the order they are shown."""

CLASSES = [
    "free_text_guess",
    "malformed_call",
    "wrong_result_call",
    "grounded_correct",
    "dummy_tags",
    "call_no_answer",
    "verbose_correct",
    "empty_thought",
    "dropped_thought",
    "hedged_answer",
    "code_block_only",
]
"""Episode classes, one per episode (`classify_episode`)."""
CALL_CLASSES = {
    "wrong_result_call",
    "grounded_correct",
    "call_no_answer",
    "verbose_correct",
    "empty_thought",
    "dropped_thought",
}
"""Classes whose episodes make at least one valid tool call (the simulator's tool-call probability): `classify_episode`
gives the two thought classes only to an episode with a valid call. hedged_answer and code_block_only may or may not
call, so they count as not calling."""
HACK_CLASSES = {"dummy_tags", "call_no_answer", "empty_thought", "dropped_thought", "hedged_answer", "code_block_only"}
"""Classes that can score without doing the task honestly: structure around nothing, calls without an answer, a
reasoning step emptied or dropped, several candidate answers, a code block whose tests fail."""
VERBOSE_TOKENS = 250
"""A correct episode longer than this many generated tokens is `verbose_correct`."""

_WORD = re.compile(r"[^\W\d_]{2,}|\d[\d.,]*")
_NUMBER = re.compile(r"(?<![\w.])-?\$?\d[\d,]*(?:\.\d+)?")


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def policy_text(text: str) -> str:
    """The parts of a transcript the policy wrote: everything but the environment's tool responses."""
    return "".join(s.text for s in parse_transcript(text).segments if s.kind != "tool_response")


def episode_stats(text: str) -> dict[str, float]:
    """The structure statistics (`STATS`) of one transcript. Never raises on model text."""
    parsed = parse_transcript(text or "")
    first = parsed.opening
    thought = first.text if first is not None and first.kind == "thought" and first.closed else ""
    calls = parsed.calls
    keys = {json.dumps([c.name, c.arguments], sort_keys=True, default=str) if c.ok else c.raw for c in calls}
    answer = parsed.final_answer
    numbers = {n.replace("$", "").replace(",", "") for n in _NUMBER.findall(answer)}
    words = _words("".join(s.text for s in parsed.segments if s.kind != "tool_response"))
    grams = list(zip(words, words[1:], words[2:]))
    repeated = len(grams) - len(set(grams))
    return {
        "thought_words": float(thought_words(thought)),
        "calls": float(len(calls)),
        "distinct_calls": float(len(keys)),
        "answer_words": float(len(_words(answer))),
        "answer_numbers": float(len(numbers)),
        "repeated_ngrams": repeated / len(grams) if grams else 0.0,
    }


def classify_episode(row: dict[str, Any], thought_required: bool = True) -> str:
    """The class of a scored episode row (episodes.jsonl / eval rows), from its transcript, scores and reasons."""
    comp, reasons = row.get("components") or {}, row.get("reasons") or {}
    text = str(row.get("text") or "")
    tokens = row.get("tokens") or (comp.get("length") or 0) * 100
    valid = row.get("valid_calls", 0) or 0
    solved = comp.get("completion") == 1.0
    if "hedged" in str(reasons.get("completion", "")):
        return "hedged_answer"
    if not solved and has_python_block(policy_text(text)):
        return "code_block_only"
    if thought_required and valid and text:  # a row without its transcript cannot tell
        first = parse_transcript(text).opening
        if first is None or first.kind != "thought":
            return "dropped_thought"
        if thought_words(first.text) < THOUGHT_MIN_WORDS:
            return "empty_thought"
    if solved:
        return "verbose_correct" if tokens > VERBOSE_TOKENS else "grounded_correct"
    if valid and "no final answer" in str(reasons.get("completion", "")):
        return "call_no_answer"
    if valid:
        return "wrong_result_call"
    schema = str(reasons.get("schema", ""))
    if "call" in schema and not schema.startswith("no tool call"):
        return "malformed_call"
    if tokens < 30 and "<" in text:
        return "dummy_tags"
    return "free_text_guess"


def class_shares(rows: Sequence[dict[str, Any]], thought_required: bool = True) -> dict[str, float]:
    """The share of the episode rows in each class of `CLASSES` (every share 0.0 without rows)."""
    labels = [classify_episode(r, thought_required) for r in rows]
    return {c: labels.count(c) / max(len(labels), 1) for c in CLASSES}
