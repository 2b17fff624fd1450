"""Writing files so that a process killed at any moment leaves whole files, reading JSON Lines defensively, and
reading what a user hands us within stated limits.

The run directory (`grpolab.rundir`), the model cache (`grpolab.models`), exports and reports all write through
here: a file is written to a temp file in the target's folder, fsynced, then put in place with one `os.replace`
(readers see the old file or the new one); a directory is built in a temp directory beside it, its files fsynced,
then renamed into place after the old one is removed (a kill in between leaves no directory, never half of one).

Every file or text a user names (configs, completions, data files, tool arguments) is read through
`read_user_file` / `check_nesting`: a regular file under a size limit, nesting refused before a parser could
recurse. The limits live here, in one place, and every refusal quotes the one it hit.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
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
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---- locks: flock, so the kernel releases them when the holder dies (kill -9 included); no stale lock files ----


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
    """Rows of a JSON Lines file (a run's metrics, episodes, evaluations); a missing file, or one that is not a
    regular file, is empty. A line that is not JSON or nests deeper than MAX_NESTING is skipped: it costs only
    itself. There is no size limit: rows grow with the run, and the file is read a line at a time."""
    if not path.is_file() or _special(os.path.realpath(path)):
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
    from grpolab.errors import UserError

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


# ---- what users hand us: limits, and reading within them ----------------------------------------------------------

KIB, MIB = 1024, 1024 * 1024
MAX_CONFIG_BYTES = 256 * KIB
"""A TOML config (the shipped ones are under 2 KiB; tomllib reads about 1 MB/s)."""
MAX_COMPLETION_BYTES = 1 * MIB
"""A transcript to score (a 160-token episode is under 1 KiB; scoring takes about 2 s per MiB)."""
MAX_DATA_BYTES = 32 * MIB
"""A data or task file (BFCL's files are under 400 KiB), a `check --save` report."""
MAX_TOOL_ARGS_BYTES = 64 * KIB
"""Tool arguments given as JSON on the command line."""
MAX_NESTING = 64
"""Brackets, braces or dotted-key parts nested deeper than this are refused before parsing (parsers recurse, and
tomllib's dotted keys take quadratic time)."""

_SPECIAL_ROOTS = ("/proc", "/sys", "/dev")


def size_text(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB and n % MIB == 0 else f"{n // KIB} KiB" if n >= KIB else f"{n} bytes"


def read_user_file(path: str | Path, what: str, limit: int, fix: str, errors: str = "strict") -> str:
    """The text of a file the user named: a regular file (not a directory, device, FIFO, socket or a /proc, /sys
    or /dev entry) of at most `limit` bytes. Anything else is a UserError naming `what` and the limit.
    `fix` says how to point at a good file (e.g. "check the path given to --config")."""
    from grpolab.errors import UserError

    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UserError(f"{what} not found: {path}", fix) from None
    except (OSError, ValueError) as exc:  # ENAMETOOLONG, ELOOP, a NUL byte in the name...
        raise UserError(f"cannot open {what} {path} ({_reason(exc)})", fix) from None
    real = os.path.realpath(path)
    if not stat.S_ISREG(info.st_mode) or _special(real):
        raise UserError(f"{what} {path} is not a regular file ({_kind(info.st_mode, real)})", fix)
    if info.st_size > limit:
        raise UserError(f"{what} {path} is {info.st_size} bytes, over the {size_text(limit)} limit", fix)
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise UserError(f"cannot read {what} {path} ({_reason(exc)})", fix) from None
    if len(data) > limit:  # it grew after the stat
        raise UserError(f"{what} {path} is over the {size_text(limit)} limit", fix)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start})", fix) from None


def read_user_stream(stream: Any, what: str, limit: int, fix: str) -> str:
    """At most `limit` characters from a stream (stdin); more is a UserError naming the limit."""
    from grpolab.errors import UserError

    text = stream.read(limit + 1)
    if len(text) > limit:
        raise UserError(f"{what} is over the {size_text(limit)} limit", fix)
    return text


def _special(path: str) -> bool:
    """Whether an absolute path is /proc, /sys or /dev or under one (files there may never end, or block)."""
    return any(path == r or path.startswith(r + "/") for r in _SPECIAL_ROOTS)


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _kind(mode: int, real: str) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return f"a special file under /{real.split('/')[1]}"


# ---- outputs users name (-o, --save, --html, --out): written through, never replaced; no folder made for them ------

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
    from grpolab.errors import UserError

    fix = f"pick another path for {flag}"
    try:
        info: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        info = None
    except (OSError, ValueError) as exc:  # ENOTDIR (a file on the way), ELOOP, ENAMETOOLONG, a NUL byte...
        raise UserError(f"cannot write {path} ({_reason(exc)})", fix) from None
    chain = _link_chain(path)
    special = any(map(_special, chain))
    if info is None:
        real = Path(os.path.realpath(path))  # a dangling link: where its target would be
        if special or _special(str(real)):
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
    what = "a block device" if stat.S_ISBLK(mode) else _kind(mode, chain[-1])
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
    from grpolab.errors import UserError

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


# Tokenisers for counting nesting without parsing: each token costs O(1), so a scan is linear in the text (regexes
# that skip strings or match dotted keys backtrack quadratically on crafted input). Strings and comments hide
# brackets and dots; an escape is one token.
_JSON_TOKENS = re.compile(r'\\[\s\S]|"|[\[\]{}]|[^\\"\[\]{}]+')
_TOML_TOKENS = re.compile(r'"""|\'\'\'|\\[\s\S]|[A-Za-z0-9_-]+|[ \t]+|[\s\S]')
_TOML_CLOSE = {'"': {'"', "\n"}, "'": {"'", "\n"}, '"""': {'"""'}, "'''": {"'''"}, "#": {"\n"}}


def _json_depth(text: str) -> int:
    depth = deepest = 0
    in_string = False
    for m in _JSON_TOKENS.finditer(text):
        tok = m.group()
        if tok == '"':
            in_string = not in_string
        elif in_string or tok[0] == "\\":
            continue
        elif tok in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif tok in "]}":
            depth = max(depth - 1, 0)
    return deepest


def _toml_depth(text: str) -> int:
    """Bracket depth, or the most parts of one dotted key (`a.b."c".d` has 4), whichever is larger."""
    depth = deepest = parts = 0
    inside: str | None = None  # the opener of the string or comment we are in
    after_dot = last_was_part = False
    for m in _TOML_TOKENS.finditer(text):
        tok = m.group()
        if inside is not None:
            if tok in _TOML_CLOSE[inside]:
                part, inside = inside != "#", None
                if part:  # a quoted key part, like a bare one
                    parts = parts + 1 if after_dot else 1
                    deepest, after_dot, last_was_part = max(deepest, parts), False, True
                else:
                    after_dot = last_was_part = False
            continue
        if tok in _TOML_CLOSE:
            inside = tok
        elif tok[0].isalnum() or tok[0] in "_-":
            parts = parts + 1 if after_dot else 1
            deepest, after_dot, last_was_part = max(deepest, parts), False, True
        elif tok == "." and last_was_part:
            after_dot, last_was_part = True, False
        elif tok[0] in " \t":
            continue
        else:
            after_dot = last_was_part = False
            if tok in "[{":
                depth += 1
                deepest = max(deepest, depth)
            elif tok in "]}":
                depth = max(depth - 1, 0)
    return deepest


def nesting_depth(text: str, kind: str = "json") -> int:
    """How deeply `text` nests (brackets and braces; in TOML also dotted-key parts), counted without parsing it:
    linear time, no recursion. Unbalanced text is counted as far as it goes (the parser reports the syntax)."""
    return _toml_depth(text) if kind == "toml" else _json_depth(text)


def too_deep(text: str) -> bool:
    """Whether JSON `text` nests deeper than MAX_NESTING. Text with no more openers than that cannot: a C-speed
    count spares most lines the scan."""
    return text.count("[") + text.count("{") > MAX_NESTING and _json_depth(text) > MAX_NESTING


def check_nesting(text: str, what: str, fix: str, kind: str = "json") -> None:
    """A UserError when `text` nests deeper than MAX_NESTING (before any parser recurses into it)."""
    from grpolab.errors import UserError

    if kind == "json" and not too_deep(text):
        return
    depth = nesting_depth(text, kind)
    if depth > MAX_NESTING:
        raise UserError(f"{what} nests {depth} levels deep, over the limit of {MAX_NESTING}", fix)


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
    from grpolab.errors import UserError

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
