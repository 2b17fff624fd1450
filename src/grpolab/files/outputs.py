"""Outputs users name (-o, --save, --html, --out): checked before any work is done, then written through (a stream,
a FIFO, a device) or replaced in one rename (a regular file, at its resolved place), never a folder made for them.
"""

from __future__ import annotations

import os
import re
import stat
import uuid
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from grpolab.errors import UserError
from grpolab.files.kinds import is_special, kind_text, os_reason

_STREAM_LINK = re.compile(r"^/proc/(self|thread-self|\d+)(/task/\d+)?/fd/\d+$")
"""An open file descriptor's link (/dev/stdout, /dev/fd/N lead here): an open stream, even onto a regular file."""


@dataclass(frozen=True)
class OutputTarget:
    """Where an output the user named goes. `path` is the regular file that will be replaced in one rename (the
    named path with its symlinks resolved, so a link stays a link), or, when `stream`, the named path itself: a
    character device, a FIFO or an open stream (/dev/stdout), written into and never replaced."""

    named: Path
    path: Path
    stream: bool


def output_target(path: Path, flag: str) -> OutputTarget:
    """Check an output path the user named before any work is done (UserError naming it and the flag otherwise).

    A regular file (or a symlink to one, or a new name in an existing folder) is replaced atomically at its
    resolved place; a character device, a FIFO or an open stream is written through; a directory, a socket, a
    block device, another file under /dev, /proc or /sys, or a new name there is refused. A missing folder on the
    way is never created: the fix names the `mkdir -p` to run."""
    fix = f"pick another path for {flag}"
    try:
        info: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        info = None
    except (OSError, ValueError) as exc:  # ENOTDIR (a file on the way), ELOOP, ENAMETOOLONG, a NUL byte...
        raise UserError(f"cannot write {path} ({os_reason(exc)})", fix) from None
    chain = _link_chain(path)
    special = any(map(is_special, chain))
    if info is None:
        real = Path(os.path.realpath(path))  # a dangling link: where its target would be
        if special or is_special(str(real)):
            raise UserError(f"cannot write {path} (no new file is made under /dev, /proc or /sys)", fix)
        if not real.parent.is_dir():
            folder = real.parent if os.path.islink(path) else Path(path).parent
            raise UserError(
                f"cannot write {path}: the folder {_first_missing(folder)} does not exist",
                f"create it first (mkdir -p {folder}), or {fix}",
            )
        return OutputTarget(path, real, stream=False)
    mode = info.st_mode
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or (stat.S_ISREG(mode) and any(map(_STREAM_LINK.match, chain))):
        return OutputTarget(path, path, stream=True)
    if stat.S_ISREG(mode) and not special:
        return OutputTarget(path, Path(os.path.realpath(path)), stream=False)
    what = "a block device" if stat.S_ISBLK(mode) else kind_text(mode, chain[-1])
    raise UserError(f"cannot write {path}: it is {what}, not a file grpolab writes into", fix)


def write_output(target: OutputTarget, data: str | bytes, executable: bool = False) -> None:
    """Write an output checked by `output_target`: into a stream (appending, as `>>` would; no fsync, no chmod),
    or into a temp file beside the resolved file, then one rename. A replaced file keeps its mode; a new one gets
    the umask's (`executable`: with execute bits where it can be read)."""
    raw = data.encode() if isinstance(data, str) else data
    if target.stream:
        fd = os.open(target.path, os.O_WRONLY | os.O_APPEND | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        return
    path = target.path
    try:
        old: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        old = None
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o777 if executable else 0o666
    )
    try:
        with os.fdopen(fd, "wb") as f:
            if old is not None:  # the file it replaces keeps its mode (and, where we may, its owner)
                mode = stat.S_IMODE(old.st_mode)
                os.fchmod(f.fileno(), mode | ((mode & 0o444) >> 2 if executable else 0))
                with suppress(PermissionError):
                    os.fchown(f.fileno(), old.st_uid, old.st_gid)
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def output_folder(path: Path, flag: str) -> None:
    """A folder output the user named (a run directory, an export, --accelerate-dir): the folder above it must
    exist (it is never made for them); UserError naming the missing folder and the `mkdir -p` otherwise."""
    parent = Path(os.path.realpath(path)).parent
    try:
        os.stat(parent)
    except FileNotFoundError:
        parent = parent if os.path.islink(path) else Path(path).parent
        raise UserError(
            f"cannot create {path}: the folder {_first_missing(parent)} does not exist",
            f"create it first (mkdir -p {parent}), or pick another path for {flag}",
        ) from None
    except (OSError, ValueError):
        return  # a file on the way, ELOOP...: the write itself names it


def _link_chain(path: Path) -> list[str]:
    """The absolute names a path goes through, link by link (folders resolved at each step): /dev/stdout ->
    /proc/self/fd/1 -> ... At most 40 links (the kernel's own limit); the last name is the one written."""
    chain = []
    p = os.path.abspath(path)
    for _ in range(40):
        head, tail = os.path.split(p)
        p = os.path.join(os.path.realpath(head), tail) if tail not in ("", ".", "..") else os.path.realpath(p)
        chain.append(p)
        if not os.path.islink(p):
            break
        p = os.path.join(os.path.dirname(p), os.readlink(p))
    return chain


def _first_missing(folder: Path) -> Path:
    """The topmost folder of `folder` that does not exist (what `mkdir -p` would make first)."""
    while not folder.parent.exists() and folder.parent != folder:
        folder = folder.parent
    return folder
