"""Running user code (a verifier, a reward function, a tool) under a wall-clock time limit in this process.

A thread cannot be killed, but an exception can be raised into it (`PyThreadState_SetAsyncExc`): pure-Python work
stops at its next instruction. A C call stops only once it returns, and one that holds the GIL (a backtracking
`re` match, a huge integer power) keeps even the waiting caller from seeing its deadline until then: regexes on
model text are matched with the `regex` engine's own timeout instead (`grpolab.envs.data.verifiers`), and tools
that may block run in a child process (`grpolab.tools`).
"""

from __future__ import annotations

import contextvars
import ctypes
import os
import queue
import threading
from collections.abc import Callable, Hashable
from typing import Any

MAX_STUCK_CALLS = 4
"""Timed-out calls of one piece of code that may still run in this process (a C call cannot be stopped: each one
left alive is a thread); past it, that code is not called again until one ends (`StillRunning`)."""


class TimeLimitExceeded(BaseException):
    """Raised inside a call that ran past its time limit; a BaseException, so that the call's own
    `except Exception` does not swallow it."""


class TimedOut(Exception):
    """What the caller gets when a call ran past its time limit (the call is stopped, see `ThreadCall`)."""

    def __init__(self, what: str, timeout_s: float):
        super().__init__(f"{what} timed out after {timeout_s:g} s")
        self.what, self.timeout_s = what, timeout_s


class StillRunning(Exception):
    """What the caller gets instead of a new thread while `MAX_STUCK_CALLS` earlier calls of the same code that
    timed out still run."""

    def __init__(self, what: str, stuck: int):
        super().__init__(
            f"{stuck} earlier calls of {what} timed out and are still running in this process; {what} is not called"
            " again until they end"
        )


_raise_in_thread = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi)
)
"""PyThreadState_SetAsyncExc with its own prototype. Never called with NULL: on 3.11 that leaves the interpreter's
'async exception pending' flag set with nothing to raise, and every thread takes the slow path from then on."""


class ThreadCall:
    """One call on a pool thread (`_Worker`), which `stop` ends at its next Python instruction.

    `done` under `lock` makes sure the exception is never raised once the call is over, and a Python call before
    the thread leaves its `try` (`_checkpoint`: CPython raises a pending exception on entering a function) makes
    sure one raised late is caught there. `value` and `error` hold what the call returned or raised; `finished` is
    set once the thread is through with it (a stopped call's thread then ends: it is never given another)."""

    def __init__(self, fn: Callable[[], Any], name: str = "call"):
        self.fn = fn
        self.name = f"grpolab-{name.replace(' ', '-')}"
        self.value: Any = None
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.started = self.done = self.stopped = self.cancelled = False
        self.finished = threading.Event()
        self.thread: threading.Thread | None = None
        """The pool thread that runs it, once it is handed to one."""

    def run_here(self) -> None:
        """Run the call on this thread (the pool thread's side), in a context of its own, as a new thread's (a
        `decimal` precision or another contextvar one call sets does not reach the next; `threading.local` values
        and torch's grad mode, which live on the thread, do). A call stopped before it started never runs."""
        try:
            with self.lock:
                if self.cancelled:
                    return
                self.started = True  # from here on `stop` raises into this thread, inside this `try`
            try:
                self.value = contextvars.Context().run(self.fn)
            except TimeLimitExceeded:
                pass
            except BaseException as exc:  # the call's own failure (SystemExit too) goes back to the caller
                self.error = exc
            finally:
                with self.lock:
                    self.done = True
                if self.stopped:
                    _checkpoint()
        except TimeLimitExceeded:  # raised after the call ended
            pass

    def stop(self) -> None:
        with self.lock:
            if self.done:
                return
            if not self.started or self.thread is None or self.thread.ident is None:
                self.cancelled = True  # handed over but not begun (the pool thread not yet in `run_here`'s try)
                return
            self.stopped = _raise_in_thread(self.thread.ident, TimeLimitExceeded) != 0

    def running(self) -> bool:
        """Whether a thread is still in the call (a timed-out call blocked in C, until it returns)."""
        return not self.finished.is_set() and self.thread is not None and self.thread.is_alive()

    def wait(self, timeout_s: float) -> bool:
        """Hand the call to a pool thread and wait for it; False (and the call stopped) when it ran past
        `timeout_s`."""
        worker = _POOL.take()
        self.thread = worker.thread
        worker.calls.put(self)
        if self.finished.wait(timeout_s):
            return True
        self.stop()
        return False


