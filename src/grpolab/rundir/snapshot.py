"""The one defensive reader of run directories: a read-only snapshot for the report and the web lab.

`read_snapshot` never raises on what it finds: a missing, damaged or hand-edited file, a malformed row and a
value that cannot be drawn (not a finite number, or beyond ±MAX_DRAWN) are left out, and each is named in
`problems` (the report lists them under "Skipped", the lab shows them as warnings). Files are read within
`grpolab.files.limits` (`read_json`, `read_jsonl`). Writers use `RunDir`; nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpolab.rundir.artifacts import Artifacts
from grpolab.rundir.layout import CONFIG_FILE, METRICS_FILE, PREFLIGHT_FILE, SUMMARY_FILE, eval_file
from grpolab.rundir.numbers import MAX_DRAWN, drawable, number
from grpolab.vocabulary import ALARMS

MAX_STEP = 2**53
"""Steps beyond this cannot be drawn (floats); a row claiming one is malformed."""
PROBE_FIELDS = {"probe": str, "task_id": str, "score": float, "honest": float, "breakdown": str}
"""The fields (and types) a probe row of preflight.json needs to be shown (float: a number `drawable` accepts)."""
EPISODE_NUMBERS = ("tokens", "turns", "total", "valid_calls")
"""Fields of an episode row that are numbers when present (the classifier compares them)."""


def section(data: dict[str, Any], name: str) -> dict[str, Any]:
    """A mapping inside a mapping ({} when it is missing or not a mapping): config sections, summaries."""
    value = data.get(name)
    return value if isinstance(value, dict) else {}


@dataclass
class RunSnapshot:
    """A run directory as far as it could be read, and what was wrong with the rest."""

    path: Path
    config: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    """Drawable metric rows: an integer step in range, drawable numbers only, `alarms` only as a mapping."""
    evals: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Showable held-out episode rows by evaluation label (base, then steps)."""
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Held-out metrics by evaluation label."""
    preflight: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.config)

    def eval_labels(self) -> list[str]:
        """Evaluation labels in order: base, then steps."""
        steps = sorted((k for k in self.evals if k.isdigit()), key=int)
        return (["base"] if "base" in self.evals else []) + steps

    def alarm_rows(self) -> list[dict[str, Any]]:
        return [r for r in self.metrics if r.get(ALARMS)]

    def alarms(self) -> list[tuple[int, str, str]]:
        """(step, alarm, why) of every alarm that fired."""
        return [(r["step"], str(k), str(v)) for r in self.alarm_rows() for k, v in r[ALARMS].items()]


def read_snapshot(path: str | Path) -> RunSnapshot:
    """Everything readable of the run directory at `path` (see `RunSnapshot`); never raises on its content."""
    snap = RunSnapshot(Path(path))
    run = Artifacts(snap.path)
    if not snap.path.is_dir():
        snap.problems.append(f"{snap.path} is not a directory")
        return snap
    cfg = run.artifact(CONFIG_FILE, snap.problems)
    if cfg is None:
        snap.problems.append(f"{CONFIG_FILE} is missing or unreadable: not a grpolab run directory")
        return snap
    if isinstance(cfg, dict):
        snap.config = cfg
    else:
        snap.problems.append(f"{CONFIG_FILE} is not a JSON object")
    snap.metrics = drawable_metrics(run, snap.problems)
    snap.summary = run.eval_summary(snap.problems)
    raw_summary = run.artifact(SUMMARY_FILE)
    if raw_summary is not None and (not isinstance(raw_summary, dict) or len(raw_summary) > len(snap.summary)):
        snap.problems.append(f"{SUMMARY_FILE}: entries that are not mappings of metrics")
    pre = run.preflight(snap.problems)
    if isinstance(pre, dict):
        snap.preflight = pre
        bad = good_probes(pre)[1]
        if bad:
            snap.problems.append(f"{PREFLIGHT_FILE}: {bad} malformed probe row(s)")
    elif pre is not None:
        snap.problems.append(f"{PREFLIGHT_FILE} is not a JSON object")
    snap.evals = {
        label: showable_episodes(run.eval_rows(label), eval_file(label), snap.problems) for label in run.eval_labels()
    }
    return snap


def drawable_metrics(run: Artifacts, problems: list[str]) -> list[dict[str, Any]]:
    """metrics.jsonl rows that can be drawn: an integer step in range, drawable numbers, alarms as a mapping."""
    lines = 0
    if run.metrics_path.is_file():
        with open(run.metrics_path, "rb") as f:
            lines = sum(1 for line in f if line.strip())
    rows, values_dropped = [], 0
    for r in run.metrics():
        if isinstance(r["step"], bool) or not 0 <= r["step"] <= MAX_STEP:
            continue
        clean = {k: v for k, v in r.items() if drawable(v) and k != ALARMS}
        values_dropped += sum(1 for k, v in r.items() if k not in clean and k != ALARMS and number(v))
        alarms = r.get(ALARMS)
        if isinstance(alarms, dict) and alarms:
            clean[ALARMS] = alarms
        elif alarms not in (None, {}):
            problems.append(f"{METRICS_FILE} step {r['step']}: {ALARMS} is not a mapping")
        rows.append({**clean, "step": r["step"]})
    if lines > len(rows):
        problems.append(f"{METRICS_FILE}: {lines - len(rows)} malformed row(s)")
    if values_dropped:
        problems.append(
            f"{METRICS_FILE}: {values_dropped} value(s) not finite or beyond ±{MAX_DRAWN:g} left out of the curves"
        )
    return rows


def showable_episodes(rows: list[dict[str, Any]], name: str, problems: list[str]) -> list[dict[str, Any]]:
    """Held-out episode rows that can be shown side by side and classified: mappings where mappings belong, a
    plain task id, numbers where numbers belong."""
    good = [
        r
        for r in rows
        if isinstance(r.get("task_id"), (str, int))
        and isinstance(r.get("components", {}), dict)
        and isinstance(r.get("reasons", {}), dict)
        and all(number(v) for v in r.get("components", {}).values())
        and all(number(r[k]) for k in EPISODE_NUMBERS if r.get(k) is not None)
    ]
    if len(good) < len(rows):
        problems.append(f"{name}: {len(rows) - len(good)} malformed episode row(s)")
    return good


def good_probes(preflight: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The probe rows of a preflight report that have every field with its type, and how many did not."""
    probes = preflight.get("probes")
    probes = probes if isinstance(probes, list) else []
    good = [p for p in probes if isinstance(p, dict) and all(_fits(p.get(k), t) for k, t in PROBE_FIELDS.items())]
    return good, len(probes) - len(good)


def _fits(value: Any, kind: type) -> bool:
    return drawable(value) if kind is float else isinstance(value, kind)
