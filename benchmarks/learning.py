"""Does GRPO do the work? Arms at matched CPU time, several seeds, bootstrap confidence intervals.

    .venv/bin/python benchmarks/learning.py [--seeds 0 1 2] [--config src/grpolab/configs/demo.toml]
                                            [--eval-limit 40] [--steps N] [--full-sft-steps 40] [--arms ...]

Every arm runs the real pipeline (`grpolab.run.loop.train`) on the embedded SmolLM2-135M-Instruct (fp32) with the
given config (default: the demo's, finance pct_change), `--steps` GRPO steps (default: the config's), and is
evaluated greedily on the same `--eval-limit` held-out tasks (a fixed shuffle mixing the config's task kinds;
companies never seen in training) with the strict verifier. A run directory that already holds a finished run of
the same settings is read, not re-run (`--fresh` re-runs it), so an interrupted benchmark resumes. Per seed:
- seeded+grpo: the demo's short SFT seeding, then its GRPO steps;
- sft-matched: the same seeding, then SFT continued for as long as that run's GRPO steps took (CPU time matched:
  extra SFT steps = GRPO seconds / seconds per SFT step, both measured in the seeded+grpo run);
- full-sft+grpo: `--full-sft-steps` SFT steps, then the same GRPO steps;
- seeded+grpo-int8: as seeded+grpo with `rollout.engine = "int8"`.
Reported per arm: held-out success (overall and per task kind) and tool-call probability, each as the mean over
seeds with a 95% bootstrap interval (resampling seeds, then tasks within each seed), the GRPO margin over the
matched SFT-only arm (paired by seed and task) with its interval, wall minutes, and the training curves (reward, KL,
tool-token mass per step). Writes benchmarks/results/NAME.json and NAME.png (`--results`, default learning).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from common import DEMO, bootstrap, results_path, run_arm, solved, write_results

from grpolab.config import load_config

ARMS = ("seeded+grpo", "sft-matched", "full-sft+grpo", "seeded+grpo-int8")


def called(row: dict[str, Any]) -> float:
    """1.0 where an episode row made at least one valid tool call, else 0.0."""
    return 1.0 if row.get("valid_calls", 0) > 0 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--config", type=Path, default=DEMO)
    ap.add_argument("--eval-limit", type=int, default=40)
    ap.add_argument("--steps", type=int, default=None, help="GRPO steps per run (default: the config's)")
    ap.add_argument("--fresh", action="store_true", help="re-run arms whose finished run directory exists")
    ap.add_argument("--full-sft-steps", type=int, default=40)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    ap.add_argument("--out", type=Path, default=Path("runs/learning"))
    ap.add_argument("--results", default="learning", help="name of the results files in benchmarks/results/")
    args = ap.parse_args()
    base_cfg = load_config(args.config)
    common: dict[str, Any] = {
        "train.eval_limit": args.eval_limit,
        "train.eval_every": 0,
        "train.checkpoint_every": 1000,
    }
    if args.steps is not None:
        common["train.steps"] = args.steps
    arms: dict[str, dict[int, dict[str, Any]]] = {arm: {} for arm in args.arms}
    for seed in args.seeds:
        seeded = run_arm(args.config, args.out / f"seeded-grpo-{seed}", {**common, "seed": seed}, args.fresh)
        if "seeded+grpo" in arms:
            arms["seeded+grpo"][seed] = seeded
        if "sft-matched" in arms:
            per_step = seeded["sft_seconds"] / max(seeded["sft_steps"], 1)
            extra = round(seeded["grpo_seconds"] / max(per_step, 1e-9))
            sft_steps = base_cfg.train.sft_steps + extra
            arms["sft-matched"][seed] = run_arm(
                args.config,
                args.out / f"sft-matched-{seed}",
                {**common, "seed": seed, "train.sft_steps": sft_steps, "train.steps": 0},
                args.fresh,
            )
            arms["sft-matched"][seed]["matched_sft_steps"] = sft_steps
        if "full-sft+grpo" in arms:
            overrides = {**common, "seed": seed, "train.sft_steps": args.full_sft_steps}
            arms["full-sft+grpo"][seed] = run_arm(
                args.config, args.out / f"full-sft-grpo-{seed}", overrides, args.fresh
            )
        if "seeded+grpo-int8" in arms:
            overrides = {**common, "seed": seed, "rollout.engine": "int8"}
            out = args.out / f"seeded-grpo-int8-{seed}"
            arms["seeded+grpo-int8"][seed] = run_arm(args.config, out, overrides, args.fresh)
        print(json.dumps({"seed": seed, **{a: r[seed]["after"].get("heldout/success") for a, r in arms.items()}}))
    rng = random.Random(0)
    summary: dict[str, Any] = {}
    for arm, runs in arms.items():
        seeds = [runs[s] for s in args.seeds]
        success = bootstrap([{t: solved(r) for t, r in s["rows"].items()} for s in seeds], rng)
        tool = bootstrap([{t: called(r) for t, r in s["rows"].items()} for s in seeds], rng)
        kinds = sorted({r["kind"] for s in seeds for r in s["rows"].values()})
        by_kind = {}
        for kind in kinds:
            per_seed = [{t: solved(r) for t, r in s["rows"].items() if r["kind"] == kind} for s in seeds]
            by_kind[kind] = bootstrap(per_seed, rng)
        summary[arm] = {
            "success": success,
            "tool_call_prob": tool,
            "success_by_kind": by_kind,
            "seeded_success": statistics.mean(s["before"].get("heldout/success", float("nan")) for s in seeds),
            "seeded_tool_call_prob": statistics.mean(
                s["before"].get("heldout/tool_call_prob", float("nan")) for s in seeds
            ),
            "minutes": statistics.mean(s["minutes"] for s in seeds),
            "per_seed_success": [s["after"]["heldout/success"] for s in seeds],
        }
    result: dict[str, Any] = {"arms": summary, "heldout_tasks": args.eval_limit, "seeds": args.seeds}
    if "seeded+grpo" in arms and "sft-matched" in arms:
        paired = []
        for s in args.seeds:
            grpo, sft = arms["seeded+grpo"][s]["rows"], arms["sft-matched"][s]["rows"]
            paired.append({t: solved(grpo[t]) - solved(sft[t]) for t in grpo if t in sft})
        result["grpo_margin_over_matched_sft"] = bootstrap(paired, rng)
        result["matched_sft_steps"] = [arms["sft-matched"][s]["matched_sft_steps"] for s in args.seeds]
    result["curves"] = {arm: {s: runs[s]["curves"] for s in args.seeds} for arm, runs in arms.items()}
    result["date"] = time.strftime("%Y-%m-%d")
    flags = []
    for key, value in vars(args).items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, Path) and value.is_absolute() and value.is_relative_to(Path.cwd()):
            value = value.relative_to(Path.cwd())
        if value is True:
            flags.append(flag)
        elif value not in (None, False):
            flags.append(f"{flag} {' '.join(map(str, value)) if isinstance(value, list) else value}")
    result["command"] = "python benchmarks/learning.py " + " ".join(flags)
    write_results(args.results, result, default=str)
    plot(result, results_path(args.results, ".png"))
    print(json.dumps({k: v for k, v in result.items() if k != "curves"}, indent=2, default=str))


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(result["arms"])
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for i, metric in enumerate(("success", "tool_call_prob")):
        ax = axes[i]
        points = [result["arms"][a][metric] for a in arms]
        ax.bar(range(len(arms)), [p[0] for p in points], color="#4c72b0")
        lower = [p[0] - p[1] for p in points]
        upper = [p[2] - p[0] for p in points]
        ax.errorbar(range(len(arms)), [p[0] for p in points], yerr=[lower, upper], fmt="none", color="black")
        # the seeded model GRPO starts from (an SFT-only arm's step-0 evaluation is after all of its SFT)
        starts = [result["arms"][a][f"seeded_{metric}"] for a in arms if "grpo" in a]
        if starts:
            ax.axhline(statistics.mean(starts), color="#c44e52", linestyle="--", label="after seeding")
        ax.set_xticks(range(len(arms)), arms, rotation=20, fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title(f"held-out {metric} ({result['heldout_tasks']} tasks, 95% CI)", fontsize=9)
        ax.legend(fontsize=7)
    ax = axes[2]
    for arm in arms:
        for s, curves in result["curves"][arm].items():
            ys = [y for y in curves["reward/mean"] if isinstance(y, (int, float))]
            if ys:
                ax.plot(range(1, len(ys) + 1), ys, label=f"{arm} seed {s}", linewidth=1)
    ax.set_title("training reward per GRPO step", fontsize=9)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
