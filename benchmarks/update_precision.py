"""The GRPO update's own time in fp32 and in bf16, on one fixed step of the demo's episodes, in one process.

    .venv/bin/python benchmarks/update_precision.py [--run runs/demo] [--rounds 2] [--results update_precision]

Loads the policy of a demo run (`make demo` writes runs/demo), samples one step of its episodes (16, the demo's
shape), and times the step's update (reference pass + forward/backward + optimizer step) on those same episodes in
fp32 and under bf16 autocast, alternating, each from the same weights and optimizer state. Reports each arm's best
round and its phases, and every round (on this shared machine rounds vary by a third). The rollout is not timed
(it decodes in fp32 in both). Writes benchmarks/results/NAME.json.
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import torch
from common import write_results

from grpolab.engine.phases import Phases
from grpolab.engine.policy import load_run_policy
from grpolab.engine.trainer import GRPOTrainer
from grpolab.envs import env_for

ARMS = ("fp32", "bf16")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"), help="a demo run directory (make demo)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--results", default="update_precision")
    args = ap.parse_args()
    if not (args.run / "config.json").is_file():
        ap.error(f"{args.run} is not a run directory: run `make demo` first (it writes runs/demo), or pass --run")
    model, tokenizer, cfg, step = load_run_policy(args.run)
    cfg.train.precision = "fp32"
    trainer = GRPOTrainer(model, tokenizer, env_for(cfg), cfg)
    episodes, _, _ = trainer.collect(step + 1, Phases())
    rewards = torch.tensor([e.score.total for e in episodes]).view(-1, cfg.rollout.group_size)
    advantages = trainer.advantages(episodes, rewards).flatten()
    weights = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    optimizer = copy.deepcopy(trainer.optimizer.state_dict())
    best: dict[str, dict[str, float]] = {}
    rounds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for _ in range(args.rounds):
        for arm in ARMS:
            trainer.precision = arm
            model.load_state_dict(weights, strict=False)
            trainer.optimizer.load_state_dict(optimizer)
            phases = Phases()
            start = time.perf_counter()
            trainer.update(episodes, advantages, phases)
            seconds = time.perf_counter() - start
            row = {"seconds": round(seconds, 2), **{k: round(v, 2) for k, v in phases.seconds.items()}}
            print(arm, row, flush=True)
            rounds[arm].append(round(seconds, 2))
            if arm not in best or seconds < best[arm]["seconds"]:
                best[arm] = row
    fp32 = best["fp32"]["seconds"]
    result = {
        "command": f"python benchmarks/update_precision.py --run {args.run} --rounds {args.rounds}",
        "date": time.strftime("%Y-%m-%d"),
        "policy_tokens": sum(e.n_policy_tokens for e in episodes),
        "episodes": len(episodes),
        "arms": best,
        "rounds": rounds,
        "speedup_over_fp32": {arm: round(fp32 / best[arm]["seconds"], 2) for arm in ARMS},
    }
    print(write_results(args.results, result))


if __name__ == "__main__":
    main()
