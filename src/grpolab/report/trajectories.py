"""Trajectories side by side (base vs trained, or any two evaluations), tags highlighted, verdicts and reasons.

The report, `grpolab compare --html` and the web lab all render episode rows (`grpolab.metrics.episode_row`) here.
"""

from __future__ import annotations

import html
import re
from typing import Any

_TAG = re.compile(r"(&lt;/?(?:thought|think|tool_call|tool_response)&gt;)")

CSS = """.pair{display:grid;grid-template-columns:1fr 1fr;gap:1em;margin-bottom:1.5em}
.traj pre{white-space:pre-wrap;word-break:break-word;background:#f7f7f7;padding:.6em;font-size:.8em;margin:0}
.tag{color:#a0007a;font-weight:600}.bad{color:#b00020;font-weight:600}.good{color:#0a7d28;font-weight:600}"""


def highlight(text: str) -> str:
    """Escaped transcript text with the protocol's tags marked."""
    return _TAG.sub(r'<span class="tag">\1</span>', html.escape(text))


def _column(name: str, row: dict[str, Any]) -> str:
    ok = (row.get("components") or {}).get("completion") == 1.0
    verdict = "<span class='good'>verified</span>" if ok else "<span class='bad'>not verified</span>"
    reasons = "; ".join(f"{k}: {v}" for k, v in (row.get("reasons") or {}).items())
    breakdown = html.escape(str(row.get("breakdown", "")))
    return (
        f"<div class='traj'><b>{html.escape(name)}</b> {verdict} <code>{breakdown}</code>"
        f"<pre>{highlight(str(row.get('text', '')))}</pre><small>{html.escape(reasons)}</small></div>"
    )


def trajectory_pair(left: dict[str, Any], right: dict[str, Any], left_name: str, right_name: str) -> str:
    """One prompt: its text and expected answer, then the two trajectories in columns."""
    head = (
        f"<h3>{html.escape(str(left.get('task_id')))}: {html.escape(str(left.get('prompt', '')))} "
        f"(expected {html.escape(str(left.get('answer', '')))})</h3>"
    )
    return f"{head}<div class='pair'>{_column(left_name, left)}{_column(right_name, right)}</div>"


def side_by_side(
    left: list[dict[str, Any]], right: list[dict[str, Any]], left_name: str, right_name: str, limit: int = 6
) -> str:
    """Up to `limit` prompts that both evaluations have, each as a trajectory pair."""
    by_task = {r.get("task_id"): r for r in right}
    pairs = [
        trajectory_pair(a, by_task[a.get("task_id")], left_name, right_name)
        for a in left[:limit]
        if a.get("task_id") in by_task
    ]
    return "".join(pairs) or "<p>No evaluations to compare yet.</p>"


def page(title: str, body: str, css: str = "") -> str:
    """A self-contained HTML page (inline styles, no scripts)."""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{css}\n{CSS}</style></head><body>{body}</body></html>"
    )
