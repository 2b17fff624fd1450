"""Runs inside the sandbox process (`python -I -B -S harness.py`): the model's code, then each unit test.

Standard library only (the sandbox starts without site-packages). Before any model code runs it installs an audit
hook that refuses: opening files outside the sandbox directory (reads of the standard library excepted), sockets,
new processes (fork, exec, spawn, subprocess, system), signals to other processes, ctypes and gc walks. The OS
limits (CPU time, memory, file size, process count), the wall-clock timeout and the network namespace are set by
the parent (`grpolab.envs.code.sandbox`). Each test's result is appended to the result descriptor as it finishes,
so a test that hangs keeps the ones before it.
"""

import json
import os
import sys
import sysconfig

BLOCKED = {
    "socket.__new__",
    "socket.connect",
    "socket.bind",
    "socket.getaddrinfo",
    "socket.sendto",
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "signal.pthread_kill",
    "ctypes.dlopen",
    "ctypes.dlsym",
    "ctypes.cdata",
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "sys.setprofile",
    "sys.settrace",
    "os.chroot",
    "os.setuid",
    "os.setgid",
    "winreg.OpenKey",
    "webbrowser.open",
    "pty.spawn",
}
PATH_EVENTS = {
    "os.remove",
    "os.rename",
    "os.rmdir",
    "os.mkdir",
    "os.chmod",
    "os.chown",
    "os.symlink",
    "os.link",
    "os.truncate",
    "os.utime",
    "shutil.rmtree",
    "shutil.move",
    "shutil.copyfile",
    "os.chdir",
}
LIST_EVENTS = {"os.listdir", "os.scandir", "glob.glob"}
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
    paths = sysconfig.get_paths()
    stdlib = tuple(os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib") if paths.get(k))
    dynload = tuple(os.path.realpath(p) for p in sys.path if p and os.path.isdir(p))
    readable = (box, *stdlib, *dynload)
    writable = (box,)

    def guard(event: str, args: tuple) -> None:
        if event in BLOCKED:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
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


def main() -> None:
    box = os.getcwd()
    with open("payload.json") as f:
        payload = json.load(f)
    os.remove("payload.json")
    fd = int(payload["result_fd"])
    tests, entry = payload["tests"], payload["entry_point"]
    report = {"passed": 0, "total": sum(1 for t in tests if t["counted"]), "done": 0, "error": ""}

    def emit() -> None:
        os.write(fd, (json.dumps(report) + "\n").encode())

    install_guard(box)
    namespace: dict = {"__name__": "__solution__"}
    try:
        exec(compile(payload["code"], "solution.py", "exec"), namespace)
        candidate = namespace.get(entry)
        if not callable(candidate):
            raise NameError(f"the answer does not define a function named {entry!r}")
        # the tests see the answer's module names too (HumanEval tests call the prompt's helpers, e.g. encode_cyclic)
        scope = {**namespace, "__name__": "__tests__", "candidate": candidate, entry: candidate}
        exec(compile(payload["setup"], "tests.py", "exec"), scope)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included: nothing the model does ends scoring
        report["error"] = f"{type(exc).__name__}: {exc}"[:300]
        emit()
        os._exit(0)
    for test in tests:
        try:
            exec(compile(test["source"], "tests.py", "exec"), scope)
            report["passed"] += 1 if test["counted"] else 0
        except BaseException as exc:
            if test["counted"] and not report["error"]:
                report["error"] = f"{type(exc).__name__}: {exc}"[:300] or "assertion failed"
        report["done"] += 1
        emit()
    os._exit(0)


if __name__ == "__main__":
    main()
