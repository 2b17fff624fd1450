"""What GRPO changed: the behaviour of the trained agent against its start, with the changes nobody asked for flagged.

The held-out evaluation before the first GRPO step (label "0") and the last one are the same tasks, answered
greedily, so their transcripts compare one to one. For each behaviour statistic and each episode class
(`grpolab.behaviour`) this shows the start, the end and, for the training steps in between, small multiples.
A change is flagged by the drift rule of the run's alarm (`grpolab.alarms.drift`) applied to the two evaluations:
within verdicts (so a thought that grew because more answers are solved is not flagged, and one that emptied is),
with the run's `alarms.drift_*` thresholds. Each flagged change comes with two transcripts of the same task, before
and after.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from grpolab.alarms.drift import drift_alarms, step_behaviour
from grpolab.behaviour import CLASSES, HACK_CLASSES, STATS, classify_episode, episode_stats
from grpolab.config import LabConfig
from grpolab.envs.arithmetic import ArithmeticEnv
from grpolab.envs.bfcl.env import BFCLEnv
from grpolab.envs.capitals import CapitalsEnv
from grpolab.envs.code.env import CodeEnv
from grpolab.envs.finance import FinanceEnv
from grpolab.report.charts import svg_chart
from grpolab.rundir import RunDir
from grpolab.rundir.snapshot import RunSnapshot, section
from grpolab.vocabulary import behaviour_key, class_key


@dataclass
class Change:
    name: str
    """A statistic (`thought_words`) or a class (`class/empty_thought`)."""
    before: float
    after: float
    flagged: str = ""
    """Why it is flagged ('' when it is not)."""
    examples: list[tuple[str, str, str]] = field(default_factory=list)
    """(task id, transcript before, transcript after) for a flagged change."""


@dataclass
class Changes:
    changes: list[Change]
    before_n: int
    after_n: int
    before_label: str
    after_label: str

    @property
    def flagged(self) -> list[Change]:
        return [c for c in self.changes if c.flagged]


def _summary(rows: list[dict[str, Any]], thought: bool) -> dict[str, Any]:
    solved = [r for r in rows if (r.get("components") or {}).get("completion") == 1.0]
    return {**step_behaviour(rows, thought), "episodes": len(rows), "success": len(solved) / max(len(rows), 1)}


def what_changed(
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    cfg: LabConfig,
    thought_required: bool,
    labels: tuple[str, str] = ("0", "last"),
) -> Changes:
    """Compare two evaluations' rows (before: the start, after: the trained model) statistic by statistic."""
    w = cfg.alarms
    a, b = _summary(before, thought_required), _summary(after, thought_required)
    flags = drift_alarms([a, b], 1, w.drift_z, w.drift_rel, w.drift_share, w.drift_class_z) if before and after else {}
    by_task = {r.get("task_id"): r for r in before}
    out = []
    for stat in STATS:
        c = Change(
            stat, a.get(behaviour_key(stat), 0.0), b.get(behaviour_key(stat), 0.0), flags.get(f"drift:{stat}", "")
        )
        if c.flagged:
            ranked = sorted(after, key=lambda r: -abs(episode_stats(str(r.get("text", "")))[stat] - c.before))
            c.examples = _pairs(ranked, by_task)
        out.append(c)
    for name in CLASSES:
        key = class_key(name)
        c = Change(key, a.get(key, 0.0), b.get(key, 0.0), flags.get(f"drift:{key}", ""))
        if c.flagged:
            c.examples = _pairs([r for r in after if classify_episode(r, thought_required) == name], by_task)
        if c.before or c.after:
            out.append(c)
    return Changes(out, len(before), len(after), *labels)


def _pairs(ranked: list[dict[str, Any]], by_task: dict[Any, dict[str, Any]]) -> list[tuple[str, str, str]]:
    pairs = []
    for r in ranked:
        base = by_task.get(r.get("task_id"))
        if base is not None:
            pairs.append((str(r.get("task_id")), str(base.get("text", "")), str(r.get("text", ""))))
        if len(pairs) == 2:
            break
    return pairs


def change_lines(changes: Changes) -> list[str]:
    """Plain-text lines (for `grpolab compare` and notes): every statistic, flagged ones marked."""
    lines = [f"What GRPO changed (held-out eval {changes.before_label} -> {changes.after_label}):"]
    for c in changes.changes:
        mark = "  FLAGGED: " + c.flagged if c.flagged else ""
        lines.append(f"  {c.name:28s} {c.before:8.2f} -> {c.after:8.2f}{mark}")
    return lines


