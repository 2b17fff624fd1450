"""glibc's allocator told to keep freed memory in the process, from the moment a model loads (`keep_freed_memory`).

By default glibc serves a block above its mmap threshold (128 KB, growing to at most 32 MB) from a fresh `mmap` and
unmaps it when it is freed, and gives the heap's free top back to the kernel above 128 KB. A training step allocates
and frees tensors of that size by the hundred (activations, a chunk's logits, TRL's full logits), so each one faults
its pages in again, and the kernel zeroes every 4 KB page: system time, not compute. Measured with `perf stat` on the
exported TRL script at the tests' tiny shape (one process, 1 SFT + 2 GRPO steps): 5.4M page faults, 12.6 s of system
time in 23 s; with the settings below 1.5M page faults, 5.6 s of system time in 15.5 s. The native loop's step at the
demo's shape did not change (its page faults are not these).

The price: memory a step freed stays with the process for the next step instead of going back to the kernel, so the
resident size sits at its peak (the peak itself is what the step needs either way). Blocks of 1 GiB and more still
come from mmap. Only glibc has `mallopt`; elsewhere (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
"""mallopt's parameter numbers (glibc's malloc.h)."""

SETTINGS = {M_MMAP_THRESHOLD: 1 << 30, M_TRIM_THRESHOLD: 1 << 30, M_TOP_PAD: 64 << 20}
"""Blocks below 1 GiB from the heap; the heap's top given back only above 1 GiB; the heap grown 64 MiB at a time."""


@functools.cache
def keep_freed_memory() -> bool:
    """Set `SETTINGS` once in this process (a forked child inherits them); whether glibc took them all."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in SETTINGS.items())
