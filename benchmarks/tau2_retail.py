"""τ²-bench retail on the embedded model: pass rate, action match and parity with the benchmark's own evaluator.

    .venv/bin/python benchmarks/tau2_retail.py [--eval-limit 40] [--run RUN ...] [--results tau2_retail]

Without --run: the base model, greedy, on the test split's tasks (the fixed shuffle every evaluation uses). With
--run: every held-out evaluation a run recorded (base, after SFT seeding, after GRPO), read from its eval rows.
Every evaluated transcript is also judged by tau2's own evaluators (`grpolab.envs.tau2.official`: its database
and communicated-information checks on the transcript's calls and final answer), and the file records how many
verdicts agree. The setting is grpolab's solo one (the scenario as one message, no simulated user), so the pass
rate is not comparable to the benchmark's leaderboard.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from common import CONFIGS, write_results

CONFIG = CONFIGS / "tau2_retail.toml"


def base_rows(eval_limit: int) -> list[dict]:
    """The base model's held-out eval rows (as a run's eval/base.jsonl holds them)."""
    from grpolab.config import load_config
    from grpolab.engine.evaluate import evaluate
    from grpolab.engine.policy import build_policy
    from grpolab.envs import env_for
    from grpolab.metrics import episode_row

    cfg = load_config(CONFIG, {"train.eval_limit": eval_limit})
    model, tokenizer, _ = build_policy(cfg)
    _, episodes = evaluate(model, tokenizer, env_for(cfg), cfg)
    return [episode_row(e) for e in episodes]


def run_rows(run: Path) -> dict[str, list[dict]]:
    """Each held-out evaluation a run recorded, by label."""
    labels = json.loads((run / "eval" / "summary.json").read_text())
    return {
        label: [json.loads(line) for line in (run / "eval" / f"{label}.jsonl").read_text().splitlines() if line]
        for label in labels
    }


def judged(rows: list[dict]) -> dict:
    """Pass rate, mean action match, tool use, and agreement with the benchmark's own verdict on each transcript."""
    from grpolab.envs import get_env
    from grpolab.envs.tau2.official import official_reward
    from grpolab.protocol import parse_transcript

    env = get_env("tau2_retail")
    tasks = env.all_tasks()
    agree = 0
    for row in rows:
        parsed = parse_transcript(row["text"])
        calls = [
            (s.call.name, s.call.arguments) for s in parsed.segments if s.kind == "tool_call" and s.call and s.call.ok
        ]
        theirs = official_reward(env.fresh_environment, tasks[row["task_id"]].truth, calls, parsed.final_answer) == 1.0
        agree += theirs == (row["components"]["completion"] == 1.0)
    return {
        "pass_rate": statistics.mean(float(r["components"]["completion"] == 1.0) for r in rows),
        "action_match": statistics.mean(float(r["components"].get("actions") or 0.0) for r in rows),
        "tool_call_prob": statistics.mean(float(r.get("valid_calls", 0) > 0) for r in rows),
        "tasks": len(rows),
        "parity": f"{agree}/{len(rows)}",
        "solved": {r["task_id"]: r["components"]["completion"] == 1.0 for r in rows},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval-limit", type=int, default=40)
    ap.add_argument("--run", type=Path, action="append", default=[], help="a finished run's directory (repeatable)")
    ap.add_argument("--results", default="tau2_retail", help="name of the results file in benchmarks/results/")
    args = ap.parse_args()
    start = time.perf_counter()
    if args.run:
        result = {
            "runs": {str(run): {label: judged(rows) for label, rows in run_rows(run).items()} for run in args.run}
        }
    else:
        result = {"base": judged(base_rows(args.eval_limit))}
    result["minutes"] = (time.perf_counter() - start) / 60
    result["date"] = time.strftime("%Y-%m-%d")
    runs = "".join(f" --run {run}" for run in args.run)
    result["command"] = (
        f"python benchmarks/tau2_retail.py --eval-limit {args.eval_limit}{runs} --results {args.results}"
    )
    write_results(args.results, result)
    print(json.dumps(result, indent=2, default=str)[:3000])


if __name__ == "__main__":
    main()
