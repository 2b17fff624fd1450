"""An SFT warm-start step with the prompts' shared opening run once, against each transcript run whole.

    .venv/bin/python benchmarks/sft_prefix.py [--steps 3] [--rounds 3] [--results sft_prefix]

On the demo's model and config (SmolLM2, finance pct_change, its batch of 4 reference transcripts), the first
`--steps` SFT batches of the demo's seed each take one forward + backward (`engine.sft.sft_gradients`, no optimizer
step, so both arms see the same weights), as shipped and with the shared opening switched off (every transcript's
prompt run whole, as before), alternating, in one process. Reports each arm's median seconds per step, the tokens
each runs, and the largest difference of the two arms' losses. Writes benchmarks/results/NAME.json.
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import DEMO, write_results

from grpolab.config import load_config
from grpolab.engine import sft
from grpolab.engine.policy import build_policy
from grpolab.envs import env_for

ARMS = ("shared_opening", "whole_prompts")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3, help="SFT batches timed per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--results", default="sft_prefix")
    args = ap.parse_args()
    cfg = load_config(DEMO)
    env = env_for(cfg)
    model, tok, _ = build_policy(cfg)
    model.train()
    batches = sft.sft_batches(env.tasks("train"), args.steps, cfg.train.sft_batch_size, cfg.seed, cfg.train.sft_mix)
    steps = [[sft.reference_tokens(tok, env, t) for t in batch] for batch in batches]
    shipped = sft.shared_length
    per: dict[str, list[float]] = {arm: [] for arm in ARMS}
    losses: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for _ in range(args.rounds):
        for arm in ARMS:
            sft.shared_length = shipped if arm == "shared_opening" else (lambda prompts: 0)
            seconds = []
            for examples in steps:
                model.zero_grad(set_to_none=True)
                start = time.perf_counter()
                losses[arm].append(sft.sft_gradients(model, examples, tok.pad_token_id, "fp32", "cpu"))
                seconds.append(time.perf_counter() - start)
            per[arm].append(statistics.mean(seconds))
            print(arm, f"{per[arm][-1]:.2f} s a step", flush=True)
    sft.shared_length = shipped
    opening = [shipped([p for p, _, _ in examples]) for examples in steps]
    whole = [sum(len(p) + len(c) for p, c, _ in examples) for examples in steps]
    median = {arm: round(statistics.median(v), 2) for arm, v in per.items()}
    result = {
        "steps": args.steps,
        "rounds": args.rounds,
        "batch_size": cfg.train.sft_batch_size,
        "seconds_per_step": median,
        "speedup": round(median["whole_prompts"] / median["shared_opening"], 2),
        "tokens_per_step": {
            "whole_prompts": round(statistics.mean(whole)),
            "shared_opening": round(statistics.mean(w - n * (len(e) - 1) for w, n, e in zip(whole, opening, steps))),
        },
        "shared_opening_tokens": round(statistics.mean(opening)),
        "max_loss_difference": max(abs(a - b) for a, b in zip(losses[ARMS[0]], losses[ARMS[1]])),
        "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/sft_prefix.py"
        + (f" --steps {args.steps}" if args.steps != 3 else "")
        + (f" --rounds {args.rounds}" if args.rounds != 3 else ""),
    }
    write_results(args.results, result)
    print(result)


if __name__ == "__main__":
    main()
