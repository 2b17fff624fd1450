"""Writing whole files and directories so that a process killed at any moment leaves whole files.

A file is written to a temp file in the target's folder, fsynced, then put in place with one `os.replace` (readers
see the old file or the new one); a directory is built in a temp directory beside it, its files fsynced, then
renamed into place after the old one is removed (a kill in between leaves no directory, never half of one).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: Path, write: Callable[[Path], Any]) -> None:
    """Replace `path` with what `write(tmp_path)` writes, in one rename (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Replace `path` with `text` in one rename (readers see the old file or the new one, never half of it)."""
    atomic_write(path, lambda tmp: tmp.write_text(text))


def atomic_write_dir(target: Path, fill: Callable[[Path], Any]) -> None:
    """Build a directory with `fill(tmp_dir)`, fsync its files, then rename it to `target`. An old `target` is
    removed first (rename cannot replace a non-empty directory), so a kill between the two leaves no `target`: a
    reader sees the old directory, none, or the new one, never half of one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        fill(tmp)
        for file in (p for p in tmp.rglob("*") if p.is_file() and not p.is_symlink()):
            with open(file, "rb") as f:
                os.fsync(f.fileno())
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def unused_name(path: Path) -> Path:
    """`path`, or `path-2`, `path-3`... the first name nothing has (a set-aside never replaces another)."""
    n, found = 1, path
    while found.exists() or found.is_symlink():
        n += 1
        found = path.with_name(f"{path.name}-{n}")
    return found


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of a file's bytes, read a block at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
