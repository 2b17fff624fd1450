"""Episode metrics under one vocabulary (docs/design.md, "Metrics"), computed in one place.

The native trainer, the TRL backend, held-out evaluation, preflight and the simulator all name their numbers with
these keys, and the report and the web lab read them back under the same names:

    reward/mean, reward/std, reward/NAME (weighted, one per component in `grpolab.rewards.components`)
    frac_zero_std, tool_call_prob, success, completion_len, turns, tool_errors, reward_errors, episodes
    heldout/success, heldout/tool_call_prob, heldout/schema, heldout/reward, heldout/n, heldout/success/KIND
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from grpolab.envs.base import Task
from grpolab.rewards.score import Score


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


def reward_key(name: str) -> str:
    """`reward/format` for the format component: the metric name of a weighted component mean."""
    return f"reward/{name}"


def tool_call_prob(scores: Sequence[Score]) -> float:
    """Fraction of episodes with at least one schema-valid tool call (P_theta; the base model's is the base prior)."""
    return mean([1.0 if s.valid_calls > 0 else 0.0 for s in scores])


def success_rate(scores: Sequence[Score]) -> float:
    """Fraction of episodes the strict verifier accepts (full completion credit)."""
    return mean([1.0 if s.solved else 0.0 for s in scores])


def reward_means(scores: Sequence[Score]) -> dict[str, float]:
    """reward/mean and the weighted mean of each component (reward/format, ...) over scored episodes."""
    out = {"reward/mean": mean([s.total for s in scores])}
    for name in scores[0].components if scores else []:
        out[reward_key(name)] = mean([s.weighted(name) for s in scores])
    return out


def group_stats(groups: Sequence[Sequence[float]]) -> dict[str, float]:
    """reward/std over all episodes and frac_zero_std: the share of groups whose rewards are all equal."""
    flat = [r for g in groups for r in g]
    m = sum(flat) / len(flat) if flat else 0.0
    std = math.sqrt(sum((r - m) ** 2 for r in flat) / len(flat)) if flat else 0.0
    zero = [1.0 if len(set(g)) <= 1 else 0.0 for g in groups]
    return {"reward/std": std, "frac_zero_std": sum(zero) / len(zero) if zero else 0.0}


def episode_metrics(episodes: Sequence[ScoredEpisode]) -> dict[str, float]:
    """Per-step means over scored episodes: rewards, tool use, success, length, turns, tool errors."""
    scores = [e.score for e in episodes if e.score is not None]
    return {
        **reward_means(scores),
        "episodes": float(len(episodes)),
        "reward_errors": float(sum(len(s.errors) for s in scores)),
        "tool_call_prob": tool_call_prob(scores),
        "success": success_rate(scores),
        "completion_len": mean([float(e.n_policy_tokens) for e in episodes]),
        "turns": mean([float(e.turns) for e in episodes]),
        "tool_errors": mean([float(e.tool_errors) for e in episodes]),
    }


def heldout_summary(episodes: Sequence[ScoredEpisode]) -> dict[str, float]:
    """Held-out metrics: success (strict verifier), tool_call_prob, schema validity, reward; per kind when mixed."""
    scores = [e.score for e in episodes if e.score is not None]
    out: dict[str, float] = {}
    kinds = sorted({e.task.kind for e in episodes})
    if len(kinds) > 1:
        for kind in kinds:
            of_kind = [e.score for e in episodes if e.task.kind == kind and e.score is not None]
            out[f"heldout/success/{kind}"] = success_rate(of_kind)
            out[f"heldout/n/{kind}"] = float(len(of_kind))
    return {
        **out,
        "heldout/success": success_rate(scores),
        "heldout/tool_call_prob": tool_call_prob(scores),
        "heldout/schema": mean([s.components.get("schema", 0.0) for s in scores]),
        "heldout/reward": mean([s.total for s in scores]),
        "heldout/n": float(len(scores)),
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
