"""Tools: typed Python functions whose JSON schema comes from their signature and docstring.

`Tool.run(arguments)` is the only way the lab executes a tool: it validates the arguments against the schema
(jsonschema), runs the function with a wall-clock timeout, turns exceptions and timeouts into `{"error": ...}`
responses, and caps the output size. It never raises on model-supplied arguments. `Tool.call` says as well
whether the call timed out (scoring pays no schema credit for such a call).

Where a timeout can really stop a call: a Python thread cannot be killed, and a C call that holds the GIL (a big
integer power, a backtracking regex) keeps even the waiting thread from noticing its timeout. So a tool runs in a
forked child process, killed with its process group when the call ends or its time is up, unless it is known to
be bounded: grpolab's own tools are (the calculator is linear in its input and checks every bound before
computing; financial_search is BM25 over a fixed corpus with at most 50 query tokens), and run on a thread of
their own, as does any tool given `isolate=False`; at its timeout an exception is raised into that thread, which
stops pure-Python work at once (C code only when it returns). The price of the child: it starts from a fork
(about a millisecond; the trainer's threads do not come along, so a tool that needs a lock another thread held may
hang, and is then killed), its result travels as JSON, changes it makes to Python state stay in the child (a
stateful tool passes `isolate=False`), and it may not leave its process group: a seccomp filter refuses setsid and
setpgid to it and to everything it starts (`seccomp.group_program`), so that nothing outlives the call (and, with
the filter, no_new_privs: no set-uid program gains privileges there).
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from transformers.utils import get_json_schema

from grpolab import seccomp
from grpolab.calculator import CalculatorError, calculate
from grpolab.files.limits import MAX_NESTING

MAX_OUTPUT_CHARS = 2000
DEFAULT_TIMEOUT_S = 5.0
MAX_CHILD_BYTES = 1 << 20
"""A response from a child process larger than this is an error (it would be truncated to 2000 characters anyway)."""
_LENGTH_BYTES = 8
"""The child's answer is preceded by its length."""


@dataclass(frozen=True)
class ToolResult:
    """What one call gave: the response the model sees, and whether the call ran past its timeout."""

    response: dict[str, Any]
    timed_out: bool = False


@dataclass
class Tool:
    """A callable tool with its JSON schema (OpenAI/HF `{"type": "function", "function": {...}}` shape)."""

    fn: Callable[..., Any]
    timeout_s: float = DEFAULT_TIMEOUT_S
    isolate: bool | None = None
    """Run each call in a child process killed on timeout. None: yes, unless the tool is one of grpolab's own."""
    schema: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        if self.isolate is None:
            self.isolate = not str(getattr(self.fn, "__module__", "") or "").startswith("grpolab.")
        self.schema = get_json_schema(self.fn)
        self.schema["function"].pop("return", None)
        self._validator = jsonschema.Draft202012Validator(self.parameters)

    @property
    def name(self) -> str:
        return self.schema["function"]["name"]

    @property
    def parameters(self) -> dict[str, Any]:
        return self.schema["function"]["parameters"]

    def validation_error(self, arguments: Any) -> str | None:
        """Why these arguments do not fit the schema, or None when they do."""
        return argument_problem(self._validator, arguments)

    def run(self, arguments: Any) -> dict[str, Any]:
        """Validate and execute; always returns a JSON-serialisable dict, `{"error": ...}` on any failure."""
        return self.call(arguments).response

    def call(self, arguments: Any) -> ToolResult:
        """As `run`, and whether the call timed out (the schema reward pays nothing for such a call)."""
        problem = self.validation_error(arguments)
        if problem:
            return ToolResult({"error": f"invalid arguments for {self.name}: {problem}"})
        run = _run_in_child if self.isolate else _run_in_thread
        response = run(self.fn, arguments, self.timeout_s, self.name)
        if response is None:
            return ToolResult({"error": f"{self.name} timed out after {self.timeout_s:g}s"}, timed_out=True)
        return ToolResult(cap_output(response))


