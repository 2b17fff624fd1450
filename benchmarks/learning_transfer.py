"""Where does GRPO earn its keep? Kinds with a verifier but no references, tools never trained on, BFCL's live
categories, and retention.

    .venv/bin/python benchmarks/learning_transfer.py [--setting finance|bfcl] [--seeds 0 1 2] [--steps 10]
                                                     [--per-kind 20] [--arms ...] [--out runs/learning_transfer]

Issue 26's settings, each a config and the held-out evaluations its arms are compared on:
- `finance` (settings 1 and 2; the demo's config with 3 turns and 224 new tokens, which revenue_growth's three calls
  need; otherwise the demo's model, G, LoRA, GRPO settings, seeding steps).
  References exist only for pct_change; revenue_growth and eps_surprise have their verifier and no reference.
  Evaluated on `--per-kind` held-out tasks of each kind (companies never seen in training) on `finance` and on
  `finance_shifted` (the same tasks behind renamed tools, renamed arguments and another response layout, never
  trained on). Arms per seed:
  - grpo-all-kinds: seeding on pct_change references (`train.sft_mix = {pct_change = 1}`), then GRPO on all three;
  - sft-matched: the same seeding, then SFT on pct_change for as long as that run's GRPO took (CPU time matched, as
    in benchmarks/learning.py: extra SFT steps = GRPO seconds / seconds per SFT step, both measured in
    grpo-all-kinds);
  - grpo-pct: seeding then GRPO on pct_change only (the demo's arm);
  - oracle-sft: SFT on references of all three kinds for the matched time: what the missing references are worth.
- `bfcl` (setting 3, the ToolRL setting): the shipped BFCL recipe (src/grpolab/configs/bfcl.toml: the five
  non-live categories, its warm start on single-call answers). grpo-all-kinds is the recipe's warm start then
  GRPO on all five; sft-matched the same warm start then SFT on the ground-truth calls for the GRPO run's time
  (the recipe's mix, simple_python and multiple: the SFT arm never sees irrelevance's no-call answers, which GRPO's
  reward pays for, so the margin on irrelevance measures who had that signal as much as the method).
  Evaluated on `--per-kind` held-out tasks of simple_python and irrelevance and of live_simple and live_multiple
  (real user queries, never trained on).
In both settings a warm-start arm trains nothing: it is grpo-all-kinds' SFT warm start, evaluated like the others,
so a reader sees what each seed's arms started from (a capability lost there is lost to all of them).
Every arm's final policy is evaluated greedily with the strict verifier, and for retention (setting 4) on
`capitals`: 40 capital-city questions in a plain chat turn, a skill the base model has (70% greedy) and tool-use
training can erode. The forward KL to the base model is measured on the run's own training prompts: completions
sampled from the trained policy (`--kl-prompts` prompts x 2), mean over policy tokens of log pi_trained - log
pi_base on them. Reported per arm, environment and kind: success as the mean over seeds with a 95% bootstrap
interval (seeds, then tasks), GRPO's margin over matched SFT paired by seed and task (retention too), retention
and KL per run. Finished runs and evaluations are read back (`--fresh` re-runs). Writes
benchmarks/results/NAME.json and NAME.png (`--results`, default learning_transfer, learning_transfer_bfcl).
The JSON keeps every evaluated task's verdict per arm and seed (`solved`), since run directories do not outlive a
machine: `--add-seeds` runs only the seeds it names and summarises them with the seeds already in NAME.json, paired
task by task as if all had run in one go (the command recorded is the one that would rerun them all).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import DEMO, bootstrap, results_path, run_arm, solved, write_results

from grpolab.config import load_config
from grpolab.models import load_model

KINDS = ["pct_change", "revenue_growth", "eps_surprise"]
ENVS = ["finance", "finance_shifted"]
RETENTION = "capitals"
WARM_START = "warm-start"
"""Not trained: grpo-all-kinds' SFT warm start, the policy both of that seed's GRPO and matched-SFT arms start from."""
ARMS = ("grpo-all-kinds", "sft-matched", "grpo-pct", "oracle-sft", WARM_START)
SEEDED_ON_PCT = {"train.sft_mix": {"pct_change": 1.0}}
BFCL = DEMO.parent / "bfcl.toml"


@dataclass(frozen=True)
class Setting:
    config: Path
    evals: list[tuple[str, str]]
    """(environment, task kind) pairs every arm is evaluated on, `--per-kind` held-out tasks each."""
    seeding: dict[str, Any] = field(default_factory=dict)
    """Overrides of the GRPO and matched-SFT arms: the references they seed on and the kinds they train on."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Overrides of every arm and of the base model's evaluation."""
    arms: tuple[str, ...] = ("grpo-all-kinds", "sft-matched", WARM_START)
    results: str = "learning_transfer"


