"""What every part of a run directory stands on: its path."""

from __future__ import annotations

from pathlib import Path


class RunPath:
    def __init__(self, path: str | Path):
        self.path = Path(path)
