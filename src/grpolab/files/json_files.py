"""JSON Lines and JSON files of a run (metrics, episodes, evaluations, config, summary, manifests): rows appended
or replaced whole, and files read back defensively, a bad line or file costing only itself."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from grpolab.errors import UserError
from grpolab.files.atomic import atomic_write_text
from grpolab.files.kinds import is_special
from grpolab.files.limits import MAX_DATA_BYTES
from grpolab.files.nesting import check_nesting, too_deep
from grpolab.files.user_input import read_user_file


def json_line(row: dict[str, Any]) -> str:
    """One JSON Lines row, newline included (numpy and torch scalars as numbers, anything else as its str)."""
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
    """Rows of a JSON Lines file (a run's metrics, episodes, evaluations); a missing file, or one that is not a
    regular file, is empty. A line that is not JSON or nests deeper than MAX_NESTING is skipped: it costs only
    itself. There is no size limit: rows grow with the run, and the file is read a line at a time."""
    if not path.is_file() or is_special(os.path.realpath(path)):
        return []
    rows = []
    with open(path, errors="replace") as f:
        for line in f:
            if too_deep(line):
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def read_json(path: Path, problems: list[str] | None = None) -> Any:
    """A JSON file's data (a run's config, summary, preflight report, manifests), or None when it is missing or
    cannot be read within the limits: a regular file of at most MAX_DATA_BYTES, nested at most MAX_NESTING deep
    (the reason goes to `problems`)."""
    if not path.is_file():
        return None
    try:
        text = read_user_file(path, path.name, MAX_DATA_BYTES, "", errors="replace")
        check_nesting(text, path.name, "")
        return json.loads(text)
    except UserError as exc:
        reason = exc.problem
    except (ValueError, RecursionError) as exc:
        reason = f"{path.name} is not valid JSON ({exc})"
    if problems is not None:
        problems.append(reason)
    return None
