"""A trained run's final policy evaluated again under today's rollout rules, task by task against its recorded eval.

    .venv/bin/python benchmarks/answer_stop_reeval.py RUN_DIR [RUN_DIR ...] [--results NAME]

The same policy (the run's latest checkpoint), the same held-out tasks (the run's last evaluation, greedy, strict
verifier), only the code around it changed: what a change to the rollout's rules (e.g. `rollout.stop_at_answer`)
does to a finished run without retraining it. Reported per run: success recorded and now, the tasks that turned
solved and failed (with the recorded and the new final answer of each), the stop reasons now, and every failure
now (stop, the verifier's reason, the final answer). Writes benchmarks/results/NAME.json (default
answer_stop_reeval).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from common import solved, write_results

from grpolab.engine.evaluate import evaluate
from grpolab.engine.policy import load_run_policy
from grpolab.envs import env_for
from grpolab.metrics import episode_row
from grpolab.protocol import parse_transcript
from grpolab.rundir import RunDir


def answer(row: dict[str, Any]) -> str:
    """The final answer of an episode row's transcript ("" where it has none)."""
    return parse_transcript(row["text"]).final_answer or ""


def reeval(path: Path) -> dict[str, Any]:
    run = RunDir(path)
    label = run.eval_labels()[-1]
    recorded = {r["task_id"]: r for r in run.eval_rows(label)}
    cfg = run.read_config()
    model, tokenizer = load_run_policy(path)[:2]
    _, episodes = evaluate(model, tokenizer, env_for(cfg), cfg, "heldout", len(recorded))
    now = {e.task.id: episode_row(e) for e in episodes}
    common = [t for t in recorded if t in now]
    changed = {
        kind: [
            {"task": t, "recorded": answer(recorded[t]), "now": answer(now[t])}
            for t in common
            if solved(now[t]) != solved(recorded[t]) and solved(now[t]) == (kind == "gained")
        ]
        for kind in ("gained", "lost")
    }
    return {
        "eval": label,
        "tasks": len(common),
        "solved_recorded": int(sum(solved(recorded[t]) for t in common)),
        "solved_now": int(sum(solved(now[t]) for t in common)),
        **changed,
        "stops_now": dict(Counter(now[t].get("stop") for t in common)),
        "failed_now": [
            {
                "task": t,
                "stop": now[t].get("stop"),
                "why": (now[t].get("reasons") or {}).get("completion"),
                "now": answer(now[t]),
            }
            for t in common
            if not solved(now[t])
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--results", default="answer_stop_reeval")
    args = parser.parse_args()
    out = {}
    for path in args.runs:
        r = out[path.name] = reeval(path)
        print(
            f"{path.name}: solved {r['solved_recorded']} -> {r['solved_now']} of {r['tasks']} "
            f"(+{len(r['gained'])} -{len(r['lost'])}), stops now {r['stops_now']}",
            flush=True,
        )
    write_results(args.results, out, indent=1)


if __name__ == "__main__":
    main()
