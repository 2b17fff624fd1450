"""`runs/NAME/report.html`: one self-contained page (inline SVG, no scripts, opens offline).

Curves of every metric (`grpolab.metrics`) with the kl bound and alarms marked, held-out success, the preflight
results and probe table, and base vs trained trajectories side by side, tags highlighted.

Every artifact is read defensively: a malformed file, row or value is left out and named under "Skipped", so a
damaged or hand-edited run dir still gets a report (only a missing or unreadable config.json stops it).
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from grpolab.files import atomic_write_text
from grpolab.metrics import reward_key
from grpolab.report.charts import svg_chart
from grpolab.report.trajectories import page, side_by_side
from grpolab.rewards.components import standard_names
from grpolab.rundir import RunDir

CURVES = [
    ("reward", ["reward/mean", *(reward_key(n) for n in standard_names())]),
    ("kl", ["kl", "kl_bound"]),
    ("entropy", ["entropy"]),
    ("completion length", ["completion_len"]),
    ("tool use", ["tool_call_prob", "tool_token_mass"]),
    ("success", ["success", "heldout/success"]),
    ("frac_zero_std", ["frac_zero_std"]),
]
CONVERGENCE = ["reward/mean", "kl", "tool_token_mass"]
"""The report's convergence chart (also the web lab's): mean reward, KL and tool-token mass per step."""
HELDOUT_KEYS = ["heldout/success", "heldout/tool_call_prob", "heldout/schema", "heldout/reward"]
CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:1em}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:.3em .6em;text-align:left}
svg{max-width:100%;height:auto}
.alarm{background:#fff0f0;border-left:4px solid #b00020;padding:.4em .8em;margin:.3em 0}"""


MAX_STEP = 2**53
"""Steps beyond this cannot be drawn (floats); a row claiming one is malformed."""


def _num(x: Any, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, (int, float)) else "n/a"


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


PROBE_FIELDS = {"probe": str, "task_id": str, "score": (int, float), "honest": (int, float), "breakdown": str}


