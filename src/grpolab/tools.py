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

import functools
import json
import os
import queue
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from grpolab import seccomp
from grpolab.calculator import CalculatorError, calculate
from grpolab.files.limits import MAX_NESTING
from grpolab.timelimit import StillRunning, run_bounded

MAX_OUTPUT_CHARS = 2000
DEFAULT_TIMEOUT_S = 5.0
MAX_CHILD_BYTES = 1 << 20
"""A response from a child process larger than this is an error (it would be truncated to 2000 characters anyway)."""
_LENGTH_BYTES = 8
"""The child's answer is preceded by its length."""
TOO_DEEP = f"tool output nests more than {MAX_NESTING} levels deep (the limit)"
"""The response to an output nested deeper than arguments may be: JSON's encoder and decoder recurse over it."""


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
        from transformers.utils import get_json_schema  # heavy: only once a tool is built, not when envs import

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


def failure_text(exc: BaseException) -> str:
    """A tool's exception as the model sees it (`ValueError: bad id`), even where its text cannot be made: an
    argument nested thousands deep, or a `__str__` that raises."""
    try:
        text = str(exc)[:200]
    except Exception:  # RecursionError from a deep argument's repr, or whatever a __str__ raises
        text = "(its message cannot be shown)"
    return f"{type(exc).__name__}: {text}"


def _run_in_thread(fn: Callable[..., Any], arguments: dict[str, Any], timeout_s: float, name: str) -> dict | None:
    """Call `fn` on a pool thread (`timelimit.run_bounded`); None when it timed out (then it is stopped at
    its next Python instruction). While `timelimit.MAX_STUCK_CALLS` earlier calls of this tool that timed out
    still run (each one blocked in C is a thread that cannot be stopped), it is refused without a thread."""
    try:
        key = (str(getattr(fn, "__module__", "")), name)
        call = run_bounded(lambda: fn(**arguments), timeout_s, name, key, label=f"tool-{name}")
    except StillRunning as exc:
        return {"error": str(exc)}
    if call is None:
        return None
    if call.error is not None:  # a tool's own failure (SystemExit too) is a response, not a crash
        return {"error": failure_text(call.error)}
    return call.value if isinstance(call.value, dict) else {"result": call.value}


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
        _REAPER.reap(pid)
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
    except RecursionError:  # the child's encoder went deeper than this process's decoder may
        return {"error": TOO_DEEP}
    except ValueError:
        return {"error": f"{name} ended without an answer"}
    return answer if isinstance(answer, dict) else {"error": f"{name} ended without an answer"}


class _Reaper:
    """Waits for killed tool children on a thread of its own. A child of a process that loaded torch takes longer to
    tear down than its call took to answer (5.7 ms of a 13 ms call here: the kernel frees its copy of a large
    address space), and nothing the caller does next depends on it: the SIGKILL has been sent to its whole group."""

    def __init__(self) -> None:
        self._pids: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        os.register_at_fork(after_in_child=self._forget)  # a forked child has no reaper thread, and no children

    def reap(self, pid: int) -> None:
        self._pids.put(pid)
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="grpolab-tool-reaper", daemon=True)
                thread.start()  # may raise (no thread to be had): then the next call tries again
                self._thread = thread

    def _run(self) -> None:
        while True:
            pid = self._pids.get()
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass

    def _forget(self) -> None:
        self._pids, self._lock, self._thread = queue.SimpleQueue(), threading.Lock(), None


_REAPER = _Reaper()


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
        return json.dumps({"error": failure_text(exc)}).encode()
    try:
        return json.dumps(value if isinstance(value, dict) else {"result": value}).encode()
    except RecursionError:
        return json.dumps({"error": TOO_DEEP}).encode()
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
    """Keep a response under `limit` characters of JSON; larger ones are replaced by a truncated preview (a
    string), and one nested deeper than `MAX_NESTING` by an error saying so."""
    try:
        text = json.dumps(response)
    except RecursionError:
        return {"error": TOO_DEEP}
    except (TypeError, ValueError):
        return {"error": "tool returned a value that is not JSON-serialisable"}
    if len(text) > limit:
        return {"error": f"output truncated to {limit} characters", "preview": text[:limit]}
    # counted only on what fits the limit (a short walk): what goes to the model as it is nests as arguments may
    return response if value_depth(response) <= MAX_NESTING else {"error": TOO_DEEP}


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