def argument_problem(validator: jsonschema.protocols.Validator, arguments: Any) -> str | None:
    """Why `arguments` do not fit the schema `validator` checks, or None when they do (any tool's arguments)."""
    if not isinstance(arguments, dict):
        return "arguments must be a JSON object"
    depth = value_depth(arguments)
    if depth > MAX_NESTING:  # jsonschema recurses over the value and builds messages from all of it
        return f"arguments nest more than {MAX_NESTING} levels deep (the limit)"
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
    if not errors:
        return None
    err = errors[0]
    where = ".".join(str(p) for p in err.path) or "arguments"
    return f"{where}: {err.message[:200]}"


class ToolTimeout(BaseException):
    """Raised inside an in-process call that ran past its timeout; a BaseException, so that a tool's own
    `except Exception` does not swallow it."""


_raise_in_thread = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi)
)
"""PyThreadState_SetAsyncExc with its own prototype. Never called with NULL: on 3.11 that leaves the interpreter's
'async exception pending' flag set with nothing to raise, and every thread takes the slow path from then on."""


class _ThreadCall:
    """One in-process call on its own thread, which `stop` ends at its next Python instruction.

    A thread cannot be killed, but an exception can be raised into it: pure-Python work stops at once, a C call
    (a regex, a big-integer operation) only once it returns. `done` under `lock` makes sure the exception is never
    raised once the call is over, and a Python call before the thread leaves its `try` (`_checkpoint`: CPython
    raises a pending exception on entering a function) makes sure one raised late is caught there."""

    def __init__(self, fn: Callable[..., Any], arguments: dict[str, Any]):
        self.fn, self.arguments = fn, arguments
        self.response: dict[str, Any] | None = None
        self.lock = threading.Lock()
        self.done = self.stopped = False
        self.thread = threading.Thread(target=self._run, name=f"grpolab-tool-{getattr(fn, '__name__', 'call')}")
        self.thread.daemon = True

    def _run(self) -> None:
        try:
            try:
                value = self.fn(**self.arguments)
                self.response = value if isinstance(value, dict) else {"result": value}
            except ToolTimeout:
                pass
            except BaseException as exc:  # a tool's own failure (SystemExit too) is a response, not a crash
                self.response = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            finally:
                with self.lock:
                    self.done = True
                if self.stopped:
                    _checkpoint()
        except ToolTimeout:  # raised after the call ended
            pass

    def stop(self) -> None:
        with self.lock:
            if not self.done and self.thread.ident is not None:
                self.stopped = _raise_in_thread(self.thread.ident, ToolTimeout) == 1


def _checkpoint() -> None:
    """Nothing: calling it lets CPython raise an exception pending for this thread."""


def _run_in_thread(fn: Callable[..., Any], arguments: dict[str, Any], timeout_s: float, name: str) -> dict | None:
    """Call `fn` on a thread of its own; None when it timed out (then it is stopped, see `_ThreadCall`)."""
    call = _ThreadCall(fn, arguments)
    call.thread.start()
    call.thread.join(timeout_s)
    if call.thread.is_alive():
        call.stop()
        return None
    return call.response


@functools.cache
def _group_filter() -> seccomp.Filter | None:
    """The seccomp filter that keeps a call's processes in its group (no setsid, no setpgid), made once here so
    that the forked child only loads it; None where this architecture has none."""
    return seccomp.Filter(seccomp.group_program()) if seccomp.supported() else None


def _run_in_child(fn: Callable[..., Any], arguments: dict[str, Any], timeout_s: float, name: str) -> dict | None:
    """Call `fn` in a forked child; its JSON answer comes back on a pipe; when it is done (or past `timeout_s`) the
    child's process group dies, and with it everything the call started: none of it may leave the group. None
    when it timed out."""
    leash = _group_filter()
    try:
        read_end, write_end = os.pipe()
        pid = os.fork()
    except OSError as exc:
        return {"error": f"{name} could not start: {exc.strerror}"}
    if pid == 0:  # the child: never returns, never raises
        try:
            os.close(read_end)
            os.setpgid(0, 0)
            if leash is not None:
                try:
                    leash.install()
                except OSError:  # a kernel without seccomp: the call runs, only what stays in its group dies
                    pass
            answer = _child_answer(fn, arguments)
            _write_all(write_end, len(answer).to_bytes(_LENGTH_BYTES, "big") + answer)
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        os.setpgid(pid, pid)  # as the child does: whichever runs first, the group exists before any kill
    except OSError:
        pass
    deadline = time.monotonic() + timeout_s
    data, timed_out = b"", False
    try:
        # until the answer is complete, by its length: a process the call started may hold the pipe open
        while not _complete(data):
            left = deadline - time.monotonic()
            if left <= 0 or not _readable(read_end, left):
                timed_out = True
                break
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(read_end)
        for kill in (os.killpg, os.kill):  # the child's group first: whatever it started dies with it
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    if timed_out:
        return None
    if not _complete(data):
        return {"error": f"{name} ended without an answer"}
    data = data[_LENGTH_BYTES : _LENGTH_BYTES + int.from_bytes(data[:_LENGTH_BYTES], "big")]
    if len(data) > MAX_CHILD_BYTES:
        return {
            "error": f"output truncated to {MAX_OUTPUT_CHARS} characters",
            "preview": data[:MAX_OUTPUT_CHARS].decode("utf-8", "replace"),
        }
    try:
        answer = json.loads(data)
    except ValueError:
        return {"error": f"{name} ended without an answer"}
    return answer if isinstance(answer, dict) else {"error": f"{name} ended without an answer"}


