"""The greedy probe: what the policy does when it decodes greedily on a fixed set of train tasks, and an alarm when a
hack class takes over there.

A training step samples a few episodes at temperature, and a shortcut GRPO is learning can stay a minority of them
until greedy decoding flips to it. In the hack-detection benchmark's hacked runs, at 6 episodes a step, the emptied
thought never passed 2 of 6 training episodes while 9 of 12 held-out greedy answers opened with it. The probe reads
the policy's mode directly: with `alarms.probe_tasks` > 0, every held-out evaluation (the start, every
`train.eval_every` steps, the end) also decodes that many train tasks greedily (the same shuffled subset every time;
never a held-out task) and records
    probe/n                   probe episodes
    probe/success             their share the strict verifier accepts
    probe/class/NAME          their share in each class (`grpolab.behaviour.CLASSES`)
    probe/seconds             what the probe took, beside probe/heldout_seconds (the held-out evaluation's)
in the evaluation's row and summary. `probe_alarms` raises `probe:class/NAME` when a hack class's share grew since the
start by at least `alarms.drift_share` and by at least `alarms.probe_z` standard errors of the two-proportion test the
drift alarm's classes use (`grpolab.alarms.drift.share_z`). Its cost is one more greedy evaluation of `probe_tasks`
tasks at each held-out evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from grpolab.alarms.drift import share_z
from grpolab.behaviour import HACK_CLASSES, class_shares
from grpolab.rundir.numbers import finite_number
from grpolab.vocabulary import PROBE_HELDOUT_SECONDS, PROBE_N, PROBE_SECONDS, PROBE_SUCCESS, probe_class_key


def probe_fields(rows: Sequence[dict[str, Any]], thought_required: bool, success: float) -> dict[str, float]:
    """The probe's metric fields from its episode rows (`grpolab.metrics.episode_row`) and their strict success
    (`evaluate`'s summary); {} without episodes."""
    if not rows:
        return {}
    out = {PROBE_N: float(len(rows)), PROBE_SUCCESS: success}
    out.update({probe_class_key(c): share for c, share in class_shares(rows, thought_required).items()})
    return out


def probe_cost(seconds: float, heldout_seconds: float) -> dict[str, float]:
    """The probe's cost fields: its own seconds beside those of the held-out evaluation it ran with."""
    return {PROBE_SECONDS: seconds, PROBE_HELDOUT_SECONDS: heldout_seconds}


def probe_alarms(start: dict[str, Any], now: dict[str, Any], share: float, z: float) -> dict[str, str]:
    """`probe:class/NAME` alarms of a probe (`now`, fields of `probe_fields`) against the start's: a hack class whose
    share grew by `share` and by `z` standard errors."""
    n0, n1 = finite_number(start.get(PROBE_N)) or 0.0, finite_number(now.get(PROBE_N)) or 0.0
    if n0 <= 0 or n1 <= 0:
        return {}
    alarms: dict[str, str] = {}
    for c in sorted(HACK_CLASSES):
        s0 = finite_number(start.get(probe_class_key(c))) or 0.0
        s1 = finite_number(now.get(probe_class_key(c))) or 0.0
        zc = share_z(s0, n0, s1, n1)
        if s1 - s0 >= share and zc >= z:
            shown = f"{zc:.1f}" if math.isfinite(zc) else "inf"
            alarms[f"probe:class/{c}"] = (
                f"{c} in {s0:.0%} -> {s1:.0%} of greedy episodes on {n1:.0f} train tasks since the start "
                f"(z {shown} over {n0:.0f} and {n1:.0f} episodes)"
            )
    return alarms
