"""Give the pages a finished phase freed back to the OS (glibc's `malloc_trim`; a no-op elsewhere).

A GRPO step's phases allocate differently shaped tensors: the rollout's KV cache, the update's activations, an
evaluation's larger batch. glibc keeps what a phase freed inside its heap, where the next phase's tensors often do
not fit, so without a trim the resident set grows toward the sum of the phases' high-water marks instead of the
largest one (benchmarks/step_cost.py records the peak after each phase)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to trim
        return None


def trim() -> None:
    """Return the heap's free pages to the OS (a few milliseconds; pages are faulted in again when reused)."""
    fn = _malloc_trim()
    if fn is not None:
        fn(0)
