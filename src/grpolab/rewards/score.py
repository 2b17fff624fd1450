"""Scoring a transcript: every component's value and reason, their weighted sum, and the `F:+1.0 | ...` breakdown.

A reward component that raises is not scored 0: its value is NaN, the error is kept on the result, and the trainer
skips the step and counts it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grpolab.envs.base import Environment, Task
from grpolab.rewards.components import (
    COMPONENTS,
    DEFAULT_LENGTH_UNIT,
    THOUGHT_MIN_WORDS,
    RewardContext,
    default_weights,
    letter,
    standard_names,
)
from grpolab.rewards.replay import replay


@dataclass
class Score:
    components: dict[str, float]
    """Unweighted component values."""
    reasons: dict[str, str]
    weights: dict[str, float]
    errors: dict[str, str] = field(default_factory=dict)
    """Components that raised, with the error."""
    valid_calls: int = 0
    """Schema-valid tool calls in the episode (tool_call_prob counts episodes with at least one)."""

    @property
    def solved(self) -> bool:
        """The strict verifier's verdict: full completion credit."""
        return self.components.get("completion") == 1.0

    @property
    def total(self) -> float:
        return sum(self.weights.get(k, 0.0) * v for k, v in self.components.items())

    def weighted(self, name: str) -> float:
        return self.weights.get(name, 0.0) * self.components[name]

    @property
    def breakdown(self) -> str:
        return breakdown(self.components, self.weights)

    def to_json(self) -> dict[str, Any]:
        return {
            "total": _finite_or_none(self.total),
            "components": {k: _finite_or_none(v) for k, v in self.components.items()},
            "weighted": {k: _finite_or_none(self.weighted(k)) for k in self.components},
            "reasons": self.reasons,
            "breakdown": self.breakdown,
            "errors": self.errors,
            "valid_calls": self.valid_calls,
        }


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _short_number(x: float) -> str:
    if not math.isfinite(x):
        return "nan"
    text = f"{x:+.2f}"
    return text[:-1] if text.endswith("0") else text


def breakdown(components: dict[str, float], weights: dict[str, float]) -> str:
    """`F:+1.0 | S:+1.5 | C:+3.0 | L:-0.15` (weighted values)."""
    return " | ".join(f"{letter(k)}:{_short_number(weights.get(k, 0.0) * v)}" for k, v in components.items())


def score_transcript(
    env: Environment,
    task: Task,
    text: str,
    weights: dict[str, float] | None = None,
    length_unit: int = DEFAULT_LENGTH_UNIT,
    gen_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    thought_min_words: int = THOUGHT_MIN_WORDS,
) -> Score:
    """Score an assistant transcript (tool responses included) by re-executing its calls.

    `gen_tokens` is the number of policy tokens when the caller has them (the trainer); otherwise the model's own
    text is counted with `count_tokens` (the run's model's: `models.model_token_counter(cfg.model)`; default: the
    embedded model's tokenizer).
    """
    weights = dict(default_weights() if weights is None else weights)
    r = replay(env, task, text)
    if gen_tokens is None:
        if count_tokens is None:
            from grpolab.models import EMBEDDED, model_token_counter

            count_tokens = model_token_counter(EMBEDDED)
        gen_tokens = count_tokens(r.generated_text)
    ctx = RewardContext(gen_tokens=gen_tokens, length_unit=length_unit, thought_min_words=thought_min_words)
    components, reasons, errors = {}, {}, {}
    standard = standard_names()
    # the standard components are always computed (logged even at weight 0), then any others that are weighted
    for name in [*standard, *(n for n in weights if n not in standard)]:
        try:
            value, reason = COMPONENTS[name].fn(r, task, env, ctx)
        except Exception as exc:  # counted and shown, never silently 0
            value, reason = math.nan, f"error: {type(exc).__name__}: {exc}"
            errors[name] = reason
        components[name], reasons[name] = float(value), reason
    valid_calls = sum(p is None for p in r.call_problems)
    return Score(components=components, reasons=reasons, weights=weights, errors=errors, valid_calls=valid_calls)


def score_episodes(
    env: Environment,
    episodes: list[Any],
    weights: dict[str, float],
    length_unit: int,
    thought_min_words: int = THOUGHT_MIN_WORDS,
) -> None:
    """Score generated episodes in place (`episode.score`), counting their policy tokens as generated."""
    for e in episodes:
        e.score = score_transcript(
            env, e.task, e.text, weights, length_unit, gen_tokens=e.n_policy_tokens, thought_min_words=thought_min_words
        )
