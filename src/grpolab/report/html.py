"""`runs/NAME/report.html`: one self-contained page (inline SVG, no scripts, opens offline).

Curves of every DESIGN.md metric with the kl bound and alarms marked, held-out success, the preflight results and
probe table when `grpolab check --run` saved them, and base vs trained trajectories side by side, tags highlighted.
"""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path
from typing import Any

from grpolab.rundir import RunDir, atomic_write_text, read_jsonl

CURVES = [
    ("reward", ["reward/mean", "reward/format", "reward/schema", "reward/completion", "reward/length"]),
    ("kl", ["kl", "kl_bound"]),
    ("entropy", ["entropy"]),
    ("completion length", ["completion_len"]),
    ("tool use", ["tool_call_prob", "tool_token_mass"]),
    ("success", ["success", "heldout/success"]),
    ("frac_zero_std", ["frac_zero_std"]),
]
_TAG = re.compile(r"(&lt;/?(?:thought|tool_call|tool_response)&gt;)")
CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:1em}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:.3em .6em;text-align:left}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:1em;margin-bottom:1.5em}
svg{max-width:100%;height:auto}
pre{white-space:pre-wrap;word-break:break-word;background:#f7f7f7;padding:.6em;font-size:.8em;margin:0}
.tag{color:#a0007a;font-weight:600}.bad{color:#b00020;font-weight:600}.good{color:#0a7d28;font-weight:600}
.alarm{background:#fff0f0;border-left:4px solid #b00020;padding:.4em .8em;margin:.3em 0}"""


def highlight(text: str) -> str:
    return _TAG.sub(r'<span class="tag">\1</span>', html.escape(text))


def svg_chart(title: str, keys: list[str], rows: list[dict[str, Any]], alarm_steps: list[int]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.6, 2.6), dpi=80)
    plotted = False
    for key in keys:
        pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        if pts:
            xs, ys = zip(*pts)
            style = "--" if key == "kl_bound" else ("o-" if key.startswith("heldout") else "-")
            ax.plot(xs, ys, style, label=key, linewidth=1.4, markersize=4)
            plotted = True
    for s in alarm_steps:
        ax.axvline(s, color="#b00020", alpha=0.3, linewidth=3)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step", fontsize=8)
    ax.tick_params(labelsize=7)
    if plotted:
        ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]


def _load_eval(run: RunDir, label: str) -> list[dict[str, Any]]:
    return read_jsonl(run.path / "eval" / f"{label}.jsonl")


def side_by_side(left: list[dict[str, Any]], right: list[dict[str, Any]], left_name: str, right_name: str,
                 limit: int = 6) -> str:  # fmt: skip
    by_task = {r.get("task_id"): r for r in right}
    out = []
    for a in left[:limit]:
        b = by_task.get(a.get("task_id"))
        if b is None:
            continue
        out.append(f"<h3>{html.escape(str(a.get('task_id')))}: {html.escape(str(a.get('prompt', '')))} "
                   f"(expected {html.escape(str(a.get('answer', '')))})</h3><div class='pair'>")  # fmt: skip
        for name, r in ((left_name, a), (right_name, b)):
            ok = (r.get("components") or {}).get("completion") == 1.0
            verdict = "<span class='good'>verified</span>" if ok else "<span class='bad'>not verified</span>"
            reasons = "; ".join(f"{k}: {v}" for k, v in (r.get("reasons") or {}).items())
            out.append(f"<div><b>{html.escape(name)}</b> {verdict} <code>{html.escape(str(r.get('breakdown', '')))}</code>"
                       f"<pre>{highlight(str(r.get('text', '')))}</pre><small>{html.escape(reasons)}</small></div>")  # fmt: skip
        out.append("</div>")
    return "".join(out) or "<p>No evaluations to compare yet.</p>"


def probe_table(preflight: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(p['probe'])}</td><td>{html.escape(p['task_id'])}</td><td>{p['score']:+.2f}</td>"
        f"<td>{p['honest']:+.2f}</td><td class='{'bad' if p['gameable'] else 'good'}'>"
        f"{'GAMEABLE' if p['gameable'] else 'below honest'}</td><td><code>{html.escape(p['breakdown'])}</code></td></tr>"
        for p in preflight.get("probes", [])
    )
    learn = preflight.get("learnability")
    summary = "" if not learn else (f"<p>Learnability: mean reward {learn.get('reward/mean', float('nan')):+.2f}, base prior tool_call_prob "
               f"{learn.get('tool_call_prob', 0):.0%}, frac_zero_std {learn.get('frac_zero_std', 0):.0%}, pass@G "
               f"{html.escape(str(learn.get('pass_at_g')))}. {html.escape(str(learn.get('recommendation', '')))}</p>")  # fmt: skip
    return (f"{summary}<table><tr><th>probe</th><th>worst task</th><th>score</th><th>honest</th><th>verdict</th>"
            f"<th>breakdown</th></tr>{rows}</table>")  # fmt: skip


