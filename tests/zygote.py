"""`grpolab` commands for the tests, forked from an interpreter that has imported torch and transformers already.

A test that runs `python -m grpolab.cli ...` paid ~4 s of imports (torch 1.5 s, transformers with its Llama model 3 s)
before the command did anything: in the suite, 38 such commands spent ~160 of their 206 CPU-seconds importing
(2026-12-07). Here one server process per test process (an xdist worker) imports those libraries once; each command
is a fork of it, made as `python -m grpolab.cli` would be: the test's environment, working folder (first on
`sys.path`, as `-m` puts it), argv and standard streams, its own session where asked, and exit codes as `subprocess`
reports them (a signal as its negative). grpolab itself is not imported before the fork, so every command loads it,
its plugins and the user's files afresh.

What a fork cannot be is an interpreter whose library imports read a different environment: a command whose
environment differs from the server's in a variable read at import time (threads, caches, `PYTHONPATH`...) runs
as a real subprocess instead (`Zygote.fits`), as every command does with GRPOLAB_TESTS_FRESH=1 set. Tests about the
interpreter itself (what `grpolab.cli` imports, how a killed or exiting process is reported) start real subprocesses
of their own; tests/test_zygote.py checks that a forked command and a fresh one give the same output and exit codes.

    python tests/zygote.py FD      # the server (started by `Zygote`): FD is its end of a SOCK_SEQPACKET pair
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

SRC = str(Path(__file__).resolve().parents[1] / "src")

IMPORT_TIME_ENV = (
    "OMP_",
    "MKL_",
    "KMP_",
    "HF_",
    "HUGGINGFACE",
    "TRANSFORMERS_",
    "TORCH_",
    "PYTORCH",
    "CUDA",
    "MPL",
    "PYTHON",
    "LD_",
    "HOME",
    "XDG_",
    "TOKENIZERS_",
)
"""Environment variables the preloaded libraries may read when imported: a command whose values differ runs fresh.
(Not TORCHINDUCTOR_*: torch sets TORCHINDUCTOR_CACHE_DIR in the test process when it first needs it.)"""


def command_env(**extra: str) -> dict[str, str]:
    """The environment a test's command runs in: this process's, this checkout's source first on the path, and
    `extra`."""
    return {**os.environ, "PYTHONPATH": SRC, **extra}


def _preload() -> None:
    """What nearly every command imports, and grpolab does not own (its own modules load in each command)."""
    import jsonschema  # noqa: F401
    import matplotlib.figure  # noqa: F401
    import peft  # noqa: F401
    import pydantic  # noqa: F401
    import rich.console  # noqa: F401
    import torch  # noqa: F401
    import transformers
    import typer  # noqa: F401
    from matplotlib.backends import backend_svg  # noqa: F401
    from transformers.models.llama import modeling_llama  # noqa: F401

    for name in ("AutoModelForCausalLM", "AutoTokenizer", "DynamicCache", "GenerationConfig", "PreTrainedModel"):
        getattr(transformers, name)


# ---- the server ------------------------------------------------------------------------------------------------


def serve(fd: int) -> None:
    """Fork a command per request on the socket; report each pid, then each exit."""
    import gc
    import select

    sock = socket.socket(fileno=fd)
    _preload()
    gc.freeze()  # the children share these objects' pages instead of copying them as collections touch them
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sock.send(b'{"ready": true}')
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
            _reap(sock)
        if sock in ready:
            message, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
            if not message:
                return  # the test process ended
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                # detached, not closed under the socket object: at the command's exit it would close the fd
                # number again, by then perhaps a file the command still writes
                _command(json.loads(message), fds, [sock.detach(), wake_r, wake_w])
            for f in fds:
                os.close(f)
            sock.send(json.dumps({"pid": pid}).encode())


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.send(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def _command(request: dict[str, Any], fds: list[int], server_fds: list[int]) -> None:
    """In the fork: become `python -m grpolab.cli ARGV` as the request describes it; never returns."""
    import runpy

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for f in server_fds:
        os.close(f)
    if request["new_session"]:
        os.setsid()
    for target, f in zip((0, 1, 2), fds):
        os.dup2(f, target)
    for f in fds:
        if f > 2:
            os.close(f)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.path[0] = os.getcwd()  # as `python -m` puts it
    sys.argv = ["-m", *request["argv"]]
    runpy.run_module("grpolab.cli", run_name="__main__", alter_sys=True)
    sys.exit(0)


# ---- the client --------------------------------------------------------------------------------------------------


class Zygote:
    """The server of this test process, started on first use."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.exits: dict[int, int] = {}
        self.exited = threading.Condition()
        self.sock: socket.socket | None = None
        self.env: dict[str, str] = {}
        self.dead = False

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.env = command_env()
        self.server = subprocess.Popen(
            [sys.executable, __file__, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        theirs.close()
        atexit.register(self._stop, ours)
        if json.loads(ours.recv(1 << 16) or b"{}").get("ready") is not True:
            raise RuntimeError("the test's command server did not start (see its stderr above)")
        threading.Thread(target=self._read, args=(ours,), daemon=True).start()
        return ours

    def _stop(self, sock: socket.socket) -> None:
        """At the test process's exit: the server ends on the closed socket, and is waited for, so its CPU time and
        its commands' count in this process's children's (as a fresh subprocess's do)."""
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes the reader thread's recv; close alone would not end it
        except OSError:
            pass
        sock.close()
        try:
            self.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.server.kill()

    def _read(self, sock: socket.socket) -> None:
        while message := sock.recv(1 << 16):
            event = json.loads(message)
            if "exited" in event:
                with self.exited:
                    self.exits[event["exited"]] = event["code"]
                    self.exited.notify_all()
            else:
                self.replies.put(event)
        with self.exited:
            self.dead = True
            self.exited.notify_all()

    def fits(self, env: dict[str, str]) -> bool:
        """Whether a command with this environment can be a fork: the import-time variables are the server's."""
        if not hasattr(os, "fork") or os.environ.get("GRPOLAB_TESTS_FRESH"):
            return False
        server = self.env or command_env()
        keys = {k for k in (*env, *server) if k.startswith(IMPORT_TIME_ENV)}
        return all(env.get(k) == server.get(k) for k in keys)

    def spawn(
        self, argv: list[str], cwd: str | Path, env: dict[str, str], streams: tuple[int, int, int], new_session: bool
    ) -> Command:
        """`python -m grpolab.cli ARGV` forked, with stdin, stdout, stderr on the three file descriptors given."""
        with self.lock:
            if self.sock is None or self.dead:  # first use, or the server ended (its commands' exits are kept)
                self.dead = False
                self.sock = self._start()
            request = {"argv": list(argv), "cwd": str(cwd), "env": env, "new_session": new_session}
            socket.send_fds(self.sock, [json.dumps(request).encode()], list(streams))
            return Command(self, self.replies.get(timeout=60)["pid"])

    def wait(self, pid: int, timeout: float | None) -> int | None:
        with self.exited:
            self.exited.wait_for(lambda: pid in self.exits or self.dead, timeout)
            if pid not in self.exits and self.dead:
                raise RuntimeError("the test's command server ended")
            return self.exits.get(pid)


class Command:
    """The `subprocess.Popen` surface the tests use, for a forked command."""

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote, self.pid = zygote, pid
        self.returncode: int | None = None
        self.stdout: Any = None
        self.stderr: Any = None

    def poll(self) -> int | None:
        return self.wait(0) if self.returncode is None else self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.wait(self.pid, timeout)
            if self.returncode is None and timeout != 0:
                raise subprocess.TimeoutExpired(["grpolab", str(self.pid)], timeout)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


ZYGOTE = Zygote()


def popen(
    argv: list[str],
    env: dict[str, str] | None = None,
    stdout: int | None = None,
    stderr: int | None = None,
    new_session: bool = False,
    cwd: str | Path | None = None,
) -> subprocess.Popen | Command:
    """`subprocess.Popen([python, -m, grpolab.cli, *argv], ...)`, forked where it can be. `env`: `command_env()`
    where not given. `stdout` and `stderr` as Popen takes them: None (this process's), a file descriptor, DEVNULL,
    PIPE (read from `.stdout`), or STDOUT for stderr; stdin is /dev/null."""
    env = command_env() if env is None else env
    cwd = cwd or os.getcwd()
    if not ZYGOTE.fits(env):
        command = [sys.executable, "-m", "grpolab.cli", *argv]
        return subprocess.Popen(
            command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
            start_new_session=new_session,
        )  # fmt: skip
    opened: list[int] = [os.open(os.devnull, os.O_RDWR)]
    pipe = None
    out = {None: 1, subprocess.DEVNULL: opened[0]}.get(stdout, stdout)
    if stdout == subprocess.PIPE:
        pipe, out = os.pipe()
        opened.append(out)
    err = {None: 2, subprocess.DEVNULL: opened[0], subprocess.STDOUT: out}.get(stderr, stderr)
    try:
        command = ZYGOTE.spawn(argv, cwd, env, (opened[0], out, err), new_session)
    finally:
        for f in opened:
            os.close(f)
    if pipe is not None:
        command.stdout = open(pipe, "rb")
    return command


def run(
    argv: list[str], cwd: str | Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """`subprocess.run([python, -m, grpolab.cli, *argv], capture_output=True, text=True)` through `popen`: forked
    where it can be."""
    import tempfile

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        command = popen(argv, env, out.fileno(), err.fileno(), cwd=cwd)
        try:
            code = command.wait(timeout)
        except subprocess.TimeoutExpired:
            command.kill()
            command.wait()
            raise
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode("utf-8", errors="replace"))
    return subprocess.CompletedProcess(["grpolab", *argv], code, texts[0], texts[1])


if __name__ == "__main__":
    serve(int(sys.argv[1]))