PAIR_STYLE = "display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1em"
"""Before and after side by side, each half of the width whatever its content (a grid column's minimum is 0)."""
FIT_SVG = "<svg style='max-width:100%;height:auto' "
TRANSCRIPT_STYLE = (
    "box-sizing:border-box;max-width:100%;white-space:pre-wrap;overflow-wrap:anywhere;background:#f7f7f7;"
    "padding:.6em;margin:0;font-size:.8em"
)
"""A transcript wraps within its column, long JSON and unbroken tokens included (inline: the lab and the report)."""


def changes_html(changes: Changes, history: list[dict[str, Any]]) -> str:
    """The "What GRPO changed" section: a table, small multiples over training steps, examples of flagged changes."""
    e = html.escape
    parts = [
        "<h2>What GRPO changed</h2>",
        f"<p>Held-out evaluation {e(changes.before_label)} ({changes.before_n} episodes) against "
        f"{e(changes.after_label)} ({changes.after_n}), same tasks, greedy. Flagged: a change within verdicts that "
        "the verifier does not explain (the drift alarm's rule), or a hack class that grew.</p>",
        "<table><tr><th>behaviour</th><th>before</th><th>after</th><th>flag</th></tr>",
    ]
    for c in changes.changes:
        style = ' class="alarm"' if c.flagged else ""
        parts.append(
            f"<tr{style}><td>{e(c.name)}</td><td>{c.before:.2f}</td><td>{c.after:.2f}</td><td>{e(c.flagged)}</td></tr>"
        )
    parts.append("</table>")
    steps = [r for r in history if isinstance(r.get(behaviour_key(STATS[0])), (int, float))]
    if steps:
        alarm_steps = [r["step"] for r in steps if any(str(k).startswith("drift:") for k in r.get("alarms") or {})]
        charts = [svg_chart(stat, [behaviour_key(stat)], steps, alarm_steps) for stat in STATS]
        hack_keys = [class_key(c) for c in sorted(HACK_CLASSES) if any(r.get(class_key(c)) for r in steps)]
        if hack_keys:
            charts.append(svg_chart("hack classes (share)", hack_keys, steps, alarm_steps))
        charts.append(svg_chart("correct (share)", [class_key("grounded_correct")], steps, alarm_steps))
        grid = "display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:.6em"
        parts.append(f'<h3>Over training steps (sampled episodes)</h3><div class="grid" style="{grid}">')
        # a chart scales down to its grid column (matplotlib's svg has a viewBox): never wider than the panel
        parts.extend(f"<div style='min-width:0'>{svg.replace('<svg ', FIT_SVG, 1)}</div>" for svg in charts)
        parts.append("</div>")
    for c in changes.flagged:
        for task_id, before, after in c.examples:
            parts.append(
                f"<h3>{e(c.name)}: {e(task_id)}</h3><div class='changed-pair' style='{PAIR_STYLE}'>"
                f"<div><b>before</b><pre style='{TRANSCRIPT_STYLE}'>{e(before)}</pre></div>"
                f"<div><b>after</b><pre style='{TRANSCRIPT_STYLE}'>{e(after)}</pre></div></div>"
            )
    return "\n".join(parts)


def run_changes(snap: RunSnapshot) -> Changes | None:
    """What GRPO changed in a run: its evaluation before the first GRPO step ("0") against its last one; None while
    the run has no two evaluations of its GRPO phase. A damaged config falls back to the default thresholds."""
    steps = [label for label in snap.eval_labels() if label.isdigit()]
    if len(steps) < 2:
        return None
    try:
        cfg = LabConfig.model_validate(snap.config)  # data: validating imports nothing the run names
    except Exception:  # a damaged or foreign config: the default thresholds still read the transcripts
        cfg = LabConfig()
    first, last = steps[0], steps[-1]
    thought = recorded_thought_required(snap)
    return what_changed(snap.evals[first], snap.evals[last], cfg, thought, (f"step {first}", f"step {last}"))


BUILTIN_THOUGHT = {
    "finance": FinanceEnv.thought_required,
    "finance_shifted": FinanceEnv.thought_required,
    "arithmetic": ArithmeticEnv.thought_required,
    "bfcl": BFCLEnv.thought_required,
    "capitals": CapitalsEnv.thought_required,
    "code": CodeEnv.thought_required,
}
"""Whether each built-in environment asks for a thought, read off its class: for runs made before env.json."""


def recorded_thought_required(snap: RunSnapshot) -> bool:
    """Whether the run's environment asks for a thought, from what the run recorded, never by building its
    environment (which may import the run's code): env.json, else env data's setting or a built-in's class, else
    yes (the protocol's default)."""
    recorded = RunDir(snap.path).env_facts().get("thought_required")
    if isinstance(recorded, bool):
        return recorded
    env = snap.config.get("env")
    if env == "data":
        setting = section(snap.config, "data_env").get("thought_required", True)
        return setting if isinstance(setting, bool) else True
    return BUILTIN_THOUGHT.get(env, True) if isinstance(env, str) else True
