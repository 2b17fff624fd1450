"""What a person watching a run sees: a rich progress bar with ETA and key metrics, notes, and trackio curves.

Display only: the run loop computes every number (alarms included) and hands this the finished rows.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

from grpolab.config import LabConfig
from grpolab.errors import UserError
from grpolab.vocabulary import ALARMS, HELDOUT_SUCCESS, KL, REWARD_MEAN, SKIP_REASON, SKIPPED, TOOL_CALL_PROB


class Progress:
    def __init__(self, cfg: LabConfig, quiet: bool = False):
        self.quiet = quiet
        self.console = Console(stderr=True, highlight=False, markup=False, emoji=False)  # notes quote paths, data
        self._bar: RichProgress | None = None
        self._task: Any = None
        self._trackio: Any = None
        if cfg.train.trackio:
            try:
                import trackio
            except ImportError:
                raise UserError(
                    "train.trackio is on but trackio is not installed", "pip install trackio, or set it off"
                )
            trackio.init(project="grpolab", config=cfg.model_dump(mode="json"))
            self._trackio = trackio

    def note(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, markup=False)

    def start(self, total: int, done: int) -> None:
        if self.quiet or total <= done:
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
        if self._bar is None:
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
        self._bar.update(self._task, advance=1, description="  ".join(parts))

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
        if self._trackio is not None:
            self._trackio.finish()
