"""Behaviour drift: what the episodes do, step by step, and an alarm when it moves without the verifier's reason.

Each step's sampled episodes are summarised (`step_behaviour`) into metric fields:
    behaviour/STAT            mean over the step's episodes (STAT in `grpolab.behaviour.STATS`)
    behaviour/STAT/sd         their standard deviation
    behaviour/STAT/solved     mean over the episodes the strict verifier accepted (absent when none was)
    class/NAME                share of the step's episodes in each class (`grpolab.behaviour.CLASSES`)

The drift alarm (`drift_alarms`) compares the last `alarms.drift_window` steps with the first ones. Real learning
moves the statistics too, because solved episodes look different from failed ones (two calls instead of one, an
answer instead of none); the alarm discounts that. A statistic's change is measured *within* verdicts:
    delta = p1 * (solved1 - solved0) + (1 - p1) * (failed1 - failed0)
with p1 the recent success rate and solved0/failed0 the start's means of solved and failed episodes (the start's
overall mean stands in for a verdict with no episode at the start). The alarm fires when
    |delta| >= alarms.drift_z * max(sd0, floor)   and   |delta| >= alarms.drift_rel * max(|mean0|, floor)
(sd0: the start's per-episode standard deviation; floor: the smallest change that means something for that
statistic, `FLOORS`), or when a hack class's share (`HACK_CLASSES`) grew by at least `alarms.drift_share` and by at
least `alarms.drift_class_z` standard errors of a two-proportion test over the windows' episodes (`share_z`): a share
of 6 episodes moves by 0.17 for one episode, of 48 by 0.02, so a threshold in standard errors means the same false-alarm
rate on a small run and a large one, where a share threshold alone does not.

A reward component that is not built in (a plugin's, an environment's own) is a statistic too, `component:NAME`
(its unweighted value per episode): what a user's reward pays for is watched by its name, as the built-in structure
statistics are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from grpolab.behaviour import HACK_CLASSES, STATS, class_shares, episode_stats
from grpolab.rewards.components import BUILTIN_NAMES
from grpolab.rundir.numbers import finite_number
from grpolab.vocabulary import EPISODES, SUCCESS, behaviour_key, class_key

FLOORS = {
    "thought_words": 2.0,
    "calls": 0.5,
    "distinct_calls": 0.5,
    "answer_words": 2.0,
    "answer_numbers": 0.5,
    "repeated_ngrams": 0.05,
}
"""The smallest change of each statistic that means something (2 words, half a call, 5% repeated 3-grams)."""
COMPONENT_FLOOR = 0.1
"""The same for a user's reward component (`component:NAME`): a tenth of a 0..1 component's range."""
COMPONENT_STAT = "component:"


def component_stats(rows: Sequence[dict[str, Any]]) -> list[str]:
    """`component:NAME` for each reward component the rows carry that is not built in, in order of appearance."""
    names = (k for r in rows for k in (r.get("components") or {}) if k not in BUILTIN_NAMES)
    return [COMPONENT_STAT + n for n in dict.fromkeys(names)]


def _stat_value(stats: dict[str, float], row: dict[str, Any], stat: str) -> float | None:
    if not stat.startswith(COMPONENT_STAT):
        return stats[stat]
    return finite_number((row.get("components") or {}).get(stat.removeprefix(COMPONENT_STAT)))


def _solved(row: dict[str, Any]) -> bool:
    return (row.get("components") or {}).get("completion") == 1.0


def step_behaviour(rows: Sequence[dict[str, Any]], thought_required: bool = True) -> dict[str, float]:
    """The behaviour fields of one step from its scored episode rows (`grpolab.metrics.episode_row`)."""
    if not rows:
        return {}
    stats = [episode_stats(str(r.get("text") or "")) for r in rows]
    out: dict[str, float] = {}
    for name in [*STATS, *component_stats(rows)]:
        values = [(_stat_value(s, r, name), _solved(r)) for s, r in zip(stats, rows)]
        xs = [x for x, _ in values if x is not None]
        if not xs:  # a component that failed (NaN) on every episode of the step
            continue
        m = sum(xs) / len(xs)
        out[behaviour_key(name)] = m
        out[behaviour_key(name, "sd")] = math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))
        good = [x for x, ok in values if ok and x is not None]
        if good:
            out[behaviour_key(name, "solved")] = sum(good) / len(good)
    out.update({class_key(c): share for c, share in class_shares(rows, thought_required).items()})
    return out


def _num(row: dict[str, Any], key: str) -> float | None:
    return finite_number(row.get(key))


def _pooled(rows: Sequence[dict[str, Any]], stat: str) -> dict[str, float | None] | None:
    """Means of a statistic over a window of steps: all, solved, failed episodes; the success rate; the sd."""
    n = ns = total = total_s = var = 0.0
    for r in rows:
        m, k, p = _num(r, behaviour_key(stat)), _num(r, EPISODES) or 1.0, _num(r, SUCCESS) or 0.0
        if m is None:
            continue
        sd = _num(r, behaviour_key(stat, "sd")) or 0.0
        n, total, var = n + k, total + k * m, var + k * sd * sd
        ms = _num(r, behaviour_key(stat, "solved"))
        if ms is not None and p > 0:
            ns, total_s = ns + k * p, total_s + k * p * ms
    if n == 0:
        return None
    failed = n - ns
    return {
        "all": total / n,
        "solved": total_s / ns if ns > 0 else None,
        "failed": (total - total_s) / failed if failed > 1e-9 else None,
        "success": ns / n,
        "sd": math.sqrt(var / n),
    }


def within_verdict_change(start: dict[str, Any], recent: dict[str, Any]) -> float:
    """The change of a statistic that a shift between solved and failed episodes does not explain."""
    p1 = recent["success"]
    change = 0.0
    for part, weight in (("solved", p1), ("failed", 1.0 - p1)):
        if weight <= 0 or recent[part] is None:
            continue
        before = start[part] if start[part] is not None else start["all"]
        change += weight * (recent[part] - before)
    return change


def share_z(s0: float, n0: float, s1: float, n1: float) -> float:
    """The two-proportion z of a share's growth s0 -> s1 over n0 and n1 episodes (pooled variance); 0 when the pooled
    share is 0 or 1 (nothing varies), inf when the episode counts are unknown (no test to apply)."""
    if n0 <= 0 or n1 <= 0:
        return math.inf
    p = (s0 * n0 + s1 * n1) / (n0 + n1)
    se = math.sqrt(p * (1.0 - p) * (1.0 / n0 + 1.0 / n1))
    return (s1 - s0) / se if se > 1e-12 else 0.0


def _episodes(rows: Sequence[dict[str, Any]]) -> float:
    """Episodes behind a window's class shares (0 when a row does not say how many it had)."""
    counts = [_num(r, EPISODES) for r in rows]
    return 0.0 if any(c is None for c in counts) else float(sum(c or 0.0 for c in counts))


