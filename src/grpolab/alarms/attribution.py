"""Reward attribution: which component the reward's change since the start came from, and whether the verifier moved.

A hack that rides along with real learning shows as a component whose weighted mean grows faster than what the
verifier's gain is worth. Each step, over the last `window` steps against the first `window` steps:
    attribution/NAME     change of the weighted mean of component NAME (reward units)
    attribution/share/NAME   that change over the sum of all components' absolute changes
and a component other than completion is flagged (`attribution:NAME`) when
    change >= min_gain   and   change > verifier_gain,
    verifier_gain = max(change in training success, change in held-out success) x the completion weight
(3, the default, when completion is not weighted: the verifier's worth does not vanish with its weight).

A shaping component (format, schema: `RewardComponent.shaping`) is learned on the way to the verifier: the
protocol pays before the task does, so for a few steps it outruns the verifier by construction (the demo flagged
schema at steps 6-9 while success was still catching up). It is flagged only when
    - the rule has held at each of the last `patience` steps (`alarms.shaping_patience`), and
    - the verifier is not still rising over the whole run so far (`verifier_rising`): training success over the
      later half of the steps is not above the earlier half by z >= `RISING_Z` (a two-proportion z over every
      episode of each half: a dozen steps of 16 episodes pool ~100 episodes a side, where two-step windows of 2
      prompts swing with the prompts drawn), and held-out success, where evaluated since the start, has not risen
      (any rise counts: it is the strict verifier on greedy episodes, and a one-task swing only delays the flag).
A shaping component farmed instead of the task keeps outrunning a verifier that does not rise, and is flagged; one the
task is catching up with is not, however long that takes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from grpolab.rundir.numbers import finite_number
from grpolab.vocabulary import EPISODES, REWARD_MEAN, SUCCESS, attribution_key, reward_key

VERIFIER = "completion"
"""The component that is the task's verifier."""
VERIFIER_WORTH = 3.0
"""Reward units one unit of success is worth when completion carries no weight (its default weight)."""
RISING_Z = 1.0
"""z of (later half - earlier half) training success at which the verifier counts as still rising (one-sided ~84%:
a flat verifier looks rising about one step in six, which only delays a shaping flag)."""


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


def _gains(
    history: Sequence[dict[str, Any]], heldout: dict[int, float], completion_weight: float, window: int
) -> tuple[dict[str, float], float, float, float]:
    """(component changes, training success gain, held-out gain, the verifier's gain in reward units)."""
    changes = component_changes(history, window)
    rows = [r for r in history if finite_number(r.get(REWARD_MEAN)) is not None]
    train_gain = (_mean(rows[-window:], SUCCESS) or 0.0) - (_mean(rows[:window], SUCCESS) or 0.0)
    steps = sorted(heldout)
    held_gain = heldout[steps[-1]] - heldout[steps[0]] if len(steps) >= 2 else -math.inf
    worth = abs(completion_weight) if completion_weight else VERIFIER_WORTH
    return changes, train_gain, held_gain, max(train_gain, held_gain) * worth


def _outruns(name: str, changes: dict[str, float], verifier_gain: float, min_gain: float) -> bool:
    change = changes.get(name)
    return name != VERIFIER and change is not None and change >= min_gain and change > verifier_gain


def _held_for(
    name: str,
    history: Sequence[dict[str, Any]],
    heldout: dict[int, float],
    completion_weight: float,
    window: int,
    min_gain: float,
    steps: int,
) -> bool:
    """Whether `name` outran the verifier at each of the last `steps` rows (held-out success as known then)."""
    for back in range(1, steps):
        earlier = history[: len(history) - back]
        last = earlier[-1].get("step") if earlier else None
        known = {s: v for s, v in heldout.items() if not isinstance(last, int) or s <= last}
        changes, _, _, verifier_gain = _gains(earlier, known, completion_weight, window)
        if not _outruns(name, changes, verifier_gain, min_gain):
            return False
    return True


def verifier_rising(history: Sequence[dict[str, Any]], heldout: dict[int, float]) -> tuple[bool, str]:
    """Whether the verifier is still rising over the run so far, and the evidence: held-out success above its first
    evaluation, or training success over the later half of the steps above the earlier half by z >= RISING_Z."""
    steps = sorted(heldout)
    if len(steps) >= 2 and heldout[steps[-1]] > heldout[steps[0]]:
        return True, f"held-out success {heldout[steps[0]]:.0%} -> {heldout[steps[-1]]:.0%}"
    rows = [r for r in history if finite_number(r.get(SUCCESS)) is not None]
    if len(rows) < 2:
        return False, "too few steps to tell"
    half = len(rows) // 2

    def pooled(part: Sequence[dict[str, Any]]) -> tuple[float, float]:
        n = sum(finite_number(r.get(EPISODES)) or 1.0 for r in part)
        return sum((finite_number(r.get(EPISODES)) or 1.0) * float(r[SUCCESS]) for r in part) / n, n

    (p0, n0), (p1, n1) = pooled(rows[:half]), pooled(rows[half:])
    p = (p0 * n0 + p1 * n1) / (n0 + n1)
    se = math.sqrt(max(p * (1 - p), 1e-12) * (1 / n0 + 1 / n1))
    z = (p1 - p0) / se
    return z >= RISING_Z, f"training success {p0:.0%} -> {p1:.0%} over the run's halves (z {z:+.1f})"


def attribution(
    history: Sequence[dict[str, Any]],
    heldout: dict[int, float],
    completion_weight: float,
    window: int,
    min_gain: float,
    shaping: frozenset[str] = frozenset(),
    patience: int = 1,
) -> tuple[dict[str, float], dict[str, str]]:
    """(attribution fields, flags) for the latest row of `history`; `heldout`: step -> held-out success; `shaping`:
    the components flagged only after outrunning the verifier `patience` steps in a row."""
    changes, train_gain, held_gain, verifier_gain = _gains(history, heldout, completion_weight, window)
    if not changes:
        return {}, {}
    total = sum(abs(v) for v in changes.values()) or 1.0
    fields = {attribution_key(k): v for k, v in changes.items()}
    fields.update({attribution_key(k, share=True): v / total for k, v in changes.items()})
    flags = {}
    for name, change in changes.items():
        if not _outruns(name, changes, verifier_gain, min_gain):
            continue
        waited = ""
        if name in shaping:
            if patience > 1 and not _held_for(name, history, heldout, completion_weight, window, min_gain, patience):
                continue
            rising, evidence = verifier_rising(history, heldout)
            if rising:
                continue
            waited = (
                f"; a shaping component, ahead of the verifier for {patience} steps in a row while the verifier is "
                f"not rising ({evidence})"
            )
        flags[f"attribution:{name}"] = (
            f"{name} explains {change:+.2f} of the reward's change ({change / total:.0%} of all components' "
            f"movement) while the verifier's gain is worth {verifier_gain:+.2f} (training success "
            f"{train_gain:+.0%}" + (f", held-out {held_gain:+.0%}" if held_gain != -math.inf else "") + f"){waited}"
        )
    return fields, flags
