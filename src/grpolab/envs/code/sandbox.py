"""Run untrusted model code against unit tests: the answer in a walled process, the tests in another.

One interpreter start per run (`BOOT`), three processes (`harness.py`):
- the keeper: forks the runner, then puts up the namespaces it can, forks the worker, and at the end kills the
  whole tree (PID namespace, subreaper, and this module kills its process group);
- the test runner (`runner.py`), forked before any wall or model code: runs the task's trusted header, setup and
  test statements with `candidate` bound to a proxy for the answer's function, and writes the verdict, one line
  per test, on a pipe that only it holds;
- the worker: a mount namespace with a minimal read-only root, uid 65534 or no capabilities, no_new_privs and a
  seccomp filter refusing fork/exec/sockets/ptrace, resource limits, then an audit hook as a second line; it runs
  the model's code and answers the runner's calls with plain data (`wire.py`).

Nothing the worker writes is parsed as a result; this module reads the runner's last line. Every layer is tried
where it is wanted and reported (`Isolation`): `isolation()` says what this machine gives, `RunResult.isolation`
what one run got. Where the machine allows less (no namespaces, no seccomp) the run still happens and the report
says "weak" with the reasons; nothing here raises in the caller: every failure is a result.
"""

from __future__ import annotations

import json
import marshal
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).parent
MODULES = {
    "wire": HERE / "wire.py",
    "walls": HERE / "walls.py",
    "seccomp": HERE.parents[1] / "seccomp.py",  # grpolab.seccomp, whose other filter the tools load
    "runner": HERE / "runner.py",
    "harness": HERE / "harness.py",
}
"""Sandbox-side modules (standard library only), compiled here once and handed over as code objects: the sandbox
starts with -B and cannot rely on cached bytecode, and compiling them at each start cost ~20 ms of CPU per run."""
MARK = "grpolab-sandbox"
"""In the command line of every sandbox process (tests look for leftovers with it)."""
BOOT = f"""# {MARK}
import marshal, sys, types
with open(int(sys.argv[1]), "rb") as f:
    code = marshal.loads(f.read())
for name, module_code in code.items():
    sys.modules[name] = module = types.ModuleType(name)
    exec(module_code, module.__dict__)
sys.modules["harness"].main(sys.argv[2:])
"""
GRACE_S = 1.5
"""Beyond the wall-clock limit, for process start-up and the runner's own timeout report."""

LAYERS = {
    "separate_runner": "tests and verdict in their own process; the answer exports plain data only",
    "mount_namespace": "the host filesystem is not visible",
    "pid_namespace": "the answer's processes die with it and see no others",
    "network_namespace": "no network",
    "user_namespace": "namespaces without root (only used when not root)",
    "ipc_namespace": "no shared IPC objects",
    "uts_namespace": "own hostname",
    "unprivileged": "no uid 0 privileges, no capabilities",
    "no_new_privs": "no privilege gain through exec",
    "seccomp": "fork/exec/sockets/memfds/ptrace refused by the kernel",
    "subreaper": "orphans come back to the keeper and are killed",
    "rlimits": "CPU, memory, file size, open files",
    "audit_hook": "in-Python refusals (second line)",
}
STRONG = ("separate_runner", "mount_namespace", "unprivileged", "seccomp")
"""Layers without which the isolation is weak: host files hidden, no privileges, no new processes or sockets."""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 6.0
    """Wall-clock limit for the whole run (the code and all its tests)."""
    cpu_s: int = 4
    """CPU seconds of the answer process (RLIMIT_CPU)."""
    memory_mb: int = 512
    """Address space of the answer process (RLIMIT_AS)."""
    file_mb: int = 8
    """Largest file the code may write (RLIMIT_FSIZE); its private /box holds twice that."""
    max_output: int = 16_384
    """Bytes of stdout/stderr kept."""
    processes: int = 64
    """RLIMIT_NPROC once unprivileged (seccomp refuses forks anyway)."""
    call_s: float = 4.0
    """One call of the answer's function."""
    without: tuple[str, ...] = ()
    """Layers to leave out (names as in `LAYERS`): tests use it to show what each layer stops on its own."""

    def __post_init__(self) -> None:
        unknown = set(self.without) - set(LAYERS) | ({"separate_runner"} & set(self.without))
        if unknown:
            raise ValueError(f"Limits.without: no such layer (or not optional): {sorted(unknown)}")


@dataclass(frozen=True)
class Isolation:
    """Which isolation was in force: `level` "strong" or "weak", the layers with what each means here, what is
    missing and why. `grpolab check` and the lab show it; anything but "strong" deserves a loud warning."""

    level: str
    layers: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_report(cls, report: dict[str, dict[str, str]] | None) -> Isolation:
        """From the worker's own report (sent before any model code ran); None: the worker never reported."""
        layers = {"separate_runner": LAYERS["separate_runner"], **(report or {}).get("layers", {})}
        missing = dict((report or {}).get("missing", {"sandbox": "no report from the answer process"}))
        if os.geteuid() == 0:
            missing.pop("user_namespace", None)  # root needs none
        level = "strong" if all(name in layers for name in STRONG) and "sandbox" not in missing else "weak"
        return cls(level, layers, missing)

    @property
    def strong(self) -> bool:
        return self.level == "strong"

    def summary(self) -> str:
        """One line; a weak level is written in capitals."""
        text = f"{self.level if self.strong else self.level.upper()} isolation: " + ", ".join(self.layers)
        if self.missing:
            text += "; missing: " + "; ".join(f"{k} ({v})" for k, v in self.missing.items())
        return text

    def as_dict(self) -> dict[str, Any]:
        return {"level": self.level, "layers": dict(self.layers), "missing": dict(self.missing)}