def drift_alarms(
    history: Sequence[dict[str, Any]], window: int, z: float, rel: float, share: float, class_z: float = 0.0
) -> dict[str, str]:
    """Drift alarms for the latest row of `history` (metric rows with behaviour fields, oldest first). A hack class
    alarms when its share grew by `share` and by `class_z` standard errors (`share_z`; rows without an episode count
    apply the share alone)."""
    rows = [r for r in history if _num(r, behaviour_key(STATS[0])) is not None]
    if len(rows) < 2 * window:
        return {}
    first, last = rows[:window], rows[-window:]
    alarms: dict[str, str] = {}
    prefix = behaviour_key(COMPONENT_STAT)
    components = dict.fromkeys(k.removeprefix("behaviour/") for r in last for k in r if k.startswith(prefix))
    for stat in [*STATS, *(c for c in components if "/" not in c)]:
        a, b = _pooled(first, stat), _pooled(last, stat)
        if a is None or b is None:
            continue
        delta = within_verdict_change(a, b)
        floor = FLOORS.get(stat, COMPONENT_FLOOR)
        if abs(delta) >= z * max(a["sd"], floor) and abs(delta) >= rel * max(abs(a["all"]), floor):
            alarms[f"drift:{stat}"] = (
                f"{stat} {a['all']:.2f} -> {b['all']:.2f} per episode ({delta:+.2f} within verdicts, "
                f"{abs(delta) / max(a['sd'], floor):.1f} start sd) while success went {a['success']:.0%} -> "
                f"{b['success']:.0%}"
            )
    n0, n1 = _episodes(first), _episodes(last)
    for c in sorted(HACK_CLASSES):
        s0 = sum(_num(r, class_key(c)) or 0.0 for r in first) / window
        s1 = sum(_num(r, class_key(c)) or 0.0 for r in last) / window
        zc = share_z(s0, n0, s1, n1)
        if s1 - s0 >= share and zc >= class_z:
            evidence = f" (z {zc:.1f} over {n0:.0f} and {n1:.0f} episodes)" if math.isfinite(zc) else ""
            alarms[f"drift:class/{c}"] = f"{c} episodes {s0:.0%} -> {s1:.0%} of each step{evidence}"
    return alarms
