"""Where does GRPO earn its keep? Task kinds with a verifier but no references, and tools never trained on.

    .venv/bin/python benchmarks/learning_transfer.py [--seeds 0 1 2] [--steps 10] [--per-kind 20]
                                                     [--arms ...] [--out runs/learning_transfer]

Issue 26's settings 1 and 2, on finance (the demo's config otherwise: model, G, LoRA, GRPO settings, seeding steps).
References exist only for pct_change; revenue_growth and eps_surprise have their verifier and no reference. Per seed:
- grpo-all-kinds: seeding on pct_change references (`train.sft_mix = {pct_change = 1}`), then GRPO on all three kinds;
- sft-matched: the same seeding, then SFT on pct_change for as long as that run's GRPO took (CPU time matched, as in
  benchmarks/learning.py: extra SFT steps = GRPO seconds / seconds per SFT step, both measured in grpo-all-kinds);
- grpo-pct: seeding then GRPO on pct_change only (the demo's arm);
- oracle-sft: SFT on references of all three kinds for the matched time: what the missing references are worth.
Every arm's final policy is evaluated greedily, with the strict verifier, on `--per-kind` held-out tasks of each kind
(companies never seen in training) on `finance` and on `finance_shifted` (the same tasks behind renamed tools,
renamed arguments and another response layout, never trained on). Reported per arm, environment and kind: success
as the mean over seeds with a 95% bootstrap interval (seeds, then tasks), and GRPO's margin over matched SFT paired
by seed and task. Finished runs and evaluations are read back (`--fresh` re-runs). Writes
benchmarks/results/NAME.json and NAME.png (`--results`, default learning_transfer).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from learning import DEMO, RESULTS, bootstrap, run_arm, solved

from grpolab.config import load_config

KINDS = ["pct_change", "revenue_growth", "eps_surprise"]
ENVS = ["finance", "finance_shifted"]
ARMS = ("grpo-all-kinds", "sft-matched", "grpo-pct", "oracle-sft")
SEEDED_ON_PCT = {"train.sft_mix": {"pct_change": 1.0}}


def final_policy(path: Path) -> tuple[Any, Any]:
    """The run's policy after training: its newest checkpoint, or its SFT warm start when it ran no GRPO step."""
    from grpolab.engine.policy import build_policy, load_run_policy
    from grpolab.rundir import RunDir

    run = RunDir(path)
    if run.checkpoints():
        return load_run_policy(path)[:2]
    model, tokenizer, _ = build_policy(run.read_config(), run.warm_start())
    return model, tokenizer


