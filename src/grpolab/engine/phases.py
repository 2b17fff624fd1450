"""Where a step's time goes: wall seconds and work (tokens, calls) per phase, for metrics and the roofline profile.

`benchmarks/step_cost.py` turns these into achieved GFLOP/s or GB/s per phase against the machine's measured peaks.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

from grpolab.vocabulary import perf_key


class Phases:
    """Seconds and work per phase of one step; phases are named by `grpolab.vocabulary`'s PHASE_* constants."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.work: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    @contextmanager
    def __call__(self, name: str, **work: float) -> Iterator[None]:
        """Time a phase and add its work (e.g. tokens=...) to the phase's totals."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start
            self.count(name, **work)

    def count(self, name: str, **work: float) -> None:
        for key, value in work.items():
            self.work[name][key] += value

    def metrics(self) -> dict[str, float]:
        """`perf/PHASE_s` for every phase, and its work as `perf/PHASE_KEY`."""
        out = {perf_key(name): s for name, s in self.seconds.items()}
        for name, work in self.work.items():
            out.update({perf_key(name, key): v for key, v in work.items()})
        return out


NO_PHASES = Phases()
"""A sink for callers that do not profile (its totals are never read)."""
