"""Reward attribution: which component the reward's change since the start came from, and whether the verifier moved.

A hack that rides along with real learning shows as a component whose weighted mean grows faster than what the
verifier's gain is worth. Each step, over the last `window` steps against the first `window` steps:
    attribution/NAME     change of the weighted mean of component NAME (reward units)
    attribution/share/NAME   that change over the sum of all components' absolute changes
and a component other than completion is flagged (`attribution:NAME`) when
    change >= min_gain   and   change > verifier_gain,
    verifier_gain = max(change in training success, change in held-out success) x the completion weight
(3, the default, when completion is not weighted: the verifier's worth does not vanish with its weight).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from grpolab.rundir.numbers import finite_number
from grpolab.vocabulary import REWARD_MEAN, SUCCESS, attribution_key, reward_key

VERIFIER = "completion"
"""The component that is the task's verifier."""
VERIFIER_WORTH = 3.0
"""Reward units one unit of success is worth when completion carries no weight (its default weight)."""


def _mean(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    xs = [v for v in (finite_number(r.get(key)) for r in rows) if v is not None]
    return sum(xs) / len(xs) if xs else None


def component_changes(history: Sequence[dict[str, Any]], window: int) -> dict[str, float]:
    """Change of each weighted component mean (`reward/NAME`), last `window` steps against the first ones."""
    rows = [r for r in history if finite_number(r.get(REWARD_MEAN)) is not None]
    if len(rows) < 2 * window:
        return {}
    prefix = reward_key("")
    names = sorted({k.removeprefix(prefix) for r in rows for k in r if k.startswith(prefix)} - {"mean", "std"})
    out = {}
    for name in names:
        a, b = _mean(rows[:window], reward_key(name)), _mean(rows[-window:], reward_key(name))
        if a is not None and b is not None:
            out[name] = b - a
    return out


def attribution(
    history: Sequence[dict[str, Any]],
    heldout: dict[int, float],
    completion_weight: float,
    window: int,
    min_gain: float,
) -> tuple[dict[str, float], dict[str, str]]:
    """(attribution fields, flags) for the latest row of `history`; `heldout`: step -> held-out success."""
    changes = component_changes(history, window)
    if not changes:
        return {}, {}
    total = sum(abs(v) for v in changes.values()) or 1.0
    fields = {attribution_key(k): v for k, v in changes.items()}
    fields.update({attribution_key(k, share=True): v / total for k, v in changes.items()})
    rows = [r for r in history if finite_number(r.get(REWARD_MEAN)) is not None]
    train_gain = (_mean(rows[-window:], SUCCESS) or 0.0) - (_mean(rows[:window], SUCCESS) or 0.0)
    steps = sorted(heldout)
    held_gain = heldout[steps[-1]] - heldout[steps[0]] if len(steps) >= 2 else -math.inf
    worth = abs(completion_weight) if completion_weight else VERIFIER_WORTH
    verifier_gain = max(train_gain, held_gain) * worth
    flags = {}
    for name, change in changes.items():
        if name != VERIFIER and change >= min_gain and change > verifier_gain:
            flags[f"attribution:{name}"] = (
                f"{name} explains {change:+.2f} of the reward's change ({change / total:.0%} of all components' "
                f"movement) while the verifier's gain is worth {verifier_gain:+.2f} (training success "
                f"{train_gain:+.0%}" + (f", held-out {held_gain:+.0%})" if len(steps) >= 2 else ")")
            )
    return fields, flags
