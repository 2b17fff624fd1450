import os
import re
import threading
import time

import pytest

from grpolab import seccomp
from grpolab.tools import Tool, ToolBox, calculator, cap_output


def slow(seconds: float) -> dict:
    """Sleep.

    Args:
        seconds: How long.
    """
    time.sleep(seconds)
    return {"slept": seconds}


def broken(x: int) -> dict:
    """Always fails.

    Args:
        x: Anything.
    """
    raise RuntimeError("boom")


def test_schema_comes_from_signature_and_docstring():
    schema = Tool(calculator).schema["function"]
    assert schema["name"] == "calculator"
    assert schema["parameters"]["properties"]["expression"]["type"] == "string"
    assert schema["parameters"]["required"] == ["expression"]


def test_arguments_are_validated_before_execution():
    tool = Tool(broken)
    assert "invalid arguments" in tool.run({"x": "not an int"})["error"]
    assert "invalid arguments" in tool.run({})["error"]
    assert "invalid arguments" in tool.run(["x"])["error"]
    assert tool.run({"x": 1}) == {"error": "RuntimeError: boom"}


def test_timeout_becomes_an_error_response():
    tool = Tool(slow, timeout_s=0.2)
    assert "timed out" in tool.run({"seconds": 1.0})["error"]
    assert tool.run({"seconds": 0.0}) == {"slept": 0.0}


def backtracks(n: int) -> dict:
    """A regex that backtracks for seconds inside one C call, holding the GIL (no thread can time it out).

    Args:
        n: Length of the subject.
    """
    return {"matched": bool(re.fullmatch(r"(a+)+$", "a" * n + "b"))}


def spawns(path: str, seconds: float) -> dict:
    """Writes its process group id to `path`, then starts a grandchild that would outlive the call.

    Args:
        path: Where to write the group id.
        seconds: How long the grandchild sleeps.
    """
    with open(path, "w") as f:
        f.write(str(os.getpgid(0)))
    if os.fork() == 0:
        time.sleep(seconds)
        os._exit(0)
    time.sleep(seconds)
    return {}


def not_json(x: int) -> object:
    """Returns something JSON cannot carry.

    Args:
        x: Anything.
    """
    return {"value": object()}


def test_a_call_holding_the_gil_is_really_stopped():
    """Before: a thread pool whose caller could not even wake up while the regex held the GIL (~5 s here)."""
    tool = Tool(backtracks, timeout_s=0.3)
    start = time.perf_counter()
    assert "timed out after 0.3s" in tool.run({"n": 26})["error"]
    assert time.perf_counter() - start < 1.5
    assert tool.run({"n": 3}) == {"matched": False}