SETTINGS = {
    "finance": Setting(
        DEMO,
        [(env, kind) for env in ENVS for kind in KINDS],
        {**SEEDED_ON_PCT, "task_kinds": KINDS},
        # revenue_growth takes three calls (two searches, the calculator) and its references 178-182 policy tokens:
        # under the demo's 2 turns and 160 tokens it could not be solved at all
        {"rollout.max_turns": 3, "rollout.max_new_tokens": 224},
        ARMS,
    ),
    "bfcl": Setting(
        BFCL,
        [("bfcl", k) for k in ("simple_python", "irrelevance", "live_simple", "live_multiple")],
        results="learning_transfer_bfcl",
    ),
}


def retention_rows(model: Any, tokenizer: Any, cfg: Any) -> dict[str, dict[str, Any]]:
    """{task_id: row} of a policy on every held-out `capitals` question, under the run's rollout settings."""
    from grpolab.engine.evaluate import evaluate
    from grpolab.envs import env_for
    from grpolab.metrics import episode_row

    env = env_for(cfg.model_copy(update={"env": RETENTION, "task_kinds": []}))
    _, episodes = evaluate(model, tokenizer, env, cfg, "heldout", len(env.tasks("heldout")))
    return {e.task.id: episode_row(e) for e in episodes}


def kl_to_base(model: Any, tokenizer: Any, cfg: Any, base: Any, prompts: int) -> float:
    """Mean over policy tokens of log pi(y) - log pi_base(y), y sampled from pi on the run's training prompts."""
    import torch

    from grpolab.engine.evaluate import eval_tasks
    from grpolab.engine.logprobs import make_batch, token_logprobs
    from grpolab.engine.rollout import run_episodes, sampling_settings
    from grpolab.envs import env_for

    env = env_for(cfg)
    generator = torch.Generator().manual_seed(cfg.seed)
    episodes = run_episodes(
        model, tokenizer, env, eval_tasks(env, "train", prompts), 2, sampling_settings(cfg), generator
    )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    total = tokens = 0.0
    with torch.no_grad():
        for e in episodes:
            batch = make_batch([e.prompt_ids], [e.completion_ids], [e.mask], pad)
            diff = (token_logprobs(model, batch) - token_logprobs(base, batch)) * batch.mask
            total += float(diff.sum())
            tokens += float(batch.mask.sum())
    return total / max(tokens, 1.0)


