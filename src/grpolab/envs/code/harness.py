"""The sandbox processes (`python -I -B -S -c sandbox.BOOT`): a keeper, the test runner, and the answer's worker.

Standard library only (no site-packages). Three processes come out of this file:
- the keeper, started by the parent (`sandbox.py`): first forks the test runner (`runner.py`), then sets resource
  limits, becomes a subreaper, enters new user/PID/network/IPC/UTS namespaces where the machine allows them, forks
  the worker and waits; on SIGTERM or when both children end it kills every process below it. It never runs model
  code. (One interpreter start for all three: a second one cost ~20 ms of CPU per run.)
- the runner: trusted test code only, outside every wall put up after it was forked (see `runner.py`).
- the worker: its own mount namespace with a minimal read-only root (`walls.py`), no privileges, no_new_privs and
  a seccomp filter that refuses fork/exec/sockets/memfds/ptrace (`grpolab/seccomp.py`), then an audit hook (a
  second line, not the wall: it refuses files outside /box, new processes, signals, ctypes and a few imports), then
  the model's code. It sends the isolation report before any model code runs, then answers `call` messages from the
  test runner with the function's return value encoded by `wire.py`.

The worker never sees a test, an expected value or a verdict: those live in the runner (`runner.py`), a separate
process. Whatever the model's code does here (replace builtins, walk frames, write to any descriptor, return an
object with a custom `__eq__`), the most it can send is plain data as the answer to a call.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from types import ModuleType

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a few ms of every sandbox start)
if TYPE_CHECKING:
    from grpolab.envs.code.walls import Report

FD_CEILING = max(os.sysconf("SC_OPEN_MAX"), 1024)
"""Above any descriptor the parent can pass (its soft limit, read before ours is lowered)."""

BLOCKED = frozenset(
    "socket.__new__ socket.connect socket.bind socket.getaddrinfo socket.sendto subprocess.Popen os.system os.exec "
    "os.posix_spawn os.spawn os.fork os.forkpty os.kill os.killpg signal.pthread_kill ctypes.dlopen ctypes.dlsym "
    "ctypes.cdata gc.get_objects gc.get_referrers gc.get_referents sys.setprofile sys.settrace os.chroot os.setuid "
    "os.setgid winreg.OpenKey webbrowser.open pty.spawn".split()
)
BLOCKED_IMPORTS = frozenset("_posixsubprocess _ctypes ctypes _xxsubinterpreters _xxinterpchannels".split())
PATH_EVENTS = frozenset(
    "os.remove os.rename os.rmdir os.mkdir os.chmod os.chown os.symlink os.link os.truncate os.utime "
    "shutil.rmtree shutil.move shutil.copyfile os.chdir".split()
)
LIST_EVENTS = frozenset({"os.listdir", "os.scandir", "glob.glob"})
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _inside(path: object, roots: tuple[str, ...]) -> bool:
    if isinstance(path, int):
        return True  # an already-open descriptor
    try:
        real = os.path.realpath(os.fsdecode(path))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return any(real == r or real.startswith(r + os.sep) for r in roots)


def install_guard(box: str) -> None:
    box = os.path.realpath(box)
    stdlib = tuple(os.path.realpath(p) for p in sys.path if p and os.path.isdir(p))  # python -I -S: the stdlib
    readable = (box, *stdlib)
    writable = (box,)

    def guard(event: str, args: tuple) -> None:
        if event in BLOCKED:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import":
            if args and str(args[0]).split(".")[0] in BLOCKED_IMPORTS:
                raise PermissionError(f"sandbox: importing {args[0]} is not allowed")
        elif event == "open":
            path, mode, flags = (list(args) + [None, None, 0])[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & WRITE_FLAGS)
            if not _inside(path, writable if writing else readable):
                raise PermissionError(f"sandbox: may not open {path!r}")
        elif event in LIST_EVENTS:
            if args and isinstance(args[0], (str, bytes, os.PathLike)) and not _inside(args[0], readable):
                raise PermissionError(f"sandbox: may not list {args[0]!r}")
        elif event in PATH_EVENTS:
            for a in args[:2]:
                if isinstance(a, (str, bytes, os.PathLike)) and not _inside(a, writable):
                    raise PermissionError(f"sandbox: {event} outside the sandbox directory")

    sys.addaudithook(guard)


def set_limits(limits: dict) -> None:
    mb = 1024 * 1024
    # soft = hard: the worker may be PID 1 of its namespace, which ignores SIGXCPU; the hard limit's SIGKILL it cannot
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"]))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_mb"] * mb, limits["memory_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_mb"] * mb, limits["file_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main(argv: list[str]) -> None:
    """The keeper. `argv`: descriptors of the result pipe, the runner's config, the runner's stderr; stdin: ours.

    Started by `sandbox.BOOT`, which puts this module and its siblings in `sys.modules` from code objects."""
    result_fd, runner_config_fd, runner_err_fd = (int(a) for a in argv[:3])
    # the sandbox's own modules: they exist only inside the sandbox, where sandbox.BOOT has put them
    import runner
    import seccomp
    import walls
    import wire

    to_worker = os.pipe()
    to_runner = os.pipe()
    # the runner first, before any namespace, limit or model code exists here; it alone reads the tests
    runner_pid = os.fork()
    if runner_pid == 0:
        os.close(to_worker[0])
        os.close(to_runner[1])
        runner.main(runner_config_fd, result_fd, runner_err_fd, to_runner[0], to_worker[1], wire, walls)
        os._exit(0)
    for fd in (result_fd, runner_config_fd, runner_err_fd, to_runner[0], to_worker[1]):
        os.close(fd)
    config = json.loads(sys.stdin.buffer.read())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    report = walls.Report(config["without"])
    try:
        set_limits(config["limits"])
        report.ok("rlimits", "CPU seconds, address space, file size, open files, no core dumps")
    except (OSError, ValueError) as exc:
        report.fail("rlimits", exc)
    walls.become_subreaper(report)
    walls.enter_namespaces(report)
    worker = os.fork()
    if worker == 0:
        serve(config, report, walls, seccomp, wire, to_worker[0], to_runner[1])
        os._exit(0)
    os.close(to_worker[0])
    os.close(to_runner[1])
    keep(runner_pid, worker, walls, "pid_namespace" in report.layers)


def keep(runner_pid: int, worker: int, walls: ModuleType, pid_namespace: bool) -> None:
    """Wait for the runner and the worker; on SIGTERM (the run is over) or when both end, kill everything below.

    With a PID namespace the worker is its PID 1 and the kernel kills the rest with it; without one, orphans that
    left the process group (setsid) came back here as to a subreaper, and /proc is searched for them."""
    try:
        walls.set_dumpable(False)
    except OSError:
        pass

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    waiting = {runner_pid, worker}
    try:
        while waiting:
            waiting.discard(os.waitpid(-1, 0)[0])
    except (SystemExit, ChildProcessError):
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for pid in (worker, runner_pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not pid_namespace:
            walls.kill_tree(os.getpid())
    os._exit(0)


def _describe(exc: BaseException) -> list[str]:
    try:
        return [type(exc).__name__, str(exc)[:300]]
    except BaseException:  # a __str__ that raises is the answer's problem, not the protocol's
        return [type(exc).__name__, ""]


def serve(
    config: dict, report: Report, walls: ModuleType, seccomp: ModuleType, wire: ModuleType, inbox: int, outbox: int
) -> None:
    """The worker: the rest of the walls, the hook, the model's code, then one reply per call until EOF."""
    try:
        walls.die_with_parent()
    except OSError:
        pass
    box = os.getcwd()
    fs_hidden = walls.build_root(report, box, config["limits"]["file_mb"] * 2)
    if fs_hidden:
        box = "/box"
        os.environ.update(HOME=box, TMPDIR=box)
    walls.drop_privileges(report, fs_hidden, box)
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (config["limits"]["processes"],) * 2)
    except (OSError, ValueError):
        pass
    if report.wanted("no_new_privs"):
        try:
            seccomp.no_new_privs()
            report.ok("no_new_privs", "no set-uid or file-capability gain, ever")
        except OSError as exc:
            report.fail("no_new_privs", exc)
    if report.wanted("seccomp"):
        try:
            seccomp.install()
            report.ok("seccomp", "fork, exec, sockets, memfds, ptrace, signals to others, mounts refused by the kernel")
        except OSError as exc:
            report.fail("seccomp", exc)
    low_fd, high_fd = sorted((inbox, outbox))
    for low, high in ((3, low_fd), (low_fd + 1, high_fd), (high_fd + 1, FD_CEILING)):
        os.closerange(low, high)  # everything but stdio and the two pipes to the runner
    if report.wanted("audit_hook"):
        install_guard(box)
        report.ok("audit_hook", "files outside /box, sockets, processes, signals, ctypes refused in Python")
    hello = {"hello": report.as_dict()}
    # nothing of the setup stays reachable from the model's code (frames lead back here): no ctypes handles
    for module in (walls, seccomp, sys.modules.get("runner")):
        module.__dict__.clear()
    for name in [m for m in sys.modules if m.split(".")[0] in ("ctypes", "_ctypes", "walls", "seccomp", "runner")]:
        del sys.modules[name]
    send, recv, encode, decode, dumps = wire.send, wire.recv, wire.encode, wire.decode, wire.dumps
    limit, WireError = wire.MAX_MESSAGE, wire.WireError  # noqa: N806
    code, entry = config["code"], config["entry_point"]
    del walls, seccomp, report, config
    send(outbox, hello)
    namespace: dict = {"__name__": "__solution__"}
    try:
        exec(compile(code, "solution.py", "exec"), namespace)
        function = namespace.get(entry)
        if not callable(function):
            raise NameError(f"the answer does not define a function named {entry!r}")
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included: the verdict is the runner's
        send(outbox, {"defined": False, "error": ": ".join(_describe(exc))[:300]})
        os._exit(0)
    send(outbox, {"defined": True})
    while True:
        try:
            message = recv(inbox, None, 1 << 26)
            args, kwargs = decode(message["call"][0]), decode(message["call"][1])
        except (WireError, KeyError, IndexError, TypeError):
            os._exit(0)  # the runner is done (or gone)
        try:
            reply = {"value": encode(function(*args, **kwargs))}
            if len(dumps(reply)) > limit:
                reply = {"unsendable": f"a return value larger than {limit} bytes"}
        except WireError as exc:
            reply = {"unsendable": str(exc)}
        except BaseException as exc:
            reply = {"raise": _describe(exc)}
        try:
            send(outbox, reply)
        except WireError:
            os._exit(0)