def test_the_whole_process_group_dies_on_timeout(tmp_path):
    path = tmp_path / "pgid"
    assert "timed out" in Tool(spawns, timeout_s=0.5).run({"path": str(path), "seconds": 30.0})["error"]
    group = int(path.read_text())
    assert group != os.getpgid(0)
    # SIGKILL was sent to the group; wait for the kernel to show it (a survivor sleeps 30 s, past this backstop)
    deadline = time.monotonic() + 10
    while (alive := _alive_in_group(group)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert alive == []


def _alive_in_group(group: int) -> list[int]:
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                state, _, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(pgrp) == group and state != "Z":
            out.append(int(entry))
    return out


def leaves_its_group(path: str, how: str, seconds: float) -> dict:
    """Starts a grandchild that tries to leave the call's process group (`setsid` or `setpgid`) and sleeps 30 s.

    Args:
        path: Where the grandchild writes its pid (once it tried to leave).
        how: setsid or setpgid.
        seconds: How long the call itself takes after that.
    """
    if os.fork() == 0:
        try:
            os.setsid() if how == "setsid" else os.setpgid(0, 0)
        except OSError:
            pass
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(path + ".tmp", path)
        time.sleep(30)
        os._exit(0)
    while not os.path.exists(path):
        time.sleep(0.005)
    time.sleep(seconds)
    return {}


@pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filter for this architecture")
@pytest.mark.parametrize("how", ["setsid", "setpgid"])
@pytest.mark.parametrize("seconds", [0.0, 5.0], ids=["returns", "times-out"])
def test_no_process_a_user_tool_starts_outlives_the_call(how, seconds, tmp_path):
    """Before: a grandchild that called setsid (or setpgid) left the group that is killed, and slept on."""
    path = tmp_path / "pid"
    response = Tool(leaves_its_group, timeout_s=2.0).run({"path": str(path), "how": how, "seconds": seconds})
    assert ("timed out" in response.get("error", "")) == (seconds > 0), response
    pid = int(path.read_text())
    deadline = time.monotonic() + 10  # a backstop only: a survivor sleeps 30 s
    while (alive := _running(pid)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not alive, f"{how}: pid {pid} outlived the call"


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_an_in_process_call_that_times_out_stops_burning_cpu():
    """Before: the pool thread of a timed-out pure-Python tool spun on for its full 30 s (a thread cannot be killed,
    but an exception raised into it stops Python code at its next instruction)."""
    ended, raised = threading.Event(), []

    def spins(seconds: float) -> dict:
        """Busy in pure Python for `seconds`.

        Args:
            seconds: How long.
        """
        until = time.monotonic() + seconds
        try:
            while time.monotonic() < until:
                pass
        except BaseException as exc:
            raised.append(type(exc).__name__)
            raise
        finally:
            ended.set()
        return {}

    response = Tool(spins, timeout_s=0.2, isolate=False).run({"seconds": 30.0})
    assert "timed out after 0.2s" in response["error"]
    assert ended.wait(10), "the timed-out call is still running"  # a backstop only: it would spin for 30 s
    assert raised == ["TimeLimitExceeded"]
    assert Tool(spins, isolate=False).run({"seconds": 0.0}) == {}


def test_bounded_calls_reuse_a_pool_thread_and_a_timed_out_one_is_never_reused():
    """Each bounded call used to start a thread of its own; a pool thread now runs them one after another, and the
    thread an exception was raised into (its call timed out) ends with that call instead of taking another."""
    from grpolab.timelimit import run_bounded

    idents = [run_bounded(threading.get_ident, 5, "ident", "ident").value for _ in range(50)]
    assert threading.get_ident() not in idents and len(set(idents)) <= 2  # not 50 threads
    before = threading.active_count()
    assert all(run_bounded(lambda: None, 5, "none", "none") for _ in range(200))
    assert threading.active_count() <= before + 1

    stuck: list[int] = []

    def spins() -> None:
        stuck.append(threading.get_ident())
        while True:
            pass

    assert run_bounded(spins, 0.1, "spins", "spins") is None
    later = {run_bounded(threading.get_ident, 5, "ident", "ident").value for _ in range(20)}
    assert stuck and stuck[0] not in later


def test_a_call_stopped_before_it_began_never_runs_and_kills_no_pool_thread(monkeypatch):
    """A limit that passes before the pool thread takes the call (0 s here, or a GIL held elsewhere) used to raise
    into the thread outside its call: the thread died with a traceback. Now such a call is cancelled, never runs,
    and is not counted as stuck."""
    from grpolab.timelimit import ThreadCall, run_bounded

    deaths: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: deaths.append(args.exc_type.__name__))
    ran: list[int] = []
    for i in range(100):
        run_bounded(lambda i=i: ran.append(i), 0, "zero", "zero")
    calls = [ThreadCall(lambda i=i: ran.append(100 + i)) for i in range(100)]
    cancelled = [100 + i for i, call in enumerate(calls) if not call.wait(0) and call.cancelled]
    time.sleep(0.3)
    assert deaths == []
    assert cancelled and not set(cancelled) & set(ran)  # a cancelled call never runs, not even later
    assert run_bounded(lambda: 7, 5, "zero", "zero").value == 7  # not refused as still running


def test_a_calls_context_does_not_reach_the_next_call_on_the_same_pool_thread():
    """Each call runs in a context of its own, as a new thread's: a decimal precision one reward sets stays there."""
    import decimal

    from grpolab.timelimit import run_bounded

    def narrow() -> None:
        decimal.getcontext().prec = 3

    run_bounded(narrow, 5, "narrow", "narrow")
    assert str(run_bounded(lambda: decimal.Decimal(2).sqrt(), 5, "sqrt", "sqrt").value).startswith("1.41421356")


def test_a_call_raising_base_exception_is_a_response_not_a_crash():
    def exits(code: int) -> dict:
        """Exits.

        Args:
            code: Exit code.
        """
        raise SystemExit(code)

    assert Tool(exits, isolate=False).run({"code": 3}) == {"error": "SystemExit: 3"}


def test_child_process_answers_like_in_process():
    assert Tool(not_json).run({"x": 1}) == {"error": "tool returned a value that is not JSON-serialisable"}
    assert Tool(broken).run({"x": 1}) == {"error": "RuntimeError: boom"}


def own_pid(x: int) -> dict:
    """The process the call ran in.

    Args:
        x: Anything.
    """
    return {"pid": os.getpid()}


def test_a_calls_child_is_reaped_after_it_answers_and_leaves_no_zombie():
    """The caller does not wait for a killed child's exit (a reaper thread does): the answer comes first, and the
    child is gone soon after, not left a zombie."""
    tool = Tool(own_pid)
    pids = [tool.run({"x": i})["pid"] for i in range(5)]
    assert os.getpid() not in pids and len(set(pids)) == 5
    deadline = time.monotonic() + 5  # as the sandbox's no-leftover checks allow a killed process to exit
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)  # a zombie still has its /proc entry


@pytest.mark.parametrize("fn,isolated", [(calculator, False), (slow, True)])
def test_builtin_tools_stay_in_process_user_tools_do_not(fn, isolated):
    assert Tool(fn).isolate is isolated
    assert Tool(fn, isolate=not isolated).isolate is not isolated


def test_a_stateful_tool_can_opt_out_of_the_child():
    calls: list[int] = []

    def count(x: int) -> dict:
        """Counts calls.

        Args:
            x: Anything.
        """
        calls.append(x)
        return {"calls": len(calls)}

    assert Tool(count).run({"x": 1}) == {"calls": 1} and calls == []  # ran in a child: the parent saw nothing
    assert Tool(count, isolate=False).run({"x": 1}) == {"calls": 1} and calls == [1]


def test_output_is_capped():
    out = cap_output({"result": "x" * 10_000}, limit=100)
    assert "truncated" in out["error"] and len(out["preview"]) == 100
    assert cap_output({"bad": object()})["error"].startswith("tool returned")


def test_unknown_tool_is_a_response():
    box = ToolBox([Tool(calculator)])
    assert "unknown tool" in box.execute("rm", {})["error"]
    assert "unknown tool" in box.execute(None, {})["error"]


def test_deeply_nested_arguments_are_an_error_response_not_a_recursion():
    """A Python caller (not the JSON path, whose parser stops first) can hand a tool arguments 5,000 levels deep."""
    value: dict = {"expression": "1+1"}
    for _ in range(5000):
        value = {"a": value}
    response = Tool(calculator).run({"expression": value})
    assert "nest more than" in response["error"]