def transfer_eval(
    path: Path,
    evals: list[tuple[str, str]],
    per_kind: int,
    kl_prompts: int,
    base: Any,
    fresh: bool,
    warm_start: bool = False,
) -> dict[str, Any]:
    """The run's final policy (its SFT warm start with `warm_start`): {"rows": {env: {task_id: row}}} on `per_kind`
    held-out tasks of each (env, kind) in `evals` and on every retention question, and its "kl" to the base model."""
    from grpolab.engine.evaluate import evaluate
    from grpolab.engine.policy import build_policy, load_run_policy
    from grpolab.envs import env_for
    from grpolab.metrics import episode_row
    from grpolab.rundir import RunDir

    done = path / ("warm_start_eval.json" if warm_start else "transfer_eval.json")
    settings = {"per_kind": per_kind, "kl_prompts": kl_prompts}
    if not fresh and done.is_file():
        saved = json.loads(done.read_text())
        covered = {(env, r["kind"]) for env, rows in saved.get("rows", {}).items() for r in rows.values()}
        if saved.get("settings") == settings and set(evals) <= covered:
            return saved
    cfg = RunDir(path).read_config()
    if warm_start:
        model, tokenizer, _ = build_policy(cfg, RunDir(path).warm_start())
    else:
        model, tokenizer = load_run_policy(path)[:2]  # SFT-only runs have checkpoint 0
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for env_name, kind in evals:
        env = env_for(cfg.model_copy(update={"env": env_name, "task_kinds": [kind]}))
        _, episodes = evaluate(model, tokenizer, env, cfg, "heldout", per_kind)
        rows.setdefault(env_name, {}).update({e.task.id: episode_row(e) for e in episodes})
    rows[RETENTION] = retention_rows(model, tokenizer, cfg)
    result = {"settings": settings, "rows": rows, "kl": kl_to_base(model, tokenizer, cfg, base, kl_prompts)}
    done.write_text(json.dumps(result))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setting", choices=sorted(SETTINGS), default="finance")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--config", type=Path, help="default: the setting's (the demo's; the BFCL recipe)")
    ap.add_argument("--steps", type=int, default=10, help="GRPO steps of the GRPO arms")
    ap.add_argument("--per-kind", type=int, default=20, help="held-out tasks per kind and environment")
    ap.add_argument("--kl-prompts", type=int, default=8, help="training prompts (x 2 samples) for the KL to the base")
    ap.add_argument("--arms", nargs="+", choices=ARMS, help="default: all of the setting's")
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override of every arm, e.g. train.sft_learning_rate=2.5e-4 (VALUE read as JSON, else text)",
    )
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument(
        "--add-seeds",
        action="store_true",
        help="summarise --seeds with the seeds already in benchmarks/results/NAME.json (same command otherwise)",
    )
    ap.add_argument("--out", type=Path, help="default: runs/learning_transfer (finance), runs/learning_transfer_bfcl")
    ap.add_argument("--results", help="default: learning_transfer (finance), learning_transfer_bfcl")
    args = ap.parse_args()
    setting = SETTINGS[args.setting]
    args.config = args.config or setting.config
    args.arms = args.arms or list(setting.arms)
    args.results = args.results or setting.results
    args.out = args.out or Path("runs") / setting.results
    if not set(args.arms) <= set(setting.arms):
        ap.error(f"--arms: the {args.setting} setting has {', '.join(setting.arms)}")
    extra = dict(parse_override(ap, o) for o in args.overrides)
    earlier = earlier_seeds(ap, args) if args.add_seeds else {}  # refused before any model is loaded
    base_cfg = load_config(args.config, {**setting.overrides, **extra})
    seeding = base_cfg.train.sft_steps
    base, base_tokenizer = load_model(base_cfg.model, seed=0)
    base_retention = retention_rows(base, base_tokenizer, base_cfg)
    common: dict[str, Any] = {
        "train.eval_limit": 1,  # the run's own end-of-run evaluation; the arms are compared on transfer_eval
        "train.eval_every": 0,
        "train.checkpoint_every": 1000,
        "train.steps": args.steps,
        **setting.overrides,
        **extra,
    }
    arms: dict[str, dict[int, dict[str, Any]]] = {arm: {} for arm in args.arms}
    for seed in args.seeds:
        runs: dict[str, Path] = {}
        grpo_all = {**common, **setting.seeding, "seed": seed}
        needs_grpo_run = {"grpo-all-kinds", "sft-matched", "oracle-sft", WARM_START} & set(args.arms)
        if needs_grpo_run:  # its timing sets the SFT arms' steps; its warm start is the warm-start arm
            runs["grpo-all-kinds"] = args.out / f"grpo-all-kinds-{seed}"
            timed = run_arm(args.config, runs["grpo-all-kinds"], grpo_all, args.fresh)
            per_step = timed["sft_seconds"] / max(timed["sft_steps"], 1)
            matched = seeding + round(timed["grpo_seconds"] / max(per_step, 1e-9))
            sft_only = {**common, "seed": seed, "train.steps": 0, "train.sft_steps": matched}
            if "sft-matched" in args.arms:
                runs["sft-matched"] = args.out / f"sft-matched-{seed}"
                run_arm(args.config, runs["sft-matched"], {**sft_only, **setting.seeding}, args.fresh)
            if "oracle-sft" in args.arms:
                runs["oracle-sft"] = args.out / f"oracle-sft-{seed}"
                run_arm(args.config, runs["oracle-sft"], {**sft_only, "task_kinds": KINDS}, args.fresh)
        if "grpo-pct" in args.arms:
            runs["grpo-pct"] = args.out / f"grpo-pct-{seed}"
            run_arm(args.config, runs["grpo-pct"], {**common, "seed": seed, "task_kinds": ["pct_change"]}, args.fresh)
        for arm in args.arms:
            path = runs["grpo-all-kinds" if arm == WARM_START else arm]
            warm = arm == WARM_START
            arms[arm][seed] = transfer_eval(path, setting.evals, args.per_kind, args.kl_prompts, base, args.fresh, warm)
        print(json.dumps({"seed": seed, "done": sorted(runs)}))
    for arm, per_seed in earlier.items():
        for seed, evaluated in per_seed.items():
            arms[arm].setdefault(seed, evaluated)
    args.seeds = sorted({s for per_seed in arms.values() for s in per_seed})
    result = summarise(arms, base_retention, setting, args)
    write_results(args.results, result)
    plot(result, results_path(args.results, ".png"))
    print(json.dumps(result["success"], indent=1))


