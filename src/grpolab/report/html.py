"""`runs/NAME/report.html`: one self-contained page (inline SVG, no scripts, opens offline).

Curves of every metric (`grpolab.metrics`) with the kl bound and alarms marked, held-out success, the preflight
results and probe table, and base vs trained trajectories side by side, tags highlighted.
"""

from __future__ import annotations

import html
import json
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
HELDOUT_KEYS = ["heldout/success", "heldout/tool_call_prob", "heldout/schema", "heldout/reward"]
CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:1em}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:.3em .6em;text-align:left}
svg{max-width:100%;height:auto}
.alarm{background:#fff0f0;border-left:4px solid #b00020;padding:.4em .8em;margin:.3em 0}"""


def _num(x: Any, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, (int, float)) else "n/a"


def probe_table(preflight: dict[str, Any]) -> str:
    """The gameability probes (each with its worst task) and the learnability summary, as HTML."""
    rows = "".join(
        f"<tr><td>{html.escape(p['probe'])}</td><td>{html.escape(p['task_id'])}</td><td>{p['score']:+.2f}</td>"
        f"<td>{p['honest']:+.2f}</td><td class='{'bad' if p['gameable'] else 'good'}'>"
        f"{'GAMEABLE' if p['gameable'] else 'below honest'}</td>"
        f"<td><code>{html.escape(p['breakdown'])}</code></td></tr>"
        for p in preflight.get("probes", [])
    )
    learn = preflight.get("learnability")
    summary = ""
    if learn:
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


def render_report(path: str | Path) -> Path:
    """Write runs/NAME/report.html from the run's artifacts and return its path."""
    run = RunDir(path)
    cfg = run.read_json("config.json")
    rows = run.metrics()
    alarm_rows = [r for r in rows if r.get("alarms")]
    summary = run.eval_summary()
    weights = html.escape(json.dumps(cfg.get("reward", {}).get("weights")))
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
        f"<div class='alarm'>step {r['step']}: {html.escape(k)}: {html.escape(str(v))}</div>"
        for r in alarm_rows
        for k, v in r["alarms"].items()
    ]
    parts += alarms or ["<p>No alarm fired.</p>"]
    steps = [r["step"] for r in alarm_rows]
    charts = "".join(svg_chart(title, keys, rows, steps) for title, keys in CURVES)
    parts.append(f"<h2>Curves</h2><div class='grid'>{charts}</div>")
    preflight = run.artifact("preflight.json")
    if isinstance(preflight, dict):
        parts.append("<h2>Preflight: gameability probes and learnability</h2>" + probe_table(preflight))
    labels = run.eval_labels()
    if len(labels) >= 2:
        first, last = labels[0], labels[-1]
        last_name = f"step {last}"
        parts.append(f"<h2>Trajectories: {first} vs {last_name}</h2>")
        parts.append(side_by_side(run.eval_rows(first), run.eval_rows(last), first, last_name))
    atomic_write_text(run.report_path, page(f"grpolab {run.path.name}", "".join(parts), CSS))
    return run.report_path
