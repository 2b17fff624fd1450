"""Which recorded values are numbers a run's readers can use: finite, and within what can be drawn.

Run files are hand-editable and may hold anything JSON does (a 400-digit integer, 1e308, a string where a number
goes); the report, the lab, the alarms and resume read values through these tests instead of trusting them.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DRAWN = 1e15
"""Values are drawn, shown, summed and compared within ±MAX_DRAWN. No reward, probability, KL, count or time a run
records comes near it; beyond about 1e307 plot ranges and sums overflow (matplotlib raised on ±1.7e308)."""


def number(x: Any) -> bool:
    """A real number (int or float, not a bool); it may still be NaN, infinite or beyond a float's range."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def finite(x: Any) -> bool:
    """A real number a float holds finitely: not a bool, NaN or infinite, nor an integer beyond a float's range."""
    try:
        return number(x) and math.isfinite(x)
    except OverflowError:  # an int too large for a float (a 400-digit integer in a hand-edited file)
        return False


def finite_number(x: Any) -> float | None:
    """The value as a float when it is a real, finite number (see `finite`), else None."""
    return float(x) if finite(x) else None


def drawable(x: Any) -> bool:
    """A finite number within ±MAX_DRAWN: what the report, the lab and sim-to-real draw, show and compare."""
    return finite(x) and abs(x) <= MAX_DRAWN


def num(x: Any, fmt: str = "+.2f") -> str:
    """A value as it is shown: formatted when it can be drawn (`drawable`), else "n/a"."""
    return format(x, fmt) if drawable(x) else "n/a"
