"""The base model's held-out score on a config's tasks: the "before" every learning result starts from.

    .venv/bin/python benchmarks/base_eval.py [--config src/grpolab/configs/demo.toml] [--eval-limit 40]
                                             [--results base_demo]

Greedy decoding on the embedded model makes this one number per config (seeds change nothing), so the learning
benchmarks, which train several seeds from the same start, do not repeat it. The tasks are the same fixed shuffle
`grpolab eval` and every run's held-out evaluation use (`grpolab.engine.evaluate.eval_tasks`), scored with the
strict verifier. Writes benchmarks/results/NAME.json: success, tool-call rate, per-task verdicts, the command.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from common import DEMO, ROOT, write_results


def base_score(config: Path, eval_limit: int) -> dict:
    """Held-out success and tool-call rate of the config's model with no training, per task."""
    from contextlib import nullcontext

    from grpolab.config import load_config
    from grpolab.engine.evaluate import evaluate
    from grpolab.engine.policy import build_policy
    from grpolab.envs import env_for
    from grpolab.metrics import episode_row

    cfg = load_config(config, {"train.eval_limit": eval_limit})
    model, tokenizer, reference = build_policy(cfg)
    start = time.perf_counter()
    with model.disable_adapter() if reference is None else nullcontext():  # as the run loop's base evaluation
        _, episodes = evaluate(model, tokenizer, env_for(cfg), cfg)
    rows = [episode_row(e) for e in episodes]  # the fields learning.py reads from a run's eval rows
    solved = {r["task_id"]: float((r.get("components") or {}).get("completion") == 1.0) for r in rows}
    called = {r["task_id"]: float(r.get("valid_calls", 0) > 0) for r in rows}
    return {
        "success": statistics.mean(solved.values()),
        "tool_call_prob": statistics.mean(called.values()),
        "heldout_tasks": len(episodes),
        "solved": solved,
        "called": called,
        "minutes": (time.perf_counter() - start) / 60,
        "model": cfg.model,
        "config": str(config.resolve().relative_to(ROOT) if config.resolve().is_relative_to(ROOT) else config),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=DEMO)
    ap.add_argument("--eval-limit", type=int, default=40)
    ap.add_argument("--results", default="base_demo", help="name of the results file in benchmarks/results/")
    args = ap.parse_args()
    result = base_score(args.config, args.eval_limit)
    named = "" if args.config == DEMO else f" --config {args.config}"
    result["date"] = time.strftime("%Y-%m-%d")
    result["command"] = f"python benchmarks/base_eval.py{named} --eval-limit {args.eval_limit} --results {args.results}"
    write_results(args.results, result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("solved", "called")}, indent=2))


if __name__ == "__main__":
    main()
