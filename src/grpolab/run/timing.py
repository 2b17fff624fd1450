"""Where a run's wall time went, read back from what the run recorded: its steps' phases (`perf/PHASE_s`), its
held-out evaluations and greedy probes (`heldout/seconds`, `probe/seconds`) and its SFT warm start (sft.json); the
rest of the wall time (model loads, preflight probes, checkpoints) is what none of them timed."""

from __future__ import annotations

from typing import Any

from grpolab.rundir import RunDir
from grpolab.vocabulary import (
    GENERATION_PHASES,
    HELDOUT_SECONDS,
    PERF_STEP_S,
    PHASE_FORWARD_BACKWARD,
    PHASE_REFERENCE,
    PROBE_SECONDS,
    perf_key,
)

SHOWN_PHASES = {"generation": GENERATION_PHASES, "reference": (PHASE_REFERENCE,), "update": (PHASE_FORWARD_BACKWARD,)}
"""The step's phases named in the line, each a group of `perf/PHASE_s`; the step's other phases (tools, scoring,
old log-probs, optimizer) are its remainder."""


def _total(rows: list[dict[str, Any]], key: str) -> float:
    return sum(float(r[key]) for r in rows if isinstance(r.get(key), int | float))


def phase_seconds(run: RunDir, wall_seconds: float) -> dict[str, float]:
    """Seconds per part of a run that took `wall_seconds`: steps (and their phases), evaluations, probes, SFT, and
    the rest of the wall time, which none of them timed."""
    rows = [r for r in run.metrics() if isinstance(r.get(PERF_STEP_S), int | float)]
    out = {"steps": _total(rows, PERF_STEP_S), "step_count": float(len(rows))}
    for name, phases in SHOWN_PHASES.items():
        out[name] = sum(_total(rows, perf_key(p)) for p in phases)
    evals = [s for s in run.eval_summary().values() if isinstance(s, dict)]
    out["evaluations"] = _total(evals, HELDOUT_SECONDS)
    out["evaluation_count"] = float(sum(isinstance(s.get(HELDOUT_SECONDS), int | float) for s in evals))
    out["probes"] = _total(evals, PROBE_SECONDS)
    out["probe_count"] = float(sum(isinstance(s.get(PROBE_SECONDS), int | float) for s in evals))
    sft = run.sft()
    out["sft"] = float(sft["seconds"]) if isinstance(sft, dict) and isinstance(sft.get("seconds"), int | float) else 0.0
    out["rest"] = max(wall_seconds - out["steps"] - out["evaluations"] - out["probes"] - out["sft"], 0.0)
    return out


def time_lines(run: RunDir, wall_seconds: float) -> list[str]:
    """The run's wall time split into the parts a user waits for."""
    t = phase_seconds(run, wall_seconds)
    n = int(t["step_count"])
    rows: list[tuple[str, float, str]] = []
    if n:
        parts = ", ".join(f"{name} {t[name] / n:.1f} s" for name in SHOWN_PHASES)
        other = (t["steps"] - sum(t[name] for name in SHOWN_PHASES)) / n
        rows.append((f"{n} GRPO steps", t["steps"], f"{t['steps'] / n:.1f} s a step: {parts}, other {other:.1f} s"))
    if t["evaluation_count"]:
        rows.append((f"{int(t['evaluation_count'])} held-out evaluations", t["evaluations"], ""))
    if t["probe_count"]:
        rows.append((f"{int(t['probe_count'])} greedy probes", t["probes"], ""))
    if t["sft"]:
        rows.append(("SFT warm start", t["sft"], ""))
    rows.append(("the rest", t["rest"], "model loads, preflight probes, checkpoints"))
    lines = [f"where the {wall_seconds / 60:.1f} min went:"]
    for label, seconds, why in rows:
        lines.append(f"  {label:<24}{seconds / 60:5.1f} min" + (f"  ({why})" if why else ""))
    return lines
