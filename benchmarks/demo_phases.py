"""Where `make demo`'s wall time goes, phase by phase: the measurement that says which part to cut first.

    .venv/bin/python benchmarks/demo_phases.py [--out runs/demo-phases]
    .venv/bin/python benchmarks/demo_phases.py --run runs/demo --wall-seconds 1784.7   # a demo already run

Runs `grpolab demo` (the command `make demo` runs) in its own process and times it, or reads a demo run already made
with the wall time it printed. The split is read back from what the run recorded (`grpolab.run.timing`): the GRPO
steps and their phases (generation, reference pass, update), the held-out evaluations, the greedy probes, the SFT
warm start, and the rest (model loads, preflight probes, checkpoints, report). Writes
benchmarks/results/demo_phases.json with held-out success at base, after seeding and after GRPO.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from common import write_results

from grpolab.run.timing import phase_seconds
from grpolab.rundir import RunDir
from grpolab.vocabulary import HELDOUT_SUCCESS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/demo-phases"), help="run dir of the demo this runs")
    ap.add_argument("--run", type=Path, help="read a demo run already made instead (with --wall-seconds)")
    ap.add_argument("--wall-seconds", type=float, help="the wall time that demo printed (`run dir: ... (N min`)")
    args = ap.parse_args()
    if args.run:
        if args.wall_seconds is None:
            ap.error("--run needs --wall-seconds: the run dir does not record the demo's own wall time")
        run_dir, wall = args.run, args.wall_seconds
        command = f"grpolab demo (then python benchmarks/demo_phases.py --run {args.run} --wall-seconds {wall:g})"
    else:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "grpolab.cli", "demo", "--out", str(args.out)], check=True)
        run_dir, wall = args.out, time.perf_counter() - start
        command = "python benchmarks/demo_phases.py"
    run = RunDir(run_dir)
    phases = phase_seconds(run, wall)
    summary = run.eval_summary()
    labels = run.eval_labels()
    heldout = {label: summary.get(label, {}).get(HELDOUT_SUCCESS) for label in ("base", "0", labels[-1])}
    result = {
        "command": command,
        "date": time.strftime("%Y-%m-%d"),
        "wall_seconds": round(wall, 1),
        "seconds": {k: round(v, 1) for k, v in phases.items()},
        "heldout_success": heldout,
        "config": "src/grpolab/configs/demo.toml",
    }
    print(write_results("demo_phases", result))


if __name__ == "__main__":
    main()
