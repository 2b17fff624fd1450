"""How many SFT steps seed the demo: held-out tool-call probability and success after each seeding step.

    .venv/bin/python benchmarks/seeding.py [--steps 1 2 3 4 6 8] [--eval-limit 40] [--seeds 0]
        [--precision fp32 bf16] [--results seeding_precision]

The demo's story is RL's: a policy that rarely calls tools is carried by GRPO
to a reliable agent. The base model never calls a tool, so a few SFT steps on reference transcripts seed the
protocol; this measures, on the demo config (SmolLM2-135M, finance, greedy, strict verifier), how tool use and
success grow with those steps, to pick the demo's `train.sft_steps`. Writes benchmarks/results/seeding.json.

`--precision fp32 bf16` seeds in each precision (`train.precision`: the SFT passes under bf16 autocast or not; the
evaluation decodes in fp32 either way), so that what bf16 does to learning is measured beside fp32, seed by seed.
"""

from __future__ import annotations

import argparse
import json
import time

from common import DEMO, write_results

from grpolab.config import load_config
from grpolab.engine.evaluate import evaluate
from grpolab.engine.policy import build_policy
from grpolab.engine.sft import sft_warm_start
from grpolab.envs import env_for


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8])
    ap.add_argument("--eval-limit", type=int, default=40)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--precision", nargs="+", choices=["fp32", "bf16"], default=["fp32"])
    ap.add_argument("--results", default="seeding", help="Results file name (benchmarks/results/NAME.json).")
    args = ap.parse_args()
    rows: list[dict] = []
    start = time.perf_counter()
    steps = " ".join(map(str, args.steps))
    seeds = " ".join(map(str, args.seeds))
    extra = (f" --precision {' '.join(args.precision)}" if args.precision != ["fp32"] else "") + (
        f" --results {args.results}" if args.results != "seeding" else ""
    )
    command = f"python benchmarks/seeding.py --steps {steps} --eval-limit {args.eval_limit} --seeds {seeds}{extra}"
    planned = len(args.seeds) * len(args.steps) * len(args.precision)
    for seed in args.seeds:
        for steps_n, precision in ((n, p) for n in args.steps for p in args.precision):  # each from the base model
            cfg = load_config(DEMO, {"seed": seed, "train.eval_limit": args.eval_limit})
            env = env_for(cfg)
            model, tok, _ = build_policy(cfg)
            t = cfg.train
            losses = sft_warm_start(
                model, tok, env, steps_n, t.sft_batch_size, t.sft_learning_rate, seed, precision=precision
            )
            summary, _ = evaluate(model, tok, env, cfg)
            row = {
                "seed": seed,
                "sft_steps": steps_n,
                "precision": precision,
                "last_loss": round(losses[-1], 4) if losses else None,
                "tool_call_prob": summary["heldout/tool_call_prob"],
                "success": summary["heldout/success"],
                "minutes_so_far": (time.perf_counter() - start) / 60,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
            # written after every row: a long sweep stopped early keeps what it measured, and says so
            result = {
                "rows": rows,
                "heldout_tasks": args.eval_limit,
                "complete": len(rows) == planned,
                "date": time.strftime("%Y-%m-%d"),
                "command": command,
            }
            write_results(args.results, result)


if __name__ == "__main__":
    main()
