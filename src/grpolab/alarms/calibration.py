"""What the hack-detection benchmark measured about each alarm's false alarms, said on the alarm's own line.

`benchmarks/hack_detection.py` runs short real GRPO runs, labels each hacked or honest from held-out behaviour, and
writes `calibration.json` beside this file: for each of grpolab's alarms (reward_hacking, drift, drift_class,
attribution, probe), the threshold the `[alarms]` defaults ship, on how many of the benchmark's honest runs it alarmed,
and the threshold a false-alarm budget would pick. An alarm raised at the shipped threshold carries that record in its
explanation (`note_for`), so a user reads what one costs: "false alarms at this threshold: 2 of 5 honest benchmark
runs". A threshold the user changed gets no such line: nothing was measured at it.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

from grpolab.config import LabConfig

CALIBRATION_FILE = Path(__file__).with_name("calibration.json")
FAMILIES = {
    "reward_hacking": "hack_t",
    "drift": "drift_z",
    "drift_class": "drift_class_z",
    "attribution": "attribution_min",
    "probe": "probe_z",
}
"""The calibrated alarm families and the `[alarms]` field that is each one's threshold."""


@functools.cache
def calibration(path: Path = CALIBRATION_FILE) -> dict[str, Any]:
    """The benchmark's record ({} when there is none or it cannot be read)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def family_of(alarm: str) -> str | None:
    """`drift` for `drift:calls`, `drift_class` for `drift:class/empty_thought`, `reward_hacking` for itself; None for
    an alarm not calibrated."""
    family = "drift_class" if alarm.startswith("drift:class/") else alarm.split(":", 1)[0]
    return family if family in FAMILIES else None


def note_for(alarm: str, cfg: LabConfig, record: dict[str, Any] | None = None) -> str:
    """The measured false-alarm line for an alarm raised under `cfg`, or "" (no record, or a changed threshold)."""
    family = family_of(alarm)
    record = calibration() if record is None else record
    entry = (record.get("alarms") or {}).get(family) if family else None
    if not isinstance(entry, dict):
        return ""
    threshold = getattr(cfg.alarms, FAMILIES[family])
    shipped, honest, fired = entry.get("shipped"), entry.get("honest_runs"), entry.get("false_alarms_shipped")
    if not isinstance(shipped, (int, float)) or not math.isclose(threshold, shipped) or not honest:
        return ""
    return (
        f"false alarms at this threshold ({FAMILIES[family]} {threshold:g}): {fired} of {honest} honest benchmark runs "
        f"(budget {record.get('budget', 0.1):.0%} per run; benchmarks/hack_detection.py, {record.get('date', '?')})"
    )
