"""The update's forward passes on identical episodes: padded groups, length-sorted calls, and one prompt pass per group.

    .venv/bin/python benchmarks/update_padding.py [--sft-steps 10] [--rounds 3] [--model smollm2]

After `--sft-steps` of the demo's SFT warm start (so episodes look like the demo's: tool calls, 150-340 tokens), one
demo-config rollout gives 16 episodes in 2 groups. Both variants then run the same episodes, interleaved round by
round (the machine's speed drifts; a pair is measured under the same drift):
- `padded`: the update before length-sorted calls: micro-batches of a group cut where prompt + longest x count
  passes MICRO_BATCH_TOKENS, each one call padded to its longest episode (`group_token_stats(..., padded=True)`);
- `sorted`: the trainer's own micro-batches (`GRPOTrainer._chunks`), each run as length-sorted calls with no padding,
  each micro-batch running its group's prompt again (the update before `SharedPrefix`);
- `shared`: the same micro-batches with one prompt forward (and one prompt backward) per group (`SharedPrefix`, the
  trainer's update today).
Timed per variant: forward + backward under the policy (the update), and the no-gradient forward (the reference
pass). No optimizer step, so every round sees the same weights. Results: benchmarks/results/update_padding.json.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch
from common import DEMO, command_line, write_results

from grpolab.config import load_config
from grpolab.engine.logprobs import SharedPrefix, group_token_stats
from grpolab.engine.phases import Phases
from grpolab.engine.policy import build_policy
from grpolab.engine.sft import sft_warm_start
from grpolab.engine.trainer import MICRO_BATCH_TOKENS, GRPOTrainer
from grpolab.envs import env_for


def padded_chunks(episodes: list[Any]) -> list[list[Any]]:
    """The update's micro-batches before length-sorted calls: a group's episodes until prompt + longest x count
    would pass MICRO_BATCH_TOKENS."""
    chunks: list[list[Any]] = []
    for e in episodes:
        last = chunks[-1] if chunks else None
        if last and last[-1].group == e.group:
            longest = max(len(x.completion_ids) for x in [*last, e])
            if len(e.prompt_ids) + longest * (len(last) + 1) <= MICRO_BATCH_TOKENS:
                last.append(e)
                continue
        chunks.append([e])
    return chunks


def positions(chunks: list[list[Any]], padded: bool, shared: bool = False) -> int:
    """Positions the body runs: each chunk's prompt (when `shared`, not again for a chunk with the previous chunk's
    prompt, as `SharedPrefix` keys it), and its completions (padded to the longest, or not)."""
    total, previous = 0, None
    for c in chunks:
        lengths = [len(e.completion_ids) for e in c]
        if not (shared and c[0].prompt_ids == previous):
            total += len(c[0].prompt_ids)
        previous = c[0].prompt_ids
        total += max(lengths) * len(c) if padded else sum(lengths)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sft-steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default="smollm2")
    args = ap.parse_args()
    cfg = load_config(DEMO, {"model": args.model})
    env = env_for(cfg)
    model, tok, _ = build_policy(cfg)
    t = cfg.train
    sft_warm_start(model, tok, env, args.sft_steps, t.sft_batch_size, t.sft_learning_rate, cfg.seed)
    trainer = GRPOTrainer(model, tok, env, cfg)
    episodes, _, _ = trainer.collect(1, Phases())
    sorted_chunks = [c.episodes for c in trainer._chunks(episodes)]
    variants = {"padded": padded_chunks(episodes), "sorted": sorted_chunks, "shared": sorted_chunks}
    model.train()

    def run(variant: str, grad: bool) -> float:
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        shared = SharedPrefix(model)
        for c in variants[variant]:
            with torch.set_grad_enabled(grad):
                prefix = shared.get(c[0].prompt_ids) if variant == "shared" else None
                stats, mask = group_token_stats(
                    model,
                    c[0].prompt_ids,
                    [e.completion_ids for e in c],
                    [e.mask for e in c],
                    trainer.pad,
                    cfg.rollout.temperature,
                    grad,
                    padded=variant == "padded",
                    prefix=prefix,
                )
                if grad:
                    (stats.logp * mask).sum().backward()
        shared.flush()
        return time.perf_counter() - start

    seconds: dict[str, list[float]] = {f"{v}/{p}": [] for v in variants for p in ("update", "reference")}
    for r in range(args.rounds):
        for v in variants:
            seconds[f"{v}/update"].append(run(v, True))
            seconds[f"{v}/reference"].append(run(v, False))
        print(json.dumps({"round": r, **{k: round(x[-1], 2) for k, x in seconds.items()}}), flush=True)

    def per_round(slow: str, fast: str) -> dict[str, list[float]]:
        return {
            phase: [round(a / b, 3) for a, b in zip(seconds[f"{slow}/{phase}"], seconds[f"{fast}/{phase}"])]
            for phase in ("update", "reference")
        }

    result = {
        "model": args.model,
        "config": "src/grpolab/configs/demo.toml",
        "episodes": len(episodes),
        "completion_lengths": [len(e.completion_ids) for e in episodes],
        "prompt_tokens": sorted({len(e.prompt_ids) for e in episodes}),
        "micro_batches": {v: [len(c) for c in chunks] for v, chunks in variants.items()},
        "positions": {v: positions(chunks, v == "padded", v == "shared") for v, chunks in variants.items()},
        "seconds": {k: [round(x, 2) for x in v] for k, v in seconds.items()},
        "best_seconds": {k: round(min(v), 2) for k, v in seconds.items()},
        "padded_over_sorted_per_round": per_round("padded", "sorted"),
        "sorted_over_shared_per_round": per_round("sorted", "shared"),
        "threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d"),
        "command": command_line("update_padding.py", args),
    }
    write_results("update_padding", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