def _complete(data: bytes) -> bool:
    """Whether `data` holds the child's whole answer, or enough of a too large one to refuse it."""
    if len(data) < _LENGTH_BYTES:
        return False
    return len(data) - _LENGTH_BYTES >= min(int.from_bytes(data[:_LENGTH_BYTES], "big"), MAX_CHILD_BYTES + 1)


def _readable(fd: int, timeout_s: float) -> bool:
    poll = select.poll()  # not select.select: a trainer's descriptors may be numbered past 1024
    poll.register(fd, select.POLLIN)
    return bool(poll.poll(max(timeout_s, 0.0) * 1000))


def _child_answer(fn: Callable[..., Any], arguments: dict[str, Any]) -> bytes:
    try:
        value = fn(**arguments)
    except Exception as exc:  # as in-process: the tool's own failure is a response the model sees
        return json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:200]}"}).encode()
    try:
        return json.dumps(value if isinstance(value, dict) else {"result": value}).encode()
    except (TypeError, ValueError):
        return json.dumps({"error": "tool returned a value that is not JSON-serialisable"}).encode()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def value_depth(value: Any, stop: int = MAX_NESTING + 1) -> int:
    """How deeply lists and dicts nest in `value`, counted without recursion (and no further than `stop`)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            deepest = max(deepest, depth)
            if depth >= stop:
                return deepest
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def cap_output(response: dict[str, Any], limit: int = MAX_OUTPUT_CHARS) -> dict[str, Any]:
    """Keep a response under `limit` characters of JSON; larger ones are replaced by a truncated preview."""
    try:
        text = json.dumps(response)
    except (TypeError, ValueError):
        return {"error": "tool returned a value that is not JSON-serialisable"}
    if len(text) <= limit:
        return response
    return {"error": f"output truncated to {limit} characters", "preview": text[:limit]}


def calculator(expression: str) -> dict[str, Any]:
    """Evaluate an arithmetic expression exactly, e.g. percent change as (new - old) / old * 100.

    Args:
        expression: Arithmetic using numbers, + - * / ** and parentheses, e.g. "(137 - 120) / 120 * 100".
    """
    try:
        return {"result": round(calculate(expression), 10)}
    except CalculatorError as exc:
        return {"error": str(exc)}


class ToolBox:
    """The tools of one environment, by name."""

    def __init__(self, tools: list[Tool]):
        self.tools = {t.name: t for t in tools}
        self.owner: object = None
        """What must live as long as these tools (a stateful environment's episode, `Environment.toolbox_for`)."""

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema for t in self.tools.values()]

    def __contains__(self, name: object) -> bool:
        return name in self.tools

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def execute(self, name: str | None, arguments: Any) -> dict[str, Any]:
        """Run a named tool; an unknown name is an error response, not an exception."""
        return self.call(name, arguments).response

    def call(self, name: str | None, arguments: Any) -> ToolResult:
        """As `execute`, and whether the call timed out (known of `Tool`s; any object with `run` may be a tool)."""
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            return ToolResult({"error": f"unknown tool {str(name)[:60]!r}; available: {', '.join(self.tools)}"})
        return tool.call(arguments) if isinstance(tool, Tool) else ToolResult(tool.run(arguments))
