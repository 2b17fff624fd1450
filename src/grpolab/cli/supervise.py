"""The `grpolab` command as two processes: a small supervisor, and the command itself in a forked child.

Tools with state, verifiers and plugins run in the command's own process, and nothing in Python can stop one that
calls `os._exit(0)` or is killed by a signal: before this, a stateful tool calling `os._exit(0)` ended `check` and
`train` with exit status 0 and no output, its run directory holding only its claim, and its episodes' temporary
folders left behind. The supervisor sees how the child ended. A child that finished says so on a pipe (its exit
code) before it exits; one that did not is a named error on stderr with a non-zero exit: 128 + N for a signal, the
child's own status otherwise, or 2 where that status was 0. Every temporary file or folder the command makes
through `tempfile` (or in `TMPDIR`, for the processes it starts) lies in one folder of the supervisor's, removed
when the child has ended, however it ended.

Signals: Ctrl-C reaches both processes from the terminal (the child is in the supervisor's process group); the
supervisor ignores it, so a training checkpoints and stops as before. A SIGTERM or SIGHUP sent to the supervisor
(or a SIGINT sent to it alone, with no terminal) is passed on to the child; a child that signal kills is named as
stopped from outside, not blamed on a tool, verifier, reward or plugin.
"""

from __future__ import annotations

import gc
import os
import shutil
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import NoReturn

from grpolab.rundir.claim import SUPERVISOR_ENV

SCRATCH_BASE_ENV = "GRPOLAB_SCRATCH_BASE"
"""Where supervisors make their scratch folders: the temp dir of the first `grpolab` in a tree of them. A command
started by another one (a lab's training job, which outlives the lab) makes its own beside its starter's, never
inside it: the starter removes its own when it ends."""

FIX = (
    "something the command ran (a tool, a verifier, a reward or a plugin) ended the process: run it by hand "
    "(grpolab tools run / reward score) to find which, and let it return or raise instead"
)


def run_supervised(main: Callable[[list[str] | None], None], argv: list[str] | None = None) -> NoReturn:
    """Run `main(argv)` in a forked child and exit as it ended (see the module docstring)."""
    if not hasattr(os, "fork"):
        main(argv)
        sys.exit(0)
    base = os.environ.get(SCRATCH_BASE_ENV, "")
    if not os.path.isdir(base):
        base = tempfile.gettempdir()
    scratch = tempfile.mkdtemp(prefix="grpolab-run-", dir=base)
    os.chmod(scratch, 0o711)  # walled code (the code sandbox's worker, another uid) reaches its own box inside it
    read_end, write_end = os.pipe()
    supervisor = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.environ[SUPERVISOR_ENV] = str(supervisor)  # a run's claim names the process the user started
        os.environ[SCRATCH_BASE_ENV] = base
        _child(main, argv, write_end, scratch)
    os.close(write_end)
    status = _wait(pid)
    finished = _read_all(read_end)
    shutil.rmtree(scratch, ignore_errors=True)
    if finished:
        sys.exit(int(finished))
    code, problem = _abnormal_end(status, argv)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in _PASSED_ON:  # the signal came from outside, not its code
        print(
            f"error: {problem}: the signal was sent to grpolab itself (pid {supervisor}) and passed on", file=sys.stderr
        )
    else:
        print(f"error: {problem}; {FIX}", file=sys.stderr)
    sys.exit(code)


def _child(main: Callable[[list[str] | None], None], argv: list[str] | None, write_end: int, scratch: str) -> NoReturn:
    tempfile.tempdir = scratch
    os.environ["TMPDIR"] = scratch
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:  # a bug of grpolab's own: its traceback, and the usual status
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(write_end, str(code).encode())  # finished: whatever happens while the interpreter shuts down
    os.close(write_end)
    # The shutdown's garbage collections traverse every object torch, transformers and a model made: 0.9-1.3 s of a
    # command's end (the user waits: the supervisor exits after the child), 0.15 s with them frozen. The rest of the
    # shutdown is as before: atexit handlers, threads joined, modules torn down.
    gc.freeze()
    sys.exit(code)


_PASSED_ON: set[int] = set()
"""Signals the supervisor received and passed on to the child: a child they killed was stopped from outside."""


def _wait(pid: int) -> int:
    """Wait for the child, passing on the signals meant for it; its wait status."""

    def forward(signum: int, _frame: object) -> None:
        _PASSED_ON.add(signum)
        _send(pid, signum)

    for name in ("SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, name), forward)
    # from the terminal, Ctrl-C reaches the child too: passing it on would interrupt the child's own clean stop
    signal.signal(signal.SIGINT, signal.SIG_IGN if _terminal_in_front() else forward)
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue


def _send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _terminal_in_front() -> bool:
    """Whether this process group is a terminal's foreground group (which gets the terminal's Ctrl-C)."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def _read_all(fd: int) -> str:
    data = b""
    while chunk := os.read(fd, 64):
        data += chunk
    os.close(fd)
    text = data.decode("ascii", "replace").strip()
    return text if text.lstrip("-").isdigit() else ""


def _abnormal_end(status: int, argv: list[str] | None) -> tuple[int, str]:
    """(exit code, what happened) for a child that ended without finishing."""
    command = " ".join(["grpolab", *(argv if argv is not None else sys.argv[1:])[:1]])
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return 128 + signum, f"{command} was killed by {name} before it finished"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1
    return (code or 2), f"{command} ended abruptly (exit status {code}, no result) before it finished"