@dataclass
class RunResult:
    passed: int
    total: int
    error: str = ""
    timed_out: bool = False
    output: str = ""
    isolation: Isolation | None = None
    extra: dict = field(default_factory=dict)

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


@lru_cache(maxsize=1)
def isolation() -> Isolation:
    """What this machine gives: one real run of a trivial answer (cached; about 0.1 s)."""
    r = run_tests(
        "def probe():\n    return 1\n", [("assert candidate() == 1", True)], "probe", limits=Limits(wall_s=10)
    )
    iso = r.isolation or Isolation.from_report(None)
    if r.passed != 1:
        missing = {**iso.missing, "sandbox": f"a trivial answer did not pass: {r.error or 'no result'}"}
        return Isolation("weak", iso.layers, missing)
    return iso


def run_tests(
    code: str,
    tests: list[tuple[str, bool]],
    entry_point: str,
    setup: str = "",
    limits: Limits = Limits(),
    header: str = "",
) -> RunResult:
    """Run `header` + `code` in the answer process, then `header`, `setup` and each test (source, counted) in the
    runner with `candidate` bound to `entry_point`. `header` is trusted task code (a HumanEval prompt)."""
    total = sum(1 for _, counted in tests if counted)
    t0 = time.monotonic()
    try:
        report, timed_out, output, stderr = _run(code, tests, entry_point, setup, limits, header)
    except OSError as exc:  # no processes, no descriptors, no temporary directory: a result, not a crash
        return RunResult(0, total, f"the sandbox could not start: {exc}"[:300], extra={"seconds": 0.0})
    elapsed = time.monotonic() - t0
    if report is None:
        why = "timed out" if timed_out else "the test runner failed" + (f": {stderr.strip()[-300:]}" if stderr else "")
        return RunResult(0, total, why, timed_out, output, None, {"seconds": elapsed})
    iso = Isolation.from_report(report.get("isolation")) if report.get("isolation") else None
    timed_out = timed_out or bool(report.get("timed_out"))
    error = str(report.get("error", ""))
    if timed_out and "timed out" not in error:
        error = f"timed out after {report.get('done', 0)} of {len(tests)} tests" + (f"; {error}" if error else "")
    passed = min(max(int(report.get("passed", 0)), 0), total)
    return RunResult(passed, total, error, timed_out, output, iso, {"seconds": elapsed})


def _file(data: bytes) -> IO[bytes]:
    f = tempfile.TemporaryFile()
    f.write(data)
    f.seek(0)
    return f


def _config(data: dict) -> IO[bytes]:
    return _file(json.dumps(data).encode())


@lru_cache(maxsize=1)
def _compiled() -> bytes:
    code = {}
    for name, path in MODULES.items():
        code[name] = compile(path.read_text(), str(path), "exec", dont_inherit=True)
    return marshal.dumps(code)


def _run(
    code: str, tests: list[tuple[str, bool]], entry_point: str, setup: str, limits: Limits, header: str
) -> tuple[dict | None, bool, str, str]:
    box = tempfile.mkdtemp(prefix="grpolab-box-")
    result_r, result_w = os.pipe()
    keeper = None
    plain = {k: v for k, v in vars(limits).items() if k != "without"}
    tests_config = {
        "limits": plain,
        "entry_point": entry_point,
        "header": header,
        "setup": setup,
        "tests": [{"source": s, "counted": c} for s, c in tests],
    }
    box_config = {
        "limits": plain,
        "without": list(limits.without),
        "entry_point": entry_point,
        "code": f"{header}\n{code}" if header else code,
    }
    try:
        with (
            tempfile.TemporaryFile() as out,
            tempfile.TemporaryFile() as err,
            _config(tests_config) as runner_config,
            _config(box_config) as stdin,
            _file(_compiled()) as modules,
        ):
            fds = (modules.fileno(), result_w, runner_config.fileno(), err.fileno())
            keeper = subprocess.Popen(
                [sys.executable, "-I", "-B", "-S", "-c", BOOT, *map(str, fds)],
                cwd=box,
                stdin=stdin,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=fds,
                start_new_session=True,
                env={"PATH": "/usr/bin:/bin", "HOME": box, "TMPDIR": box},
            )
            os.close(result_w)
            result_w = -1
            report, timed_out = _read_report(result_r, time.monotonic() + limits.wall_s + GRACE_S)
            _stop(keeper)
            out.seek(0)
            output = out.read(limits.max_output).decode("utf-8", "replace")
            err.seek(0)
            stderr = err.read(4096).decode("utf-8", "replace")
        return report, timed_out, output, stderr
    finally:
        if keeper is not None and keeper.returncode is None:
            _stop(keeper)
        for fd in (result_r, result_w):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(box, ignore_errors=True)


def _read_report(fd: int, deadline: float) -> tuple[dict | None, bool]:
    """The runner's last complete line before EOF or `deadline`; (report or None, whether the deadline hit)."""
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return _last_report(data), True
        poll = select.poll()  # not select.select: a trainer's descriptors may be numbered past 1024
        poll.register(fd, select.POLLIN)
        if not poll.poll(left * 1000):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return _last_report(data), False
        data = (data + chunk)[-(1 << 20) :]


def _last_report(data: bytes) -> dict | None:
    for line in reversed(data.decode("utf-8", "replace").splitlines()):
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if isinstance(report, dict) and "passed" in report:
            return report
    return None


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM (the keeper then kills every process below it), then SIGKILL to the whole process group.

    The group is killed while the leader is still an unreaped zombie, so its id cannot have been reused."""
    try:
        os.kill(proc.pid, signal.SIGTERM)  # not proc.send_signal: it may reap, and the id must stay ours
    except OSError:
        pass
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        try:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                break
        except ChildProcessError:
            break
        time.sleep(0.002)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
