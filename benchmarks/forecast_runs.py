"""Real GRPO runs at the demo's shape that a forecast is scored on: several reward weightings, 2+ seeds each.

    .venv/bin/python benchmarks/forecast_runs.py [--configs demo no_completion format_heavy] [--seeds 0 1]
                                                 [--steps 12] [--out runs/forecast_runs] [--fresh]

Each run is the real pipeline (`grpolab.run.loop.train`) on the embedded SmolLM2-135M-Instruct with the demo's
config (`configs/demo.toml`: finance pct_change, G=8 x 2 prompts = 16 episodes a step, 160 new tokens, lr 5e-4,
beta 0.02) and only its reward weights changed (`FORECAST_CONFIGS`). Every run starts from one shared SFT seeding
(the demo's 10 steps, seed 0), so the runs of one config differ only by the sampling seed and the runs of one seed
only by the reward. Every episode of every step is logged.

**The benchmark grows.** Each finished run is recorded in benchmarks/results/forecast_runs.json under "runs": its
weights, its per-step class shares (16 episodes a step), every episode in short form (group, class, unweighted
components, tokens) and the first step's transcripts (the pilot a forecast may read), plus held-out success at the
end (16 tasks, greedy). A run already in the file is not re-run (`--fresh` re-runs the ones asked for); the file is
written after every run. `benchmarks/forecast_scoring.py` scores forecasts on it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from common import DEMO, results_path, solved, write_results

from grpolab.behaviour import CLASSES, class_shares, classify_episode
from grpolab.config import load_config
from grpolab.rundir import RunDir

DEMO_WEIGHTS = {"format": 1.0, "schema": 1.5, "completion": 3.0, "length": -0.05}
FORECAST_CONFIGS: dict[str, dict[str, float]] = {
    "demo": DEMO_WEIGHTS,
    "no_completion": {**DEMO_WEIGHTS, "completion": 0.0},
    "format_heavy": {**DEMO_WEIGHTS, "format": 3.0},
    "length_heavy": {**DEMO_WEIGHTS, "length": -1.0},
    "schema_only": {"format": 0.0, "schema": 1.0, "completion": 0.0, "length": -0.05},
}
"""Config name -> the reward weights of its runs (everything else is the demo's)."""
SEEDING_STEPS = 10
HELDOUT_TASKS = 16
EPISODE_FIELDS = ("group", "task_id", "total", "components", "tokens", "valid_calls")
TEXT_STEPS = (1,)
"""Steps whose transcripts are kept in full: the first step is the pilot (samples of the starting policy)."""
NAME = "forecast_runs"
METRIC_FIELDS = ("reward/mean", "kl", "success", "entropy", "tool_call_prob", "completion_len")
"""The trainer's per-step metrics kept beside the class shares (the forecast's reward and KL curves are scored on
them)."""


def overrides(weights: dict[str, float], seed: int, steps: int) -> dict[str, Any]:
    return {
        "seed": seed,
        "train.steps": steps,
        "train.sft_steps": SEEDING_STEPS,
        "train.eval_every": 0,
        "train.eval_limit": HELDOUT_TASKS,
        "train.checkpoint_every": 1000,
        "train.episodes_per_step_logged": 64,
        "reward.weights": weights,
    }


def seeding(out: Path) -> Path:
    """The SFT seeding every run starts from (the demo's 10 steps, seed 0, no GRPO step)."""
    from grpolab.run.loop import train

    path = out / "seeding-demo"
    if (path / "sft" / "trainable.pt").is_file():
        return path
    if path.exists():
        shutil.rmtree(path)
    cfg = load_config(DEMO, {**overrides(DEMO_WEIGHTS, 0, 0)})
    train(cfg, path, quiet=True, eval_base=False)
    return path


def run_one(config: str, seed: int, steps: int, out: Path) -> tuple[Path, float]:
    from grpolab.run.loop import train

    path = out / f"{config}-{seed}"
    if path.exists():
        shutil.rmtree(path)
    warm = seeding(out)
    cfg = load_config(DEMO, overrides(FORECAST_CONFIGS[config], seed, steps))
    start = time.perf_counter()
    train(cfg, path, quiet=True, eval_base=False, warm_start=warm)
    return path, (time.perf_counter() - start) / 60


def record(path: Path, config: str, seed: int, minutes: float) -> dict[str, Any]:
    """A finished run as the results file keeps it."""
    run = RunDir(path)
    cfg = run.read_config()
    by_step: dict[int, list[dict[str, Any]]] = {}
    for row in run.episodes():
        if isinstance(row.get("step"), int):
            by_step.setdefault(row["step"], []).append(row)
    episodes = {
        str(s): [
            {
                **{k: e.get(k) for k in EPISODE_FIELDS},
                "class": classify_episode(e, True),
                **({"text": e.get("text", ""), "reasons": e.get("reasons", {})} if s in TEXT_STEPS else {}),
            }
            for e in eps
        ]
        for s, eps in sorted(by_step.items())
    }
    final = sorted((p for p in (path / "eval").glob("*.jsonl") if p.stem.isdigit()), key=lambda p: int(p.stem))
    heldout_rows = [json.loads(x) for x in final[-1].read_text().splitlines() if x] if final else []
    return {
        "config": config,
        "seed": seed,
        "weights": cfg.reward.weights,
        "steps": cfg.train.steps,
        "group_size": cfg.rollout.group_size,
        "prompts_per_step": cfg.train.prompts_per_step,
        "minutes": round(minutes, 2),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "shares": {str(s): class_shares(eps, True) for s, eps in sorted(by_step.items())},
        "metrics": {
            str(m["step"]): {k: m[k] for k in METRIC_FIELDS if isinstance(m.get(k), (int, float))}
            for m in run.metrics()
            if isinstance(m.get("step"), int) and not m.get("skipped")
        },
        "episodes": episodes,
        "heldout": {
            "n": len(heldout_rows),
            "success": sum(solved(r) for r in heldout_rows) / max(len(heldout_rows), 1),
            "shares": class_shares(heldout_rows, True),
        },
    }


def load_runs() -> dict[str, Any]:
    path = results_path(NAME)
    return json.loads(path.read_text()).get("runs", {}) if path.is_file() else {}


def save(runs: dict[str, Any], command: str) -> Path:
    return write_results(
        NAME,
        {
            "date": time.strftime("%Y-%m-%d"),
            "command": command,
            "classes": CLASSES,
            "configs": {k: FORECAST_CONFIGS[k] for k in sorted({r["config"] for r in runs.values()})},
            "runs": dict(sorted(runs.items())),
        },
        indent=1,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=["demo", "no_completion", "format_heavy"], choices=FORECAST_CONFIGS)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--out", type=Path, default=Path("runs/forecast_runs"))
    ap.add_argument("--fresh", action="store_true", help="re-run runs already recorded")
    ap.add_argument(
        "--record-only", action="store_true", help="re-read the recorded runs' folders under --out (no training)"
    )
    args = ap.parse_args()
    command = (
        f"python benchmarks/forecast_runs.py --configs {' '.join(args.configs)} "
        f"--seeds {' '.join(map(str, args.seeds))} --steps {args.steps}"
    )
    runs = load_runs()
    if args.record_only:
        for key, rec in runs.items():
            if (args.out / key).is_dir():
                runs[key] = {
                    **record(args.out / key, rec["config"], rec["seed"], rec["minutes"]),
                    "recorded_at": rec["recorded_at"],
                }
        save(runs, json.loads(results_path(NAME).read_text()).get("command", command))
        return
    for seed in args.seeds:
        for config in args.configs:
            key = f"{config}-{seed}"
            if key in runs and not args.fresh:
                print(f"{key}: recorded, skipped", flush=True)
                continue
            path, minutes = run_one(config, seed, args.steps, args.out)
            runs[key] = record(path, config, seed, minutes)
            save(runs, command)
            first, last = runs[key]["shares"]["1"], runs[key]["shares"][str(args.steps)]
            moved = {c: round(last[c] - first[c], 2) for c in CLASSES if abs(last[c] - first[c]) > 0.1}
            print(
                f"{key}: {minutes:.1f} min, held-out {runs[key]['heldout']['success']:.0%}, moves {moved}", flush=True
            )


if __name__ == "__main__":
    main()
