"""What the report's charts cost: `report.charts.svg_chart` against the recipe it replaced, in alternating rounds.

    .venv/bin/python benchmarks/chart_cost.py [--rounds 5] [--steps 20]

Every training run ends with a report of about 15 charts, and the web lab redraws its chart on each slider move.
The rows are a synthetic run (`--steps` steps of every metric the report draws, two alarm steps); each round draws
the report's chart groups once with each arm: as shipped (a bare Figure, the title's place given, 6 whole-step and
4 value ticks, text as SVG <text>) and the earlier recipe (pyplot, matplotlib placing the title and the ticks, glyph
outlines). Reports the median milliseconds per chart and the SVG bytes of each arm (ratios measured in one run).
"""

from __future__ import annotations

import argparse
import io
import math
import statistics
import time
from typing import Any

from common import write_results

from grpolab.report.charts import MARGINS, svg_chart
from grpolab.report.html import chart_groups
from grpolab.vocabulary import KL_BOUND, is_heldout

COMPONENTS = ["format", "schema", "completion", "length"]


def synthetic_rows(steps: int) -> list[dict[str, Any]]:
    """A run's metric rows: every key the report's chart groups draw, as smooth curves over `steps` steps."""
    keys = sorted({k for _, ks in chart_groups(COMPONENTS) for k in ks})
    return [{"step": s, **{k: math.sin(s / 3 + i) + i for i, k in enumerate(keys)}} for s in range(1, steps + 1)]


def earlier_chart(title: str, keys: list[str], rows: list[dict[str, Any]], alarm_steps: list[int]) -> str:
    """The recipe before 2026-12-07, as it was: pyplot's figure, the title placed by matplotlib, matplotlib's
    default tick locators, text as glyph outlines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.6, 2.6), dpi=80)
    fig.subplots_adjust(**MARGINS)
    try:
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
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
    finally:
        plt.close(fig)
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    rows, alarms = synthetic_rows(args.steps), [3, 7]
    groups = list(chart_groups(COMPONENTS))
    arms = {"shipped": svg_chart, "earlier": earlier_chart}
    times: dict[str, list[float]] = {a: [] for a in arms}
    sizes = {a: len(f(*groups[0], rows, alarms)) for a, f in arms.items()}  # warm-up: imports, font cache
    for _ in range(args.rounds):
        for arm, draw in arms.items():
            start = time.perf_counter()
            for title, keys in groups:
                draw(title, keys, rows, alarms)
            times[arm].append((time.perf_counter() - start) * 1000 / len(groups))
    result = {
        "command": f"python benchmarks/chart_cost.py --rounds {args.rounds} --steps {args.steps}",
        "date": time.strftime("%Y-%m-%d"),
        "charts_per_round": len(groups),
        "ms_per_chart": {a: round(statistics.median(t), 1) for a, t in times.items()},
        "svg_bytes": sizes,
    }
    result["speedup"] = round(result["ms_per_chart"]["earlier"] / result["ms_per_chart"]["shipped"], 2)
    print(result)
    write_results("chart_cost", result)


if __name__ == "__main__":
    main()