def render_report(path: str | Path) -> Path:
    """Write runs/NAME/report.html from the run's artifacts and return its path."""
    run = RunDir(path)
    cfg = run.read_json("config.json")
    rows = read_jsonl(run.metrics_path)
    alarm_rows = [r for r in rows if r.get("alarms")]
    summary_path = run.path / "eval" / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    parts = [f"<h1>grpolab run: {html.escape(run.path.name)}</h1>",
             f"<p>env <b>{html.escape(cfg.get('env', '?'))}</b>, model <b>{html.escape(cfg.get('model', '?'))}</b>, "
             f"{len(rows)} GRPO steps, weights <code>{html.escape(json.dumps(cfg.get('reward', {}).get('weights')))}</code></p>"]  # fmt: skip
    if summary:
        heads = "".join(f"<th>{html.escape(k)}</th>" for k in summary)
        keys = ["heldout/success", "heldout/tool_call_prob", "heldout/schema", "heldout/reward"]
        body = "".join(
            f"<tr><td>{k}</td>" + "".join(f"<td>{v.get(k, float('nan')):.2f}</td>" for v in summary.values()) + "</tr>"
            for k in keys
        )
        parts.append(f"<h2>Held-out evaluation</h2><table><tr><th>metric</th>{heads}</tr>{body}</table>")
    parts.append("<h2>Alarms</h2>")
    parts += [f"<div class='alarm'>step {r['step']}: {html.escape(k)}: {html.escape(v)}</div>"
              for r in alarm_rows for k, v in r["alarms"].items()] or ["<p>No alarm fired.</p>"]  # fmt: skip
    steps = [r["step"] for r in alarm_rows]
    parts.append(
        "<h2>Curves</h2><div class='grid'>" + "".join(svg_chart(t, k, rows, steps) for t, k in CURVES) + "</div>"
    )
    preflight = run.path / "preflight.json"
    if preflight.is_file():
        parts.append(
            "<h2>Preflight: gameability probes and learnability</h2>" + probe_table(json.loads(preflight.read_text()))
        )
    labels = sorted((p.stem for p in (run.path / "eval").glob("*.jsonl") if p.stem.isdigit()), key=int)
    first = "base" if (run.path / "eval" / "base.jsonl").is_file() else (labels[0] if labels else None)
    if first and labels:
        parts.append(f"<h2>Trajectories: {first} vs step {labels[-1]}</h2>")
        parts.append(side_by_side(_load_eval(run, first), _load_eval(run, labels[-1]), first, f"step {labels[-1]}"))
    page = f"<!doctype html><html><head><meta charset='utf-8'><title>grpolab {html.escape(run.path.name)}</title><style>{CSS}</style></head><body>{''.join(parts)}</body></html>"
    out = run.path / "report.html"
    atomic_write_text(out, page)
    return out
