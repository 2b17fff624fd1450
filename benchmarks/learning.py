"""The headline: does the agent really get better? Base, SFT-only, SFT+GRPO and GRPO-only on finance.

    .venv/bin/python benchmarks/learning.py [--seeds 0 1] [--sft-steps 40] [--grpo-steps 3] [--eval-limit 16]
                                            [--group-sizes 2 8 16] [--g-steps 2] [--grpo-only-steps 1]

Every arm runs the real pipeline (`grpolab.engine.loop.train`) on the embedded SmolLM2-135M-Instruct, fp32, finance
pct_change, and is evaluated greedily on the same held-out tasks with the strict verifier. Per seed:
- base: the model as shipped (greedy, so measured once);
- SFT-only: after `--sft-steps` warm-start steps (the step-0 evaluation of the SFT+GRPO run);
- SFT+GRPO: the same SFT, then `--grpo-steps` GRPO steps;
Then GRPO-only: `--grpo-only-steps` GRPO steps from the base model (no warm start), and the group-size experiment
at an equal sample budget per step (G x prompts = 16): G = 2, 8, 16, all from the first seed's SFT warm start
(`train(..., warm_start=)`), `--g-steps` steps each, reporting frac_zero_std and held-out success.
Wall-clock minutes are measured per arm. Writes benchmarks/results/learning.json and learning.png.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

from grpolab.config import load_config
from grpolab.rundir import RunDir

RESULTS = Path(__file__).parent / "results"
BASE = {
    "model": "smollm2",
    "env": "finance",
    "task_kinds": ["pct_change"],
    "rollout.max_new_tokens": 160,
    "rollout.max_turns": 2,
    "train.eval_every": 0,
    "train.checkpoint_every": 100,
    "train.episodes_per_step_logged": 0,
}
SAMPLES_PER_STEP = 16


def run_arm(out: Path, overrides: dict, warm_start: Path | None = None) -> dict:
    from grpolab.engine.loop import train

    if out.exists():
        shutil.rmtree(out)
    cfg = load_config(None, {**BASE, **overrides})
    t0 = time.perf_counter()
    train(cfg, out, quiet=True, warm_start=warm_start)
    minutes = (time.perf_counter() - t0) / 60
    summary = json.loads((out / "eval" / "summary.json").read_text())
    metrics = RunDir(out).metrics()
    return {"minutes": minutes, "evals": summary, "metrics": metrics}


def heldout(summary: dict, label: str) -> dict:
    s = summary[label]
    return {k: s[f"heldout/{k}"] for k in ("success", "tool_call_prob", "schema")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--sft-steps", type=int, default=40)
    ap.add_argument("--grpo-steps", type=int, default=3)
    ap.add_argument("--eval-limit", type=int, default=16)
    ap.add_argument("--group-sizes", type=int, nargs="*", default=[2, 8, 16])
    ap.add_argument("--g-steps", type=int, default=2)
    ap.add_argument("--grpo-only-steps", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("runs/learning"))
    args = ap.parse_args()
    common = {"train.eval_limit": args.eval_limit, "train.sft_steps": args.sft_steps}
    result: dict = {"seeds": {}, "group_size": {}, "settings": vars(args) | {"out": str(args.out)}}
    for i, seed in enumerate(args.seeds):
        full = run_arm(args.out / f"sft_grpo-{seed}", {**common, "seed": seed, "train.steps": args.grpo_steps})
        result["seeds"][seed] = {
            "sft_only": heldout(full["evals"], "0"),
            "sft_grpo": heldout(full["evals"], str(args.grpo_steps)),
            "minutes_sft_grpo_total": full["minutes"],
            "train_reward": [m.get("reward/mean") for m in full["metrics"]],
            "train_success": [m.get("success") for m in full["metrics"]],
        }
        if i == 0:  # greedy evaluation of the shipped model does not depend on the seed: measured once
            result["base"] = heldout(full["evals"], "base")
        print(json.dumps({"seed": seed, **result["seeds"][seed]}), flush=True)
    seed0 = args.seeds[0]
    grpo_only = run_arm(
        args.out / "grpo_only", {**common, "seed": seed0, "train.sft_steps": 0, "train.steps": args.grpo_only_steps}
    )
    result["grpo_only"] = {
        **heldout(grpo_only["evals"], str(args.grpo_only_steps)),
        "frac_zero_std": statistics.mean(m.get("frac_zero_std", 1.0) for m in grpo_only["metrics"]),
        "train_tool_call_prob": statistics.mean(m.get("tool_call_prob", 0.0) for m in grpo_only["metrics"]),
        "minutes": grpo_only["minutes"],
    }
    print(json.dumps({"grpo_only": result["grpo_only"]}), flush=True)
    for G in args.group_sizes:  # all from seed 0's SFT warm start, equal samples per step
        r = run_arm(
            args.out / f"g{G}",
            {
                **common,
                "seed": seed0,
                "rollout.group_size": G,
                "train.prompts_per_step": SAMPLES_PER_STEP // G,
                "train.steps": args.g_steps,
            },
            warm_start=args.out / f"sft_grpo-{seed0}",
        )
        result["group_size"][G] = {
            "prompts_per_step": SAMPLES_PER_STEP // G,
            "frac_zero_std": statistics.mean(m.get("frac_zero_std", 1.0) for m in r["metrics"]),
            "heldout_success_after": heldout(r["evals"], str(args.g_steps))["success"],
            "heldout_success_before": heldout(r["evals"], "0")["success"],
            "minutes": r["minutes"],
        }
        print(json.dumps({"G": G, **result["group_size"][G]}), flush=True)
    seeds = list(result["seeds"].values())
    margins = [s["sft_grpo"]["success"] - s["sft_only"]["success"] for s in seeds]
    result["headline"] = {
        "sft_grpo_success_mean": statistics.mean(s["sft_grpo"]["success"] for s in seeds),
        "sft_only_success_mean": statistics.mean(s["sft_only"]["success"] for s in seeds),
        "grpo_margin_mean": statistics.mean(margins),
        "grpo_margin_per_seed": margins,
        "minutes_sft_grpo_mean": statistics.mean(s["minutes_sft_grpo_total"] for s in seeds),
        "heldout_tasks": args.eval_limit,
    }
    result["date"] = time.strftime("%Y-%m-%d")
    result["command"] = "python benchmarks/learning.py " + " ".join(
        f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in vars(args).items()
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "learning.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    plot(result, RESULTS / "learning.png")
    print(json.dumps(result["headline"], indent=2))


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = ["base", "sft_only", "sft_grpo", "grpo_only"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    seeds = list(result["seeds"].values())
    for i, metric in enumerate(("success", "tool_call_prob", "schema")):
        vals = [
            [result["base"][metric]],
            [s["sft_only"][metric] for s in seeds],
            [s["sft_grpo"][metric] for s in seeds],
            [result["grpo_only"][metric]],
        ]
        means = [statistics.mean(v) for v in vals]
        axes[0].bar([x + i * 0.27 for x in range(len(arms))], means, width=0.27, label=metric)
        for x, v in enumerate(vals):
            axes[0].scatter([x + i * 0.27] * len(v), v, color="black", s=8, zorder=3)
    axes[0].set_xticks([x + 0.27 for x in range(len(arms))], arms)
    axes[0].set_ylim(0, 1.05)
    axes[0].set_title("held-out (finance pct_change), per seed dots")
    axes[0].legend(fontsize=8)
    gs = sorted(result["group_size"], key=int)
    axes[1].plot(gs, [result["group_size"][g]["frac_zero_std"] for g in gs], "o-", label="frac_zero_std")
    axes[1].plot(gs, [result["group_size"][g]["heldout_success_after"] for g in gs], "s-", label="held-out success")
    axes[1].set_xlabel(f"G (G x prompts = {SAMPLES_PER_STEP})")
    axes[1].set_ylim(0, 1.05)
    axes[1].set_title("group size at equal sample budget")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
