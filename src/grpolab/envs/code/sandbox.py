"""Run untrusted model code against unit tests in a separate, limited process.

Layers, outermost first:
- a new network namespace (and PID namespace) via util-linux `unshare` where the machine allows one: no network
  interface but loopback, and every process the code starts dies with it. `isolation()` says what was used; without
  `unshare` the audit hook below still refuses sockets.
- its own session / process group, killed as a whole (SIGKILL) when the run ends or passes its wall-clock limit;
- resource limits: CPU seconds, address space (memory), file size, open files, processes (not enforced for root);
- its own temporary directory as the working directory, an empty environment, `python -I -B -S` (no site-packages,
  no user paths, no bytecode written);
- inside, an audit hook (`harness.py`) refusing files outside that directory, sockets, new processes,
  signals, ctypes.
Output is capped; nothing the code does raises in the caller: every failure is a result with a reason.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

HARNESS = Path(__file__).with_name("harness.py")


@dataclass(frozen=True)
class Limits:
    wall_s: float = 6.0
    """Wall-clock limit for the whole run (the code and all its tests)."""
    cpu_s: int = 4
    """CPU seconds (RLIMIT_CPU)."""
    memory_mb: int = 512
    """Address space (RLIMIT_AS)."""
    file_mb: int = 8
    """Largest file the code may write (RLIMIT_FSIZE)."""
    max_output: int = 16_384
    """Bytes of stdout/stderr kept."""
    processes: int = 64
    """RLIMIT_NPROC (per user; the kernel does not enforce it for root, the audit hook refuses forks anyway)."""


@dataclass
class RunResult:
    passed: int
    total: int
    error: str = ""
    timed_out: bool = False
    output: str = ""
    isolation: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


@lru_cache(maxsize=1)
def isolation() -> tuple[str, ...]:
    """The `unshare` prefix that works here (network + PID namespaces), or () when none does."""
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    for prefix in (
        (exe, "--net", "--pid", "--fork", "--kill-child"),
        (exe, "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child"),
    ):
        try:
            ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return prefix
    return ()


def isolation_name() -> str:
    prefix = isolation()
    if not prefix:
        return "no namespaces (unshare unavailable): rlimits + process group + audit hook"
    return ("user+" if "--user" in prefix else "") + "network and PID namespaces (unshare) + rlimits + audit hook"


def _limit(limits: Limits):
    def apply() -> None:
        mb = 1024 * 1024
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb * mb, limits.memory_mb * mb))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_mb * mb, limits.file_mb * mb))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_tests(
    code: str, tests: list[tuple[str, bool]], entry_point: str, setup: str = "", limits: Limits = Limits()
) -> RunResult:
    """Define `code`, then run each test statement (source, counted) with `candidate` bound to `entry_point`."""
    total = sum(1 for _, counted in tests if counted)
    box = Path(tempfile.mkdtemp(prefix="grpolab-box-"))
    result_path = Path(tempfile.mkdtemp(prefix="grpolab-res-")) / "result.jsonl"
    try:
        with open(result_path, "wb") as result, open(box / "output.txt", "wb+") as out:
            payload = {
                "code": code,
                "setup": setup,
                "entry_point": entry_point,
                "result_fd": result.fileno(),
                "tests": [{"source": s, "counted": c} for s, c in tests],
            }
            (box / "payload.json").write_text(json.dumps(payload))
            cmd = [*isolation(), sys.executable, "-I", "-B", "-S", str(HARNESS)]
            timed_out = False
            t0 = time.monotonic()
            proc = subprocess.Popen(
                cmd,
                cwd=box,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={"PATH": "/usr/bin:/bin", "HOME": str(box), "TMPDIR": str(box)},
                start_new_session=True,
                preexec_fn=_limit(limits),
                pass_fds=(result.fileno(),),
            )
            try:
                proc.wait(timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc)
            elapsed = time.monotonic() - t0
            out.seek(0)
            output = out.read(limits.max_output).decode("utf-8", "replace")
        report = _last_report(result_path)
    finally:
        shutil.rmtree(box, ignore_errors=True)
        shutil.rmtree(result_path.parent, ignore_errors=True)
    if report is None:
        why = "timed out" if timed_out else f"the sandbox process died (exit {proc.returncode}: a CPU or memory limit?)"
        return RunResult(0, total, why, timed_out, output, isolation_name(), {"seconds": elapsed})
    error = report.get("error", "")
    if timed_out:
        error = f"timed out after {report.get('done', 0)} of {len(tests)} tests" + (f"; {error}" if error else "")
    passed = min(int(report.get("passed", 0)), total)
    return RunResult(passed, total, error, timed_out, output, isolation_name(), {"seconds": elapsed})


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _last_report(path: Path) -> dict | None:
    try:
        lines = path.read_bytes()[-65536:].decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and "passed" in data:
            return data
    return None
