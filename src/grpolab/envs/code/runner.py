"""The test runner: runs the task's trusted tests in its own process; the answer runs in another.

Forked by the sandbox's keeper (`harness.py`) before any namespace, limit or model code exists there, so it is
neither the answer's process nor inside its walls; it reads the tests from a descriptor the keeper never reads and
closes. It executes only trusted code: the task's
prompt header (HumanEval's helper functions, e.g. `poly`, `encode_cyclic`), the task's `setup`, then each test
statement, with `candidate` (and the entry point's name) bound to a proxy. Calling the proxy sends the arguments
as plain data (`wire.py`) over a pipe to the answer process and decodes the reply into built-in objects, so the
hidden tests and expected values never leave this process, an answer's object cannot take part in a comparison,
and the verdict is computed here only. Each call has a timeout, the run a deadline; a call that times out, a
process that dies or a reply that breaks the protocol fails that test and every later call.

The verdict goes to the parent on a pipe that only this process holds, one JSON line per finished test (a
runner killed at the deadline keeps the tests before). This process is made non-dumpable, so even where the
answer runs as the same user (no namespaces) it cannot ptrace it or open its descriptors through /proc.
"""

import builtins
import json
import os
import resource
import time
from types import ModuleType


class CandidateTimeout(BaseException):
    """A call ran past its time (a BaseException so that a test's `except Exception` cannot swallow it)."""


class CandidateGone(Exception):
    """The answer process died, closed the channel or broke the protocol."""


class CandidateError(Exception):
    """The answer raised an exception that is not a built-in one."""


def _exception(reply: object) -> BaseException:
    """The answer's exception as a built-in exception class (by name) or CandidateError; never its own class."""
    name, message = (reply if isinstance(reply, list) and len(reply) == 2 else ["Exception", ""])[:2]
    name, message = str(name)[:100], str(message)[:300]
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and cls not in (StopIteration, StopAsyncIteration):
        try:
            return cls(message)
        except Exception:  # e.g. UnicodeDecodeError wants five arguments
            pass
    return CandidateError(f"{name}: {message}")


class Candidate:
    """The answer's function as seen by the tests: arguments out, plain data back, within the deadlines."""

    def __init__(self, inbox: int, outbox: int, wire: ModuleType, deadline: float, call_s: float, name: str):
        self.inbox, self.outbox, self.wire, self.deadline, self.call_s = inbox, outbox, wire, deadline, call_s
        self.__name__ = self.__qualname__ = name
        self.broken = ""
        self.timed_out = False

    def __repr__(self) -> str:
        return f"<candidate {self.__name__}>"

    def __call__(self, *args: object, **kwargs: object) -> object:
        wire = self.wire
        if self.broken:
            raise CandidateGone(self.broken)
        try:
            call = {"call": [wire.encode(list(args)), wire.encode(kwargs)]}
        except wire.WireError as exc:
            raise TypeError(f"a test argument is not plain data: {exc}") from None
        until = min(self.deadline, time.monotonic() + self.call_s)
        try:
            wire.send(self.outbox, call, until)
            reply = wire.recv(self.inbox, until)
        except wire.WireTimeout:
            self.broken, self.timed_out = "a call timed out", True
            raise CandidateTimeout(f"{self.__name__} did not answer in time") from None
        except wire.WireError as exc:
            self.broken = f"the answer's process is gone ({exc})"
            raise CandidateGone(self.broken) from None
        if "value" in reply:
            try:
                return wire.decode(reply["value"])
            except wire.WireError as exc:
                raise TypeError(f"{self.__name__} returned something that is not plain data ({exc})") from None
        if "raise" in reply:
            raise _exception(reply["raise"])
        if "unsendable" in reply:
            raise TypeError(f"{self.__name__} returned {str(reply['unsendable'])[:200]}")
        self.broken = "the answer's process broke the protocol"
        raise CandidateGone(self.broken)


def _isolation(hello: object) -> dict:
    """The answer process's own report, sent before any model code ran; kept only in its expected shape."""
    if not isinstance(hello, dict):
        return {"layers": {}, "missing": {"report": "no isolation report"}}
    out = {}
    for key in ("layers", "missing"):
        part = hello.get(key)
        out[key] = {str(k)[:40]: str(v)[:300] for k, v in part.items()} if isinstance(part, dict) else {}
    return out


def main(
    config_fd: int, result_fd: int, err_fd: int, inbox: int, outbox: int, wire: ModuleType, walls: ModuleType
) -> None:
    """Forked by the keeper before anything else happens there; reads its config (the tests) from `config_fd`."""
    start = time.monotonic()
    null = os.open(os.devnull, os.O_RDWR)
    for fd, target in ((null, 0), (null, 1), (err_fd, 2)):
        os.dup2(fd, target)
    with os.fdopen(config_fd, "rb") as f:
        config = json.loads(f.read())
    keep = sorted({0, 1, 2, result_fd, inbox, outbox})
    for low, high in zip([k + 1 for k in keep], [*keep[1:], max(os.sysconf("SC_OPEN_MAX"), 1024)]):
        os.closerange(low, high)
    try:
        walls.set_dumpable(False)
    except OSError:
        pass
    limits = config["limits"]
    resource.setrlimit(resource.RLIMIT_CPU, (int(limits["wall_s"]) + 2,) * 2)
    deadline = start + limits["wall_s"]
    tests = config["tests"]
    total = sum(1 for t in tests if t["counted"])
    report = {"passed": 0, "total": total, "done": 0, "error": "", "timed_out": False, "isolation": None}

    def emit() -> None:
        os.write(result_fd, (json.dumps(report) + "\n").encode())

    try:
        hello = wire.recv(inbox, deadline)
        report["isolation"] = _isolation(hello.get("hello"))
        defined = wire.recv(inbox, deadline)
        if defined.get("defined") is not True:
            raise CandidateError(str(defined.get("error", "the answer could not be defined"))[:300])
    except wire.WireTimeout:
        report.update(error="timed out before the tests ran", timed_out=True)
    except wire.WireClosed:
        report["error"] = "the answer's process ended before the tests (an exit, or a CPU, memory or file-size limit)"
    except wire.WireError as exc:
        report["error"] = f"the answer's process broke the protocol before the tests ({exc})"
    except CandidateError as exc:
        report["error"] = str(exc)
    if report["error"]:
        emit()
        return
    candidate = Candidate(inbox, outbox, wire, deadline, limits["call_s"], config["entry_point"])
    scope: dict = {"__name__": "__tests__"}
    try:
        exec(compile(config["header"], "prompt.py", "exec"), scope)  # trusted: the task's own prompt
        scope["candidate"] = scope[config["entry_point"]] = candidate
        exec(compile(config["setup"], "tests.py", "exec"), scope)
    except BaseException as exc:
        report["error"] = f"the task's setup failed: {type(exc).__name__}: {exc}"[:300]
        emit()
        return
    for test in tests:
        try:
            exec(compile(test["source"], "tests.py", "exec"), scope)
            report["passed"] += 1 if test["counted"] else 0
        except BaseException as exc:
            if test["counted"] and not report["error"]:
                report["error"] = f"{type(exc).__name__}: {exc}"[:300] or "assertion failed"
        report["done"] += 1
        report["timed_out"] = candidate.timed_out
        emit()
