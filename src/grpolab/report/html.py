"""`runs/NAME/report.html`: one self-contained page (inline SVG, no scripts, opens offline).

Curves of every metric (the chart groups of `grpolab.vocabulary`) with the kl bound and alarms marked, held-out
success, the preflight results and probe table, and base vs trained trajectories side by side, tags highlighted.

Every artifact is read through the one defensive reader (`grpolab.rundir.snapshot`): a malformed file, row or value
is left out and named under "Skipped", so a damaged or hand-edited run dir still gets a report (only a missing or
unreadable config.json stops it).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from grpolab.files.atomic import atomic_write_text
from grpolab.report.changes import changes_html, run_changes
from grpolab.report.charts import svg_chart
from grpolab.report.trajectories import page, side_by_side
from grpolab.rewards.components import standard_names
from grpolab.rundir import RunDir, read_snapshot
from grpolab.rundir.numbers import drawable, num
from grpolab.rundir.snapshot import good_probes
from grpolab.vocabulary import (
    CONVERGENCE,
    FRAC_ZERO_STD,
    HELDOUT_HEADLINE,
    REWARD_MEAN,
    TOOL_CALL_PROB,
    chart_groups,
    logged_components,
)

CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:1em}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:.3em .6em;text-align:left}
svg{max-width:100%;height:auto}
.alarm{background:#fff0f0;border-left:4px solid #b00020;padding:.4em .8em;margin:.3em 0}"""


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
            f"<p>Learnability: mean reward {num(learn.get(REWARD_MEAN), '+.2f')}, base prior {TOOL_CALL_PROB} "
            f"{num(learn.get(TOOL_CALL_PROB), '.0%')}, {FRAC_ZERO_STD} {num(learn.get(FRAC_ZERO_STD), '.0%')}, "
            f"pass@G {html.escape(str(learn.get('pass_at_g')))}. "
            f"{html.escape(str(learn.get('recommendation', '')))}</p>"
        )
    head = "<tr><th>probe</th><th>worst task</th><th>score</th><th>honest</th><th>verdict</th><th>breakdown</th></tr>"
    return f"{summary}<table>{head}{rows}</table>{shortcut_table(preflight)}"


def shortcut_table(preflight: dict[str, Any]) -> str:
    """The shortcut probes (edits of honest work): margin over honest work and what pays, as HTML."""
    found = preflight.get("shortcuts")
    rows = []
    for r in found if isinstance(found, list) else []:
        if not (isinstance(r, dict) and isinstance(r.get("shortcut"), str) and drawable(r.get("margin"))):
            continue
        paying = r.get("paying") if isinstance(r.get("paying"), dict) else {}
        pays = ", ".join(f"{html.escape(str(k))} {num(v, '+.3f')}" for k, v in paying.items()) if r.get("paid") else ""
        rows.append(
            f"<tr><td>{html.escape(r['shortcut'])}</td><td>{html.escape(str(r.get('task_id', '')))}</td>"
            f"<td class='{'bad' if r.get('paid') else 'good'}'>{r['margin']:+.3f}</td><td>{pays or '-'}</td></tr>"
        )
    if not rows:
        return ""
    head = "<tr><th>shortcut (edit of honest work)</th><th>task</th><th>margin over honest</th><th>paid by</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def _heldout_table(summary: dict[str, Any]) -> str:
    heads = "".join(f"<th>{html.escape(k)}</th>" for k in summary)
    body = "".join(
        f"<tr><td>{k}</td>" + "".join(f"<td>{num(v.get(k), '.2f')}</td>" for v in summary.values()) + "</tr>"
        for k in HELDOUT_HEADLINE
    )
    return f"<h2>Held-out evaluation</h2><table><tr><th>metric</th>{heads}</tr>{body}</table>"


def render_report(path: str | Path, skipped: list[str] | None = None) -> Path:
    """Write runs/NAME/report.html from the run's artifacts and return its path. What had to be left out (a
    malformed file, row or value) is named on the page and appended to `skipped`."""
    run = RunDir(path)
    run.config_data()  # the one artifact a report cannot do without: missing or unreadable, it stops here
    snap = read_snapshot(run.path)
    skipped = [] if skipped is None else skipped
    skipped += snap.problems
    cfg, rows = snap.config, snap.metrics
    reward = cfg.get("reward") if isinstance(cfg.get("reward"), dict) else {}
    weights = html.escape(json.dumps(reward.get("weights"), default=str))
    parts = [
        f"<h1>grpolab run: {html.escape(run.path.name)}</h1>",
        f"<p>env <b>{html.escape(str(cfg.get('env', '?')))}</b>, "
        f"model <b>{html.escape(str(cfg.get('model', '?')))}</b>, {len(rows)} GRPO steps, "
        f"weights <code>{weights}</code></p>",
    ]
    if snap.summary:
        parts.append(_heldout_table(snap.summary))
    parts.append("<h2>Alarms</h2>")
    alarms = [
        f"<div class='alarm'>step {step}: {html.escape(name)}: {html.escape(why)}</div>"
        for step, name, why in snap.alarms()
    ]
    parts += alarms or ["<p>No alarm fired.</p>"]
    steps = [r["step"] for r in snap.alarm_rows()]
    convergence = svg_chart("reward, kl and tool-token mass per iteration", list(CONVERGENCE), rows, steps)
    parts.append(f"<h2>Training convergence and token-shift dynamics</h2>{convergence}")
    components = list(dict.fromkeys([*standard_names(), *logged_components(rows)]))  # a user's too
    charts = "".join(svg_chart(title, keys, rows, steps) for title, keys in chart_groups(components))
    parts.append(f"<h2>Curves</h2><div class='grid'>{charts}</div>")
    if snap.preflight:
        parts.append("<h2>Preflight: gameability probes and learnability</h2>" + probe_table(snap.preflight))
    changes = run_changes(snap)
    if changes is not None:
        parts.append(changes_html(changes, rows))
    labels = snap.eval_labels()
    if len(labels) >= 2:
        first, last = labels[0], labels[-1]
        last_name = f"step {last}"
        parts.append(f"<h2>Trajectories: {html.escape(first)} vs {html.escape(last_name)}</h2>")
        parts.append(side_by_side(snap.evals[first], snap.evals[last], first, last_name))
    if skipped:
        items = "".join(f"<li>{html.escape(s)}</li>" for s in skipped)
        parts.append(f"<h2>Skipped</h2><p>Left out because they could not be read:</p><ul>{items}</ul>")
    atomic_write_text(run.report_path, page(f"grpolab {run.path.name}", "".join(parts), CSS))
    return run.report_path