class _Worker:
    """A pool thread: runs the calls handed to it one at a time and goes back to the pool after each, unless an
    exception was raised into it (its call timed out) or the pool has enough idle threads; then it ends. Starting a
    thread per call cost twice the hand-over (98 against 46 us here), paid by every reward component and every
    in-process tool call."""

    def __init__(self) -> None:
        self.calls: queue.SimpleQueue[ThreadCall] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="grpolab-idle", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        me = threading.current_thread()
        while True:
            call = self.calls.get()
            me.name = call.name
            call.run_here()
            me.name = "grpolab-idle"
            with call.lock:  # after `stop` is through: an exception it raised here was taken inside `run_here`
                raised = call.stopped
            call.finished.set()  # before this thread can be handed another call
            if raised or not _POOL.give_back(self):
                return


MAX_IDLE_THREADS = 8
"""Idle pool threads kept for the next calls (nested calls, a component calling a tool, each take one)."""


class _Pool:
    def __init__(self) -> None:
        self._forget()
        os.register_at_fork(after_in_child=self._forget)  # a forked child has none of this process's threads

    def _forget(self) -> None:
        self.idle: list[_Worker] = []
        self.lock = threading.Lock()

    def take(self) -> _Worker:
        with self.lock:
            if self.idle:
                return self.idle.pop()
        return _Worker()

    def give_back(self, worker: _Worker) -> bool:
        with self.lock:
            if len(self.idle) < MAX_IDLE_THREADS:
                self.idle.append(worker)
                return True
        return False


_POOL = _Pool()


def _checkpoint() -> None:
    """Nothing: calling it lets CPython raise an exception pending for this thread."""


_stuck: dict[Hashable, list[ThreadCall]] = {}
"""Calls that timed out, by the code they run (a tool's module and name, a reward component): a stateful episode's
tools are new functions each episode, but the same code, and a hang in one hangs them all."""
_stuck_lock = threading.Lock()


def _forget_stuck() -> None:
    """In a forked child: none of the parent's threads run there, and the lock may have been held at the fork."""
    global _stuck_lock
    _stuck.clear()
    _stuck_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_stuck)


def _still_stuck(key: Hashable) -> int:
    """How many timed-out calls under `key` still run (those that ended are forgotten here)."""
    with _stuck_lock:
        alive = [call for call in _stuck.get(key, []) if call.running()]
        if alive:
            _stuck[key] = alive
        else:
            _stuck.pop(key, None)
        return len(alive)


def run_bounded(
    fn: Callable[[], Any], timeout_s: float, what: str, key: Hashable, label: str = ""
) -> ThreadCall | None:
    """`fn()` on a pool thread, waited for up to `timeout_s`: the finished call (its `value` or `error`), or
    None when it ran past its time (it is stopped, and counted under `key` while it still runs). `StillRunning`
    while `MAX_STUCK_CALLS` calls under `key` are still running, with no thread taken. The thread is called
    `grpolab-LABEL` (default: `what`) while it runs the call."""
    stuck = _still_stuck(key)
    if stuck >= MAX_STUCK_CALLS:
        raise StillRunning(what, stuck)
    call = ThreadCall(fn, label or what)
    if call.wait(timeout_s):
        return call
    if not call.cancelled:  # one that never began runs nowhere
        with _stuck_lock:
            _stuck.setdefault(key, []).append(call)
    return None


def call_with_time_limit(fn: Callable[[], Any], timeout_s: float, what: str, key: Hashable = None) -> Any:
    """`fn()` on a pool thread (`run_bounded`, counted under `key`, default `what`): its value, or the
    exception it raised (re-raised here; a SystemExit becomes a RuntimeError, so user code never ends the process
    this way), or `TimedOut` naming `what` when it ran past `timeout_s` (it is then stopped at its next Python
    instruction), or `StillRunning`."""
    call = run_bounded(fn, timeout_s, what, what if key is None else key)
    if call is None:
        raise TimedOut(what, timeout_s)
    if isinstance(call.error, Exception):
        raise call.error
    if call.error is not None:
        raise RuntimeError(f"{type(call.error).__name__}({call.error})") from None
    return call.value
