"""Curves as inline SVG (matplotlib, no scripts): the report and the web lab draw with the same function."""

from __future__ import annotations

import html
import io
from typing import Any

from grpolab.vocabulary import KL_BOUND, is_heldout

MARGINS = {"left": 0.14, "right": 0.98, "top": 0.9, "bottom": 0.17}
"""Fixed margins of a chart (fractions of its 4.6 x 2.6 in): room for 7-point tick labels of up to 7 characters, the
10-point title and the x label. `tight_layout` measured every text each time: 15 charts took 1.2 s with it, 0.7 s
without (2026-12-07), and a report or a lab redraw draws them all. Then (`python benchmarks/chart_cost.py`: the report's
7 chart groups over 20 steps, against the earlier recipe in the same run) 46.1 -> 27.1 ms a chart and 33 -> 14 KB:
the title's place is given (`y=1.0`: matplotlib no longer measures the axes to lift it over top tick labels, which
these charts never have); at most 6 step ticks, whole steps only, and 4 value ticks (each tick is a few artists);
text is SVG <text> that the browser draws (`svg.fonttype` none), not glyph outlines; and a bare Figure, not
pyplot's (nothing to register or close, and pyplot's import is skipped)."""


def svg_chart(title: str, keys: list[str], rows: list[dict[str, Any]], alarm_steps: list[int]) -> str:
    """One small chart of `keys` against `step`; alarm steps shaded; held-out points marked. Values matplotlib
    cannot place (axis ranges that overflow) give a line saying so instead of the chart, never an exception:
    callers draw rows the snapshot already bounded (`rundir.numbers.drawable`), so this is the last guard."""
    from matplotlib import rc_context  # heavy: only when a chart is drawn
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.6, 2.6), dpi=80)  # no pyplot: nothing global to register, nothing to close
    FigureCanvasSVG(fig)
    fig.subplots_adjust(**MARGINS)
    ax = fig.add_subplot()
    try:
        _draw(ax, title, keys, rows, alarm_steps)
        buf = io.StringIO()
        with rc_context({"svg.fonttype": "none"}):  # text as <text>, drawn by the browser: half the bytes and time
            fig.savefig(buf, format="svg")
    except (ValueError, OverflowError) as exc:
        return f"<p class='chart-error'>{html.escape(title)}: cannot be drawn ({html.escape(str(exc))})</p>"
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]


def _draw(ax: Any, title: str, keys: list[str], rows: list[dict[str, Any]], alarm_steps: list[int]) -> None:
    from matplotlib.ticker import MaxNLocator

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
    ax.set_title(title, fontsize=10, y=1.0)
    ax.set_xlabel("step", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))  # steps are whole: no tick at step 2.5
    ax.yaxis.set_major_locator(MaxNLocator(nbins=4))  # a 2.6 in chart reads 4-5 levels
    if plotted:
        ax.legend(fontsize=6, loc="best")
