"""What a path is, in the words a refusal quotes: whether it lies under /proc, /sys or /dev, what kind of file it
is, and why the operating system refused it."""

from __future__ import annotations

import stat

SPECIAL_ROOTS = ("/proc", "/sys", "/dev")
"""Folders whose files may never end, or block: no user file is read from or made under them."""


def is_special(path: str) -> bool:
    """Whether an absolute path is /proc, /sys or /dev or under one (files there may never end, or block)."""
    return any(path == r or path.startswith(r + "/") for r in SPECIAL_ROOTS)


def os_reason(exc: BaseException) -> str:
    """Why the OS refused, in its own words (`No such file or directory`)."""
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def kind_text(mode: int, real: str) -> str:
    """What a file that is not a regular one is: `a directory`, `a FIFO`, ... (`real`: its resolved path)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return f"a special file under /{real.split('/')[1]}"