def transfer_eval(path: Path, per_kind: int, fresh: bool) -> dict[str, dict[str, dict[str, Any]]]:
    """{env: {task_id: row}} of the run's final policy on `per_kind` held-out tasks of each kind, on each env."""
    from grpolab.engine.evaluate import evaluate
    from grpolab.envs import env_for
    from grpolab.metrics import episode_row
    from grpolab.rundir import RunDir

    done = path / "transfer_eval.json"
    if not fresh and done.is_file():
        saved = json.loads(done.read_text())
        if saved.get("per_kind") == per_kind:
            return saved["rows"]
    model, tokenizer = final_policy(path)
    cfg = RunDir(path).read_config()
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for env_name in ENVS:
        rows[env_name] = {}
        for kind in KINDS:
            env = env_for(cfg.model_copy(update={"env": env_name, "task_kinds": [kind]}))
            _, episodes = evaluate(model, tokenizer, env, cfg, "heldout", per_kind)
            rows[env_name].update({e.task.id: episode_row(e) for e in episodes})
    done.write_text(json.dumps({"per_kind": per_kind, "rows": rows}))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--config", type=Path, default=DEMO)
    ap.add_argument("--steps", type=int, default=10, help="GRPO steps of the GRPO arms")
    ap.add_argument("--per-kind", type=int, default=20, help="held-out tasks per kind and environment")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("runs/learning_transfer"))
    ap.add_argument("--results", default="learning_transfer")
    args = ap.parse_args()
    seeding = load_config(args.config).train.sft_steps
    common: dict[str, Any] = {
        "train.eval_limit": 1,  # the run's own end-of-run evaluation; the arms are compared on transfer_eval
        "train.eval_every": 0,
        "train.checkpoint_every": 1000,
        "train.steps": args.steps,
    }
    arms: dict[str, dict[int, dict[str, Any]]] = {arm: {} for arm in args.arms}
    for seed in args.seeds:
        runs: dict[str, Path] = {}
        grpo_all = {**common, **SEEDED_ON_PCT, "seed": seed, "task_kinds": KINDS}
        needs_timing = {"grpo-all-kinds", "sft-matched", "oracle-sft"} & set(args.arms)
        if needs_timing:
            runs["grpo-all-kinds"] = args.out / f"grpo-all-kinds-{seed}"
            timed = run_arm(args.config, runs["grpo-all-kinds"], grpo_all, args.fresh)
            per_step = timed["sft_seconds"] / max(timed["sft_steps"], 1)
            matched = seeding + round(timed["grpo_seconds"] / max(per_step, 1e-9))
            sft_only = {**common, "seed": seed, "task_kinds": KINDS, "train.steps": 0, "train.sft_steps": matched}
            if "sft-matched" in args.arms:
                runs["sft-matched"] = args.out / f"sft-matched-{seed}"
                run_arm(args.config, runs["sft-matched"], {**sft_only, **SEEDED_ON_PCT}, args.fresh)
            if "oracle-sft" in args.arms:
                runs["oracle-sft"] = args.out / f"oracle-sft-{seed}"
                run_arm(args.config, runs["oracle-sft"], sft_only, args.fresh)
        if "grpo-pct" in args.arms:
            runs["grpo-pct"] = args.out / f"grpo-pct-{seed}"
            run_arm(args.config, runs["grpo-pct"], {**common, "seed": seed, "task_kinds": ["pct_change"]}, args.fresh)
        for arm in args.arms:
            arms[arm][seed] = transfer_eval(runs[arm], args.per_kind, args.fresh)
        print(json.dumps({"seed": seed, "done": sorted(runs)}))
    result = summarise(arms, args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.results}.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, RESULTS / f"{args.results}.png")
    print(json.dumps(result["success"], indent=1))


def summarise(arms: dict[str, dict[int, dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(0)
    success: dict[str, dict[str, dict[str, list[float]]]] = {}
    margin: dict[str, dict[str, list[float]]] = {}
    for arm, per_seed in arms.items():
        success[arm] = {}
        for env in ENVS:
            success[arm][env] = {}
            for kind in [*KINDS, "all"]:
                samples = [
                    {t: solved(r) for t, r in per_seed[s][env].items() if kind in ("all", r["kind"])}
                    for s in args.seeds
                ]
                success[arm][env][kind] = list(bootstrap(samples, rng))
    if {"grpo-all-kinds", "sft-matched"} <= set(arms):
        grpo, sft = arms["grpo-all-kinds"], arms["sft-matched"]
        for env in ENVS:
            margin[env] = {}
            for kind in [*KINDS, "all"]:
                paired = [
                    {
                        t: solved(r) - solved(sft[s][env][t])
                        for t, r in grpo[s][env].items()
                        if kind in ("all", r["kind"]) and t in sft[s][env]
                    }
                    for s in args.seeds
                ]
                margin[env][kind] = list(bootstrap(paired, rng))
    return {
        "success": success,
        "grpo_margin_over_matched_sft": margin,
        "seeds": args.seeds,
        "per_kind": args.per_kind,
        "grpo_steps": args.steps,
        "command": "python benchmarks/learning_transfer.py "
        + ("" if args.config == DEMO else f"--config {args.config} ")
        + f"--seeds {' '.join(map(str, args.seeds))} --steps {args.steps} --per-kind {args.per_kind} "
        + f"--arms {' '.join(args.arms)}",
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(result["success"])
    fig, axes = plt.subplots(1, len(ENVS), figsize=(6 * len(ENVS), 3.8), sharey=True)
    width = 0.8 / len(arms)
    for ax, env in zip(axes, ENVS):
        for i, arm in enumerate(arms):
            points = [result["success"][arm][env][k] for k in [*KINDS, "all"]]
            xs = [x + i * width for x in range(len(points))]
            ax.bar(xs, [p[0] for p in points], width, label=arm)
            ax.errorbar(
                xs,
                [p[0] for p in points],
                yerr=[[p[0] - p[1] for p in points], [p[2] - p[0] for p in points]],
                fmt="none",
                color="black",
                linewidth=0.8,
            )
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(KINDS) + 1)], [*KINDS, "all"], fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title(f"held-out success on {env} ({result['per_kind']} per kind, 95% CI)", fontsize=9)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
