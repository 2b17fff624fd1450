"""Reading what a user hands us (a config, a completion, a data file, stdin) within `limits`: a regular file under a
size limit, nesting refused before a parser could recurse, JSON numbers finite. Anything else is a UserError that
names the file and the limit it hit."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from grpolab.errors import UserError
from grpolab.files.kinds import is_special, kind_text, os_reason
from grpolab.files.limits import size_text
from grpolab.files.nesting import check_nesting


def read_user_file(path: str | Path, what: str, limit: int, fix: str, errors: str = "strict") -> str:
    """The text of a file the user named: a regular file (not a directory, device, FIFO, socket or a /proc, /sys
    or /dev entry) of at most `limit` bytes. Anything else is a UserError naming `what` and the limit.
    `fix` says how to point at a good file (e.g. "check the path given to --config")."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UserError(f"{what} not found: {path}", fix) from None
    except (OSError, ValueError) as exc:  # ENAMETOOLONG, ELOOP, a NUL byte in the name...
        raise UserError(f"cannot open {what} {path} ({os_reason(exc)})", fix) from None
    real = os.path.realpath(path)
    if not stat.S_ISREG(info.st_mode) or is_special(real):
        raise UserError(f"{what} {path} is not a regular file ({kind_text(info.st_mode, real)})", fix)
    if info.st_size > limit:
        raise UserError(f"{what} {path} is {info.st_size} bytes, over the {size_text(limit)} limit", fix)
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise UserError(f"cannot read {what} {path} ({os_reason(exc)})", fix) from None
    if len(data) > limit:  # it grew after the stat
        raise UserError(f"{what} {path} is over the {size_text(limit)} limit", fix)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start})", fix) from None


def read_user_stream(stream: Any, what: str, limit: int, fix: str) -> str:
    """At most `limit` characters from a stream (stdin); more is a UserError naming the limit."""
    text = stream.read(limit + 1)
    if len(text) > limit:
        raise UserError(f"{what} is over the {size_text(limit)} limit", fix)
    return text


class NotFinite(ValueError):
    """A number in JSON text that is not finite (NaN, Infinity, 1e400, an integer no float can hold)."""


def _refuse_constant(token: str) -> float:
    raise NotFinite(f"{token} is not a finite number")


def _finite_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise NotFinite(f"{token} is not a finite number")
    return value


def _finite_int(token: str) -> int:
    value = int(token)
    try:
        float(value)
    except OverflowError:
        raise NotFinite(f"an integer of {len(token.lstrip('-'))} digits is not a finite number") from None
    return value


def loads_finite(text: str) -> Any:
    """JSON text whose numbers are all finite: NaN, Infinity, 1e400 and integers beyond a float's range raise
    NotFinite (json.loads would give NaN or inf, which pass every comparison and break every sum)."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_finite_int)


def read_user_jsonl(path: str | Path, what: str, limit: int, fix: str) -> list[Any]:
    """The values of a JSON Lines file the user named, within every limit: `read_user_file`'s (a regular file of
    at most `limit` bytes), each line nested at most MAX_NESTING deep (checked before parsing) and holding finite
    numbers only. A line beyond a limit, or not JSON, is a UserError naming the file and the line."""
    return [value for _, value in read_user_jsonl_lines(path, what, limit, fix)]


def read_user_jsonl_lines(path: str | Path, what: str, limit: int, fix: str) -> list[tuple[int, Any]]:
    """As `read_user_jsonl`, each value with its line number (from 1; blank lines hold none)."""
    values = []
    for number, line in enumerate(read_user_file(path, what, limit, fix).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{what} {path} line {number}"
        check_nesting(line, where, fix)
        try:
            values.append((number, loads_finite(line)))
        except NotFinite as exc:
            raise UserError(f"{where}: {exc}", fix) from None
        except (ValueError, RecursionError) as exc:
            raise UserError(f"{where} is not valid JSON ({exc})", fix) from None
    return values
