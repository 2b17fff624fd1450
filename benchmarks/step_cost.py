"""Cost of one GRPO step on the embedded model: seconds per step, generated tokens/s, trained tokens/s, peak RSS.

    .venv/bin/python benchmarks/step_cost.py [--group-size 8] [--max-new-tokens 128] [--steps 2]

Settings: SmolLM2-135M-Instruct, fp32, LoRA (default config), finance pct_change prompts, one prompt per step,
no SFT. The first step includes warm-up; the table reports each step and the mean of the steps after the first.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from grpolab.config import load_config
from grpolab.engine.policy import build_policy
from grpolab.engine.trainer import GRPOTrainer, peak_rss_mb
from grpolab.envs import env_for

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--model", default="smollm2")
    args = ap.parse_args()
    cfg = load_config(
        None,
        {
            "model": args.model,
            "rollout.group_size": args.group_size,
            "rollout.max_new_tokens": args.max_new_tokens,
            "train.prompts_per_step": 1,
            "task_kinds": ["pct_change"],
        },
    )
    model, tok, ref = build_policy(cfg)
    trainer = GRPOTrainer(model, tok, env_for(cfg), cfg, ref)
    rows = []
    for step in range(1, args.steps + 1):
        m = trainer.step(step).metrics
        rows.append({k: m[k] for k in ("perf/step_s", "perf/gen_tok_s", "perf/train_tok_s", "completion_len")})
        print(json.dumps({"step": step, **rows[-1]}), flush=True)
    timed = rows[1:] or rows
    result = {
        "model": args.model,
        "G": args.group_size,
        "max_new_tokens": args.max_new_tokens,
        "s_per_step": sum(r["perf/step_s"] for r in timed) / len(timed),
        "gen_tok_s": sum(r["perf/gen_tok_s"] for r in timed) / len(timed),
        "train_tok_s": sum(r["perf/train_tok_s"] for r in timed) / len(timed),
        "peak_rss_mb": peak_rss_mb(),
        "threads": torch.get_num_threads(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "date": time.strftime("%Y-%m-%d"),
    }
    result["command"] = "python benchmarks/step_cost.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "step_cost.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
