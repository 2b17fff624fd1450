"""Locks on files: flock, so the kernel releases them when the holder dies (kill -9 included); no stale lock files."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def try_lock(path: Path) -> int | None:
    """An open fd holding an exclusive flock on `path` (created if missing, never replaced), or None when another
    open file holds it. OSError when the file cannot be created or locked (read-only place, no lock support)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        raise
    return fd


def adopt_lock(fd: int, path: Path) -> bool:
    """Take over a lock fd inherited from a parent process, if it really is an open file of `path` holding the
    lock (flock on the same open file is a no-op for its holder; anything else is refused)."""
    try:
        mine, theirs = os.fstat(fd), os.stat(path)
        if (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def is_locked(path: Path) -> bool:
    """Whether some process holds a flock on `path`, read from /proc/locks (taking the lock to find out would
    make a trainer starting at that moment fail)."""
    try:
        info = os.stat(path)
        table = Path("/proc/locks").read_text()
    except OSError:
        return False
    for line in table.splitlines():
        fields = line.split()
        if "->" in fields or "FLOCK" not in fields:  # "->" marks a waiter, not a holder
            continue
        for f in fields:
            parts = f.split(":")
            if len(parts) == 3 and parts[2].isdigit() and int(parts[2]) == info.st_ino:
                try:
                    if (int(parts[0], 16), int(parts[1], 16)) == (os.major(info.st_dev), os.minor(info.st_dev)):
                        return True
                except ValueError:
                    continue
    return False


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` for a short critical section (blocking)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
