"""How long `make test` takes on a fresh clone, install included: the wait issue 55 sets at 6 minutes.

    .venv/bin/python benchmarks/suite_time.py [--keep]

Clones this checkout's HEAD into a temporary folder (no venv, no caches, an empty uv cache: what CI and a new
contributor start from), then times `make setup` (the install) and `make test` (ruff, the results check and pytest,
already set up) there, one after the other, with nothing else of ours running. Writes
benchmarks/results/suite_time.json: both wall times, their sum, the CPU time pytest's processes used, the number of
tests and pytest's slowest 15 as it printed them. Run it alone: two cores shared with another job time neither.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, write_results

SLOWEST = re.compile(r"^\s*([\d.]+)s (call|setup|teardown)\s+(\S+)", re.M)
SUMMARY = re.compile(r"(\d+) passed(?:, (\d+) skipped)?.* in ([\d.]+)s")


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the command's children, its output); raises where it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return wall, cpu, proc.stdout + proc.stderr


def pytest_reading(output: str) -> dict[str, Any]:
    """The test count, pytest's own seconds and its slowest entries, read from what `make test` printed."""
    found = SUMMARY.search(output)
    if found is None:
        raise SystemExit("make test printed no pytest summary line")
    passed, skipped, seconds = found.groups()
    slowest = [{"seconds": float(s), "phase": p, "test": t} for s, p, t in SLOWEST.findall(output)]
    return {"passed": int(passed), "skipped": int(skipped or 0), "pytest_seconds": float(seconds), "slowest": slowest}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="leave the clone in place (its path is printed)")
    args = ap.parse_args()
    where = Path(tempfile.mkdtemp(prefix="grpolab-test-time-"))
    clone = where / "grpolab"
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True)
        env = {**os.environ, "UV_CACHE_DIR": str(where / "uv-cache")}  # empty, as on a machine CI starts afresh
        setup_wall, _, _ = timed(["make", "setup"], clone, env)
        test_wall, test_cpu, output = timed(["make", "test"], clone, env)
    finally:
        if args.keep:
            print(f"clone kept: {clone}")
        else:
            shutil.rmtree(where, ignore_errors=True)
    result = {
        "command": "python benchmarks/suite_time.py",
        "date": time.strftime("%Y-%m-%d"),
        "clone_of": commit.stdout.strip(),
        "setup_seconds": round(setup_wall, 1),
        "test_seconds": round(test_wall, 1),
        "total_seconds": round(setup_wall + test_wall, 1),
        "test_cpu_seconds": round(test_cpu, 1),
        **pytest_reading(output),
    }
    print(write_results("suite_time", result))


if __name__ == "__main__":
    main()
