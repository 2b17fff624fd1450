"""Episode metrics, computed in one place under the names `grpolab.vocabulary` declares (docs/design.md, "Metrics").

The native trainer, the TRL backend, held-out evaluation and preflight compute their episode numbers here; the
report and the web lab read them back under the same names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from grpolab.envs.base import Task
from grpolab.rewards.score import Score
from grpolab.vocabulary import (
    COMPLETION_LEN,
    EPISODES,
    FRAC_ZERO_STD,
    HELDOUT_N,
    HELDOUT_REWARD,
    HELDOUT_SCHEMA,
    HELDOUT_SUCCESS,
    HELDOUT_TOOL_CALL_PROB,
    REWARD_ERRORS,
    REWARD_MEAN,
    REWARD_STD,
    SUCCESS,
    TOOL_CALL_PROB,
    TOOL_ERRORS,
    TURNS,
    heldout_of_kind,
    reward_key,
)


class ScoredEpisode(Protocol):
    task: Task
    group: int
    text: str
    turns: int
    tool_errors: int
    stop_reason: str
    score: Score | None

    @property
    def n_policy_tokens(self) -> int: ...


def mean(xs: Sequence[float]) -> float:
    """Mean of the finite values (NaN when there are none)."""
    finite = [x for x in xs if math.isfinite(x)]
    return sum(finite) / len(finite) if finite else float("nan")


def tool_call_prob(scores: Sequence[Score]) -> float:
    """Fraction of episodes with at least one schema-valid tool call (P_theta; the base model's is the base prior)."""
    return mean([1.0 if s.valid_calls > 0 else 0.0 for s in scores])


def success_rate(scores: Sequence[Score]) -> float:
    """Fraction of episodes the strict verifier accepts (full completion credit)."""
    return mean([1.0 if s.solved else 0.0 for s in scores])


def reward_means(scores: Sequence[Score]) -> dict[str, float]:
    """reward/mean and the weighted mean of each component (reward/format, ...) over scored episodes."""
    out = {REWARD_MEAN: mean([s.total for s in scores])}
    for name in scores[0].components if scores else []:
        out[reward_key(name)] = mean([s.weighted(name) for s in scores])
    return out


def group_stats(groups: Sequence[Sequence[float]]) -> dict[str, float]:
    """reward/std over all episodes and frac_zero_std: the share of groups whose rewards are all equal."""
    flat = [r for g in groups for r in g]
    m = sum(flat) / len(flat) if flat else 0.0
    std = math.sqrt(sum((r - m) ** 2 for r in flat) / len(flat)) if flat else 0.0
    zero = [1.0 if len(set(g)) <= 1 else 0.0 for g in groups]
    return {REWARD_STD: std, FRAC_ZERO_STD: sum(zero) / len(zero) if zero else 0.0}


def episode_metrics(episodes: Sequence[ScoredEpisode]) -> dict[str, float]:
    """Per-step means over scored episodes: rewards, tool use, success, length, turns, tool errors."""
    scores = [e.score for e in episodes if e.score is not None]
    return {
        **reward_means(scores),
        EPISODES: float(len(episodes)),
        REWARD_ERRORS: float(sum(len(s.errors) for s in scores)),
        TOOL_CALL_PROB: tool_call_prob(scores),
        SUCCESS: success_rate(scores),
        COMPLETION_LEN: mean([float(e.n_policy_tokens) for e in episodes]),
        TURNS: mean([float(e.turns) for e in episodes]),
        TOOL_ERRORS: mean([float(e.tool_errors) for e in episodes]),
    }


def heldout_summary(episodes: Sequence[ScoredEpisode]) -> dict[str, float]:
    """Held-out metrics: success (strict verifier), tool_call_prob, schema validity, reward; per kind when mixed."""
    scores = [e.score for e in episodes if e.score is not None]
    out: dict[str, float] = {}
    kinds = sorted({e.task.kind for e in episodes})
    if len(kinds) > 1:
        for kind in kinds:
            of_kind = [e.score for e in episodes if e.task.kind == kind and e.score is not None]
            out[heldout_of_kind(HELDOUT_SUCCESS, kind)] = success_rate(of_kind)
            out[heldout_of_kind(HELDOUT_N, kind)] = float(len(of_kind))
    return {
        **out,
        HELDOUT_SUCCESS: success_rate(scores),
        HELDOUT_TOOL_CALL_PROB: tool_call_prob(scores),
        HELDOUT_SCHEMA: mean([s.components.get("schema", 0.0) for s in scores]),
        HELDOUT_REWARD: mean([s.total for s in scores]),
        HELDOUT_N: float(len(scores)),
    }


def episode_row(e: ScoredEpisode, step: int | None = None) -> dict[str, Any]:
    """An episode as a row of episodes.jsonl / eval/LABEL.jsonl: prompt, transcript, rewards and their reasons."""
    assert e.score is not None
    row = {
        "task_id": e.task.id,
        "kind": e.task.kind,
        "group": e.group,
        "prompt": e.task.prompt,
        "answer": e.task.answer,
        "text": e.text,
        "tokens": e.n_policy_tokens,
        "turns": e.turns,
        "stop": e.stop_reason,
        **e.score.to_json(),
    }
    return row if step is None else {"step": step, **row}
