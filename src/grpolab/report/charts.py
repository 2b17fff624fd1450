"""Curves as inline SVG (matplotlib, no scripts): the report and the web lab draw with the same function."""

from __future__ import annotations

import html
import io
from typing import Any

from grpolab.vocabulary import KL_BOUND, is_heldout

MARGINS = {"left": 0.14, "right": 0.98, "top": 0.9, "bottom": 0.17}
"""Fixed margins of a chart (fractions of its 4.6 x 2.6 in): room for 7-point tick labels of up to 7 characters, the
10-point title and the x label. `tight_layout` measured every text each time: 15 charts took 1.2 s with it, 0.7 s
without (2026-12-07), and a report or a lab redraw draws them all."""


def svg_chart(title: str, keys: list[str], rows: list[dict[str, Any]], alarm_steps: list[int]) -> str:
    """One small chart of `keys` against `step`; alarm steps shaded; held-out points marked. Values matplotlib
    cannot place (axis ranges that overflow) give a line saying so instead of the chart, never an exception:
    callers draw rows the snapshot already bounded (`rundir.numbers.drawable`), so this is the last guard."""
    import matplotlib  # heavy: only when a chart is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.6, 2.6), dpi=80)
    fig.subplots_adjust(**MARGINS)
    try:
        _draw(ax, title, keys, rows, alarm_steps)
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
    except (ValueError, OverflowError) as exc:
        return f"<p class='chart-error'>{html.escape(title)}: cannot be drawn ({html.escape(str(exc))})</p>"
    finally:
        plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]


def _draw(ax: Any, title: str, keys: list[str], rows: list[dict[str, Any]], alarm_steps: list[int]) -> None:
    plotted = False
    for key in keys:
        pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        if pts:
            xs, ys = zip(*pts)
            style = "--" if key == KL_BOUND else ("o-" if is_heldout(key) else "-")
            ax.plot(xs, ys, style, label=key, linewidth=1.4, markersize=4)
            plotted = True
    for s in alarm_steps:
        ax.axvline(s, color="#b00020", alpha=0.3, linewidth=3)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step", fontsize=8)
    ax.tick_params(labelsize=7)
    if plotted:
        ax.legend(fontsize=6, loc="best")