def verdicts(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """{env: {kind: {task_id: 1 if solved else 0}}}: what the summary needs of an arm's evaluation rows."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for env, by_task in rows.items():
        for task, row in by_task.items():
            out.setdefault(env, {}).setdefault(row.get("kind", ""), {})[task] = int(solved(row))
    return out


def rows_from_verdicts(saved: dict[str, dict[str, dict[str, int]]]) -> dict[str, dict[str, Any]]:
    """The inverse of `verdicts`: rows that `solved` and the summary read as the evaluated ones."""
    return {
        env: {
            task: {"kind": kind, "components": {"completion": float(flag)}}
            for kind, by_task in kinds.items()
            for task, flag in by_task.items()
        }
        for env, kinds in saved.items()
    }


def earlier_seeds(ap: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, dict[int, dict[str, Any]]]:
    """{arm: {seed: evaluation}} of the seeds in benchmarks/results/NAME.json that --seeds does not name, read from
    its per-task verdicts; refused where that file was made with other settings, which would not pair."""
    path = results_path(args.results)
    if not path.is_file():
        ap.error(f"--add-seeds: {path} does not exist yet; run the first seeds without --add-seeds")
    saved = json.loads(path.read_text())
    if "solved" not in saved:
        ap.error(f"--add-seeds: {path} has no per-task verdicts (written before they were kept); rerun all seeds")
    mine = {"setting": args.setting, "per_kind": args.per_kind, "grpo_steps": args.steps}
    theirs = {k: saved.get(k) for k in mine}
    if theirs != mine or saved.get("overrides", []) != args.overrides:
        ap.error(
            f"--add-seeds: {path} was made with {theirs} and --set {saved.get('overrides', [])}, this command with"
            f" {mine} and --set {args.overrides}: pass the same settings, or a new --results name"
        )
    missing = [arm for arm in args.arms if arm not in saved["solved"]]
    if missing:
        ap.error(f"--add-seeds: {path} has no {', '.join(missing)} arm to pair with; drop it from --arms")
    kl = {(r["arm"], r["seed"]): r["kl_to_base"] for r in saved["runs"]}
    return {
        arm: {
            int(seed): {"rows": rows_from_verdicts(v), "kl": kl[(arm, int(seed))]}
            for seed, v in per_seed.items()
            if int(seed) not in args.seeds
        }
        for arm, per_seed in saved["solved"].items()
        if arm in args.arms
    }


def parse_override(ap: argparse.ArgumentParser, text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        ap.error(f"--set {text!r}: write KEY=VALUE, e.g. --set train.sft_learning_rate=2.5e-4")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def by_env(evals: list[tuple[str, str]]) -> dict[str, list[str]]:
    """{env: [kinds evaluated on it, then "all"]}, in the setting's order."""
    out: dict[str, list[str]] = {}
    for env, kind in evals:
        out.setdefault(env, []).append(kind)
    return {env: [*kinds, "all"] for env, kinds in out.items()}


def summarise(
    evals: dict[str, dict[int, dict[str, Any]]],
    base_retention: dict[str, dict[str, Any]],
    setting: Setting,
    args: argparse.Namespace,
) -> dict[str, Any]:
    rng = random.Random(0)
    seeds = args.seeds
    arms = {arm: {s: e["rows"] for s, e in sorted(per_seed.items())} for arm, per_seed in evals.items()}
    envs = by_env(setting.evals)
    target = setting.evals[0][0]  # the environment the arms train on

    def rate(rows: dict[str, Any], kind: str) -> dict[str, float]:
        return {t: solved(r) for t, r in rows.items() if kind in ("all", r["kind"])}

    success = {
        arm: {
            env: {kind: list(bootstrap([rate(per_seed[s][env], kind) for s in seeds], rng)) for kind in kinds}
            for env, kinds in envs.items()
        }
        for arm, per_seed in arms.items()
    }
    margin: dict[str, dict[str, list[float]]] = {}
    if {"grpo-all-kinds", "sft-matched"} <= set(arms):
        grpo, sft = arms["grpo-all-kinds"], arms["sft-matched"]
        for env, kinds in {**envs, RETENTION: ["all"]}.items():
            margin[env] = {}
            for kind in kinds:
                paired = [
                    {t: v - solved(sft[s][env][t]) for t, v in rate(grpo[s][env], kind).items() if t in sft[s][env]}
                    for s in seeds
                ]
                margin[env][kind] = list(bootstrap(paired, rng))
    retention = {
        arm: list(bootstrap([rate(per_seed[s][RETENTION], "all") for s in seeds], rng))
        for arm, per_seed in arms.items()
    }
    runs = [
        {
            "arm": arm,
            "seed": s,
            "target": statistics.mean(rate(arms[arm][s][target], "all").values()),
            "retention": statistics.mean(rate(arms[arm][s][RETENTION], "all").values()),
            "kl_to_base": e["kl"],
        }
        for arm, per_seed in evals.items()
        for s, e in sorted(per_seed.items())
    ]
    return {
        "setting": args.setting,
        "target_env": target,
        "success": success,
        "grpo_margin_over_matched_sft": margin,
        "retention": retention,
        "base_retention": statistics.mean(solved(r) for r in base_retention.values()),
        "runs": runs,
        "seeds": seeds,
        "solved": {arm: {str(s): verdicts(rows) for s, rows in per_seed.items()} for arm, per_seed in arms.items()},
        "overrides": args.overrides,
        "per_kind": args.per_kind,
        "grpo_steps": args.steps,
        "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/learning_transfer.py "
        + ("" if args.setting == "finance" else f"--setting {args.setting} ")
        + ("" if args.config == setting.config else f"--config {args.config} ")
        + f"--seeds {' '.join(map(str, seeds))} --steps {args.steps} --per-kind {args.per_kind} "
        + f"--kl-prompts {args.kl_prompts} "
        + f"--arms {' '.join(args.arms)}"
        + "".join(f" --set {o}" for o in args.overrides),
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(result["success"])
    envs = list(result["success"][arms[0]])
    fig, axes = plt.subplots(1, len(envs) + 1, figsize=(6 * len(envs) + 5, 3.8))
    width = 0.8 / len(arms)
    for ax, env in zip(axes, envs):
        kinds = list(result["success"][arms[0]][env])
        for i, arm in enumerate(arms):
            points = [result["success"][arm][env][k] for k in kinds]
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
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(kinds))], kinds, fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title(f"held-out success on {env} ({result['per_kind']} per kind, 95% CI)", fontsize=9)
    axes[0].legend(fontsize=7)
    ax = axes[-1]
    for arm in arms:
        points = [r for r in result["runs"] if r["arm"] == arm]
        ax.scatter([r["retention"] for r in points], [r["target"] for r in points], label=arm, s=18)
    ax.axvline(result["base_retention"], color="#888", linestyle="--", label="base model")
    ax.set_xlabel(f"kept: {RETENTION} success", fontsize=8)
    ax.set_ylabel(f"target: {result['target_env']} success (all evaluated kinds)", fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title("gain against what was kept, one point per run", fontsize=9)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
