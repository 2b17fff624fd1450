"""What a person watching a run sees: a rich progress bar with ETA and key metrics, notes, and trackio curves.

On a terminal the bar redraws in place. When stdout or stderr is not a terminal (CI logs, `grpolab demo | tee`), a
redrawn bar leaves either nothing or a smear of control codes, so each finished step prints one plain line on
stdout instead: `step 3/20  48.2 s  reward +2.41  kl 0.012  P(tool) 94%`.

Display only: the run loop computes every number (alarms included) and hands this the finished rows.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

from grpolab.config import LabConfig
from grpolab.errors import UserError
from grpolab.vocabulary import (
    ALARMS,
    HELDOUT_SUCCESS,
    KL,
    PERF_STEP_S,
    REWARD_MEAN,
    SKIP_REASON,
    SKIPPED,
    TOOL_CALL_PROB,
)


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Progress:
    def __init__(self, cfg: LabConfig, quiet: bool = False, plain: bool | None = None):
        """`plain`: one line per step on stdout instead of the bar (default: when stdout or stderr is not a
        terminal)."""
        self.quiet = quiet
        self.console = Console(stderr=True, highlight=False, markup=False, emoji=False)  # notes quote paths, data
        self.plain = plain if plain is not None else not (_is_terminal(sys.stdout) and _is_terminal(sys.stderr))
        self._bar: RichProgress | None = None
        self._task: Any = None
        self._total = 0
        self._trackio: Any = None
        if "trackio" in cfg.train.reporters:
            try:
                import trackio  # an optional reporter
            except ImportError:
                raise UserError(
                    "trackio is asked for (train.trackio or train.report_to) but is not installed",
                    "pip install trackio, or leave it out",
                )
            trackio.init(project=cfg.train.trackio_project, config=cfg.model_dump(mode="json"))
            self._trackio = trackio

    def note(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, markup=False, soft_wrap=True)  # a path in it is never folded

    def start(self, total: int, done: int) -> None:
        self._total = total
        if self.quiet or total <= done or self.plain:
            return
        columns = (TextColumn("GRPO"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        self._bar = RichProgress(*columns, TextColumn("{task.description}"), console=self.console, transient=False)
        self._bar.start()
        self._task = self._bar.add_task("", total=total, completed=done)

    def update(self, m: dict[str, Any]) -> None:
        """Show one finished step's row (alarms already in it)."""
        for name, why in (m.get(ALARMS) or {}).items():
            self.note(f"ALARM {name} at step {m['step']}: {why}")
        if self._trackio is not None:
            self._trackio.log({k: v for k, v in m.items() if isinstance(v, (int, float))}, step=m["step"])
        if self.quiet or (self._bar is None and not self.plain):
            return
        parts = [
            f"reward {m.get(REWARD_MEAN, float('nan')):+.2f}",
            f"kl {m.get(KL, float('nan')):.3f}",
            f"P(tool) {m.get(TOOL_CALL_PROB, float('nan')):.0%}",
        ]
        if HELDOUT_SUCCESS in m:
            parts.append(f"held-out {m[HELDOUT_SUCCESS]:.0%}")
        if m.get(SKIPPED):
            parts.append(f"SKIPPED ({m.get(SKIP_REASON)})")
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description="  ".join(parts))
            return
        seconds = f"{m[PERF_STEP_S]:.1f} s" if isinstance(m.get(PERF_STEP_S), (int, float)) else ""
        head = [f"step {m['step']}/{self._total}", seconds]
        print("  ".join(p for p in [*head, *parts] if p), file=sys.stdout, flush=True)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
        if self._trackio is not None:
            self._trackio.finish()
