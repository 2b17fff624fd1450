"""Plain data between the test runner and the answer process: a strict, pickle-free, size-limited encoding.

Values are None, bool, int, float (nan and inf included), str, bytes, list, tuple, dict, set and frozenset, nested.
They travel as JSON: null/bool/int/float/str/array for themselves, and one-key objects for the rest ({"t": [...]} a
tuple, {"d": [[key, value], ...]} a dict with any hashable keys, {"s": ...} a set, {"f": ...} a frozenset,
{"b": "hex"} bytes). The encoder accepts exact built-in types only, so an object with a custom `__eq__` (or an
int subclass) cannot be sent; the decoder is the gate that matters (the answer process may replace its encoder
and write anything): it accepts only that grammar, within the size, depth and hashed-item limits (and no more than
a few items of one set sharing a hash), and builds real built-in objects. Messages are length-prefixed JSON
objects on a stream (a socket pair, read and written as plain descriptors: no `socket` import, which costs the
sandbox's start-up more than the rest of this module).

Standard library only: both ends import it (`runner.py`, `harness.py`), the tests and the parent do too.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time

MAX_MESSAGE = 1 << 20
"""Bytes in one message from the answer process (a value it returns)."""
MAX_DEPTH = 64
MAX_HASHED = 4096
"""Items placed in sets and dict keys per message: colliding hashes make building them quadratic."""
MAX_SAME_HASH = 8
"""Items of one set (or keys of one dict) that may share a hash: n of them cost n² comparisons to insert, and
4,096 colliding tuples cost the runner 4.4 s of CPU. Plain data of distinct values shares a hash by accident
only (-1 and -2 do); checked before any set or dict is built, so a reply costs the runner linear time."""
HEADER = struct.Struct(">I")


class WireError(ValueError):
    """Not plain data, or not the protocol."""


class WireTimeout(WireError):
    pass


class WireClosed(WireError):
    pass


def encode(value: object, depth: int = 0) -> object:
    if depth > MAX_DEPTH:
        raise WireError(f"nested deeper than {MAX_DEPTH}")
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind is tuple:
        return {"t": [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is set:
        return {"s": [encode(v, depth + 1) for v in value]}
    if kind is frozenset:
        return {"f": [encode(v, depth + 1) for v in value]}
    if kind is bytes:
        return {"b": value.hex()}
    raise WireError(f"{kind.__name__} is not plain data")


class _Budget:
    def __init__(self) -> None:
        self.hashed = 0

    def spend(self, n: int) -> None:
        self.hashed += n
        if self.hashed > MAX_HASHED:
            raise WireError(f"more than {MAX_HASHED} set items and dict keys")


def decode(tree: object, depth: int = 0, budget: _Budget | None = None) -> object:
    """The only way data from the answer process becomes objects: built-in types, or WireError."""
    budget = budget or _Budget()
    if depth > MAX_DEPTH:
        raise WireError(f"nested deeper than {MAX_DEPTH}")
    kind = type(tree)
    if tree is None or kind in (bool, int, float, str):
        return tree
    if kind is list:
        return [decode(v, depth + 1, budget) for v in tree]
    if kind is not dict or len(tree) != 1:
        raise WireError("not plain data")
    ((tag, body),) = tree.items()
    if tag == "b" and type(body) is str:
        try:
            return bytes.fromhex(body)
        except ValueError:
            raise WireError("bad bytes") from None
    if type(body) is not list:
        raise WireError("not plain data")
    if tag == "t":
        return tuple(decode(v, depth + 1, budget) for v in body)
    try:
        if tag in ("s", "f"):
            budget.spend(len(body))
            items = _few_collisions([decode(v, depth + 1, budget) for v in body])
            return set(items) if tag == "s" else frozenset(items)
        if tag == "d":
            budget.spend(len(body))
            if any(type(pair) is not list or len(pair) != 2 for pair in body):
                raise WireError("bad dict item")
            keys = _few_collisions([decode(k, depth + 1, budget) for k, _ in body])
            return dict(zip(keys, [decode(v, depth + 1, budget) for _, v in body]))
    except TypeError:  # an unhashable key or set item
        raise WireError("unhashable set item or dict key") from None
    raise WireError(f"unknown tag {str(tag)[:20]!r}")


def _few_collisions(items: list) -> list:
    """`items`, once no more than MAX_SAME_HASH of them share a hash (TypeError: one is unhashable)."""
    seen: dict[int, int] = {}  # keyed by the hashes: ints, which collide at most a few at a time
    for item in items:
        key = hash(item)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > MAX_SAME_HASH:
            raise WireError(f"more than {MAX_SAME_HASH} set items or dict keys share a hash")
    return items


def dumps(message: dict) -> bytes:
    try:
        body = json.dumps(message, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:  # ValueError: an int over the 4300-digit conversion limit
        raise WireError(str(exc)[:200]) from None
    return HEADER.pack(len(body)) + body


def _wait(fd: int, deadline: float | None, write: bool = False) -> None:
    if deadline is None:
        return
    poll = select.poll()
    poll.register(fd, select.POLLOUT if write else select.POLLIN)
    if not poll.poll(max(deadline - time.monotonic(), 0.0) * 1000):
        raise WireTimeout("timed out")


def send(fd: int, message: dict, deadline: float | None = None) -> None:
    """Write one message on a blocking descriptor, within `deadline` (time.monotonic) when given."""
    data = memoryview(dumps(message))
    while data:
        _wait(fd, deadline, write=True)
        try:
            data = data[os.write(fd, data[: 1 << 16]) :]
        except OSError as exc:
            raise WireClosed(f"the other side is gone ({exc.strerror})") from None


def _read(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        _wait(fd, deadline)
        try:
            chunk = os.read(fd, min(n - got, 1 << 16))
        except OSError as exc:
            raise WireClosed(f"the other side is gone ({exc.strerror})") from None
        if not chunk:
            raise WireClosed("the other side closed the channel")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(fd: int, deadline: float | None = None, limit: int = MAX_MESSAGE) -> dict:
    """One message (a JSON object) from a blocking descriptor, within `deadline` and `limit` bytes."""
    (size,) = HEADER.unpack(_read(fd, HEADER.size, deadline))
    if size > limit:
        raise WireError(f"message of {size} bytes (limit {limit})")
    try:
        message = json.loads(_read(fd, size, deadline))
    except (ValueError, RecursionError):  # RecursionError: arrays nested past the interpreter's limit
        raise WireError("malformed message") from None
    if type(message) is not dict:
        raise WireError("malformed message")
    return message