def good_probes(preflight: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The probe rows of a preflight report that have every field with its type, and how many did not."""
    probes = preflight.get("probes")
    probes = probes if isinstance(probes, list) else []
    good = [p for p in probes if isinstance(p, dict) and all(isinstance(p.get(k), t) for k, t in PROBE_FIELDS.items())]
    return good, len(probes) - len(good)


def probe_table(preflight: dict[str, Any]) -> str:
    """The gameability probes (each with its worst task) and the learnability summary, as HTML."""
    probes, bad = good_probes(preflight)
    rows = "".join(
        f"<tr><td>{html.escape(p['probe'])}</td><td>{html.escape(p['task_id'])}</td><td>{p['score']:+.2f}</td>"
        f"<td>{p['honest']:+.2f}</td><td class='{'bad' if p.get('gameable') else 'good'}'>"
        f"{'GAMEABLE' if p.get('gameable') else 'below honest'}</td>"
        f"<td><code>{html.escape(p['breakdown'])}</code></td></tr>"
        for p in probes
    )
    if bad:
        rows += f"<tr><td colspan='6'>{bad} malformed probe row(s) skipped</td></tr>"
    learn = preflight.get("learnability")
    summary = ""
    if isinstance(learn, dict) and learn:
        summary = (
            f"<p>Learnability: mean reward {_num(learn.get('reward/mean'), '+.2f')}, base prior tool_call_prob "
            f"{_num(learn.get('tool_call_prob'), '.0%')}, frac_zero_std {_num(learn.get('frac_zero_std'), '.0%')}, "
            f"pass@G {html.escape(str(learn.get('pass_at_g')))}. "
            f"{html.escape(str(learn.get('recommendation', '')))}</p>"
        )
    head = "<tr><th>probe</th><th>worst task</th><th>score</th><th>honest</th><th>verdict</th><th>breakdown</th></tr>"
    return f"{summary}<table>{head}{rows}</table>"


def _heldout_table(summary: dict[str, Any]) -> str:
    heads = "".join(f"<th>{html.escape(k)}</th>" for k in summary)
    body = "".join(
        f"<tr><td>{k}</td>" + "".join(f"<td>{_num(v.get(k), '.2f')}</td>" for v in summary.values()) + "</tr>"
        for k in HELDOUT_KEYS
    )
    return f"<h2>Held-out evaluation</h2><table><tr><th>metric</th>{heads}</tr>{body}</table>"


def drawable_metrics(run: RunDir, skipped: list[str]) -> list[dict[str, Any]]:
    """metrics.jsonl rows that can be drawn: an integer step in range, finite numbers, alarms as a mapping."""
    lines = 0
    if run.metrics_path.is_file():
        with open(run.metrics_path, "rb") as f:
            lines = sum(1 for line in f if line.strip())
    rows, values_dropped = [], 0
    for r in run.metrics():
        if isinstance(r["step"], bool) or not 0 <= r["step"] <= MAX_STEP:
            continue
        clean = {k: v for k, v in r.items() if _finite(v) and k != "alarms"}
        values_dropped += sum(1 for k, v in r.items() if k not in clean and k != "alarms" and isinstance(v, float))
        alarms = r.get("alarms")
        if isinstance(alarms, dict) and alarms:
            clean["alarms"] = alarms
        elif alarms not in (None, {}):
            skipped.append(f"metrics.jsonl step {r['step']}: alarms is not a mapping")
        rows.append({**clean, "step": r["step"]})
    if lines > len(rows):
        skipped.append(f"metrics.jsonl: {lines - len(rows)} malformed row(s)")
    if values_dropped:
        skipped.append(f"metrics.jsonl: {values_dropped} non-finite value(s) left out of the curves")
    return rows


def showable_episodes(rows: list[dict[str, Any]], name: str, skipped: list[str]) -> list[dict[str, Any]]:
    """Held-out episode rows that can be shown side by side (mappings where mappings belong, a plain task id)."""
    good = [
        r
        for r in rows
        if isinstance(r.get("task_id"), (str, int))
        and isinstance(r.get("components", {}), dict)
        and isinstance(r.get("reasons", {}), dict)
    ]
    if len(good) < len(rows):
        skipped.append(f"{name}: {len(rows) - len(good)} malformed episode row(s)")
    return good


def render_report(path: str | Path, skipped: list[str] | None = None) -> Path:
    """Write runs/NAME/report.html from the run's artifacts and return its path. What had to be left out (a
    malformed file, row or value) is named on the page and appended to `skipped`."""
    run = RunDir(path)
    cfg = run.read_json("config.json")
    skipped = [] if skipped is None else skipped
    if not isinstance(cfg, dict):
        skipped.append("config.json is not a JSON object")
        cfg = {}
    rows = drawable_metrics(run, skipped)
    alarm_rows = [r for r in rows if r.get("alarms")]
    summary = run.eval_summary(skipped)
    raw_summary = run.artifact("eval/summary.json")
    if raw_summary is not None and (not isinstance(raw_summary, dict) or len(raw_summary) > len(summary)):
        skipped.append("eval/summary.json: entries that are not mappings of metrics")
    reward = cfg.get("reward") if isinstance(cfg.get("reward"), dict) else {}
    weights = html.escape(json.dumps(reward.get("weights"), default=str))
    parts = [
        f"<h1>grpolab run: {html.escape(run.path.name)}</h1>",
        f"<p>env <b>{html.escape(str(cfg.get('env', '?')))}</b>, "
        f"model <b>{html.escape(str(cfg.get('model', '?')))}</b>, {len(rows)} GRPO steps, "
        f"weights <code>{weights}</code></p>",
    ]
    if summary:
        parts.append(_heldout_table(summary))
    parts.append("<h2>Alarms</h2>")
    alarms = [
        f"<div class='alarm'>step {r['step']}: {html.escape(str(k))}: {html.escape(str(v))}</div>"
        for r in alarm_rows
        for k, v in r["alarms"].items()
    ]
    parts += alarms or ["<p>No alarm fired.</p>"]
    steps = [r["step"] for r in alarm_rows]
    convergence = svg_chart("reward, kl and tool-token mass per iteration", CONVERGENCE, rows, steps)
    parts.append(f"<h2>Training convergence and token-shift dynamics</h2>{convergence}")
    charts = "".join(svg_chart(title, keys, rows, steps) for title, keys in CURVES)
    parts.append(f"<h2>Curves</h2><div class='grid'>{charts}</div>")
    preflight = run.artifact("preflight.json", skipped)
    if isinstance(preflight, dict):
        parts.append("<h2>Preflight: gameability probes and learnability</h2>" + probe_table(preflight))
        bad = good_probes(preflight)[1]
        if bad:
            skipped.append(f"preflight.json: {bad} malformed probe row(s)")
    elif preflight is not None:
        skipped.append("preflight.json is not a JSON object")
    labels = run.eval_labels()
    if len(labels) >= 2:
        first, last = labels[0], labels[-1]
        last_name = f"step {last}"
        left = showable_episodes(run.eval_rows(first), f"eval/{first}.jsonl", skipped)
        right = showable_episodes(run.eval_rows(last), f"eval/{last}.jsonl", skipped)
        parts.append(f"<h2>Trajectories: {html.escape(first)} vs {html.escape(last_name)}</h2>")
        parts.append(side_by_side(left, right, first, last_name))
    if skipped:
        items = "".join(f"<li>{html.escape(s)}</li>" for s in skipped)
        parts.append(f"<h2>Skipped</h2><p>Left out because they could not be read:</p><ul>{items}</ul>")
    atomic_write_text(run.report_path, page(f"grpolab {run.path.name}", "".join(parts), CSS))
    return run.report_path
