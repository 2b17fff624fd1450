"""Writing files so that a process killed at any moment leaves whole files, and reading JSON Lines defensively.

The run directory (`grpolab.rundir`), the model cache (`grpolab.models`), exports and reports all write through
here: a temp file (or directory) in the target's folder, fsync, then one `os.replace`.
"""

from __future__ import annotations

import json
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
    """Build a directory with `fill(tmp_dir)`, then move it to `target` (replacing an old one)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        fill(tmp)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def json_line(row: dict[str, Any]) -> str:
    return json.dumps(row, default=_json_default) + "\n"


def _json_default(x: Any) -> Any:
    if hasattr(x, "item"):  # numpy / torch scalars
        return x.item()
    return str(x)


def append_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Append rows (one fsync per call). A line cut short by a kill is completed with a newline first, so it
    costs only itself: readers skip it and every later row stays on a line of its own."""
    if not rows:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write("".join(json_line(r) for r in rows).encode())
        f.flush()
        os.fsync(f.fileno())


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Replace a JSON Lines file atomically."""
    atomic_write_text(path, "".join(json_line(r) for r in rows))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON Lines file; a missing file is empty, and unparseable lines are skipped (not fatal)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def read_json(path: Path, problems: list[str] | None = None) -> Any:
    """A JSON file's data, or None when it is missing or unreadable (the reason goes to `problems`)."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError) as exc:
        if problems is not None:
            problems.append(f"{path.name} is not valid JSON ({exc})")
        return None
