"""The demo with its GRPO update in fp32 and in bf16 (the SFT warm start in fp32 in both), seed by seed.

    .venv/bin/python benchmarks/demo_precision.py [--seeds 0 1] [--precision fp32 bf16] [--sft-steps 12]
        [--steps 12] [--out runs/demo_precision] [--results demo_precision]

Each arm is `grpolab demo` (what `make demo` runs, in its own process, timed) on the demo config with
`train.sft_steps`, `train.steps`, `train.precision` = the arm's and `train.sft_precision = "fp32"`: bf16 seeding
already measured worse (benchmarks/seeding.py --precision), so this isolates what bf16 does to the GRPO update.
A run directory that holds a finished run of the same config and seed is read back, not re-run (its wall time from
the benchmark.json written beside it). Reported per arm: held-out success (40 tasks, greedy) at base, after seeding
and after GRPO, the wall minutes and where they went (`grpolab.run.timing`), and the mean step time; per precision,
success after GRPO as the mean over seeds with a 95% bootstrap interval. Writes benchmarks/results/NAME.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import DEMO, bootstrap, solved, write_results

from grpolab.config import load_config
from grpolab.run.timing import phase_seconds
from grpolab.rundir import RunDir
from grpolab.vocabulary import HELDOUT_SUCCESS

OVERRIDDEN = ("sft_steps", "steps", "precision", "sft_precision")


def arm_config(text: str, sft_steps: int, steps: int, precision: str) -> str:
    """The demo config's TOML with the arm's `[train]` settings in place of the file's own."""
    out: list[str] = []
    section = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped
        key = stripped.split("=")[0].strip() if "=" in stripped and not stripped.startswith("#") else ""
        if section == "[train]" and key in OVERRIDDEN:
            continue
        out.append(line)
        if stripped == "[train]":
            out += [f"sft_steps = {sft_steps}", f"steps = {steps}", f'precision = "{precision}"']
            out.append('sft_precision = "fp32"')
    return "\n".join(out) + "\n"


def run_demo(config: Path, seed: int, out: Path) -> float:
    """The wall seconds of `grpolab demo` for this arm: read back where `out` holds its finished run."""
    record = out / "benchmark.json"
    cfg = load_config(config, {"seed": seed})
    run = RunDir(out)
    if record.is_file() and run.is_run() and run.read_config().model_dump() == cfg.model_dump():
        labels = run.eval_labels()
        if labels and labels[-1] == str(cfg.train.steps):
            return float(json.loads(record.read_text())["wall_seconds"])
    start = time.perf_counter()
    command = [sys.executable, "-m", "grpolab.cli", "demo", "--config", str(config), "--seed", str(seed)]
    subprocess.run([*command, "--out", str(out), "--quiet"], check=True)
    wall = time.perf_counter() - start
    record.write_text(json.dumps({"wall_seconds": wall}))
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--precision", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"])
    ap.add_argument("--sft-steps", type=int, default=12)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--out", type=Path, default=Path("runs/demo_precision"))
    ap.add_argument("--results", default="demo_precision", help="results file name (benchmarks/results/NAME.json)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    arms: dict[str, dict[int, dict[str, Any]]] = {p: {} for p in args.precision}
    for precision in args.precision:
        config = args.out / f"{precision}.toml"
        config.write_text(arm_config(DEMO.read_text(), args.sft_steps, args.steps, precision))
        for seed in args.seeds:
            out = args.out / f"{precision}-{seed}"
            wall = run_demo(config, seed, out)
            run = RunDir(out)
            summary, last = run.eval_summary(), run.eval_labels()[-1]
            steps = [m["perf/step_s"] for m in run.metrics() if isinstance(m.get("perf/step_s"), int | float)]
            arms[precision][seed] = {
                "wall_minutes": round(wall / 60, 2),
                "seconds": {k: round(v, 1) for k, v in phase_seconds(run, wall).items()},
                "step_seconds_mean": round(statistics.mean(steps), 1),
                "heldout_success": {k: summary.get(k, {}).get(HELDOUT_SUCCESS) for k in ("base", "0", last)},
                "rows": {r["task_id"]: solved(r) for r in run.eval_rows(last)},
            }
            print(json.dumps({"precision": precision, "seed": seed, **arms[precision][seed]["heldout_success"]}))
    rng = random.Random(0)
    summary_by_precision = {}
    for precision, runs in arms.items():
        seeds = [runs[s] for s in args.seeds]
        summary_by_precision[precision] = {
            "success_after_grpo": bootstrap([s["rows"] for s in seeds], rng),
            "success_after_seeding": statistics.mean(s["heldout_success"]["0"] for s in seeds),
            "wall_minutes": statistics.mean(s["wall_minutes"] for s in seeds),
            "step_seconds": statistics.mean(s["step_seconds_mean"] for s in seeds),
        }
    for runs in arms.values():
        for r in runs.values():
            del r["rows"]
    result = {
        "command": (
            f"python benchmarks/demo_precision.py --seeds {' '.join(map(str, args.seeds))} --precision "
            f"{' '.join(args.precision)} --sft-steps {args.sft_steps} --steps {args.steps} --results {args.results}"
        ),
        "date": time.strftime("%Y-%m-%d"),
        "summary": summary_by_precision,
        "runs": arms,
        "heldout_tasks": 40,
        "config": {"sft_steps": args.sft_steps, "steps": args.steps, "sft_precision": "fp32"},
    }
    print(write_results(args.results, result))
    print(json.dumps(summary_by_precision, indent=2))


if __name__ == "__main__":
    main()
