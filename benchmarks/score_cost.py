"""What scoring's time limit costs: every reward component runs on a thread of its own with `reward.timeout_s`.

    .venv/bin/python benchmarks/score_cost.py

Scores the finance reference transcripts (their calls replayed, 4 components each) with the time limit as shipped,
and with it replaced by a direct call, in alternating rounds; reports the median milliseconds per transcript of
each and their ratio (measured in one run: absolute times on a shared machine are noisy, the ratio less so). Then
the probes (`grpolab.preflight.probes.run_probes`, as `check` runs them) on every finance task, the median of 3 runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from common import write_results

import grpolab.rewards.score as score_module
from grpolab.envs import get_env
from grpolab.preflight.probes import run_probes
from grpolab.rewards.score import score_transcripts

WEIGHTS = {"format": 1.0, "schema": 1.5, "completion": 3.0, "length": -0.05}


def direct(fn, timeout_s, what):  # noqa: ANN001, ANN201 (the time limit's signature, without the thread)
    return fn()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="Alternating rounds of each arm.")
    args = ap.parse_args()
    env = get_env("finance")
    items = [(t, env.reference_transcript(t), 40) for t in env.tasks("train")[:64]]
    limited = score_module.call_with_time_limit
    per = {"time_limit": [], "direct": []}
    score_transcripts(env, items)  # warm: BM25 index, tokenizer-free (gen tokens given)
    for _ in range(args.rounds):
        for arm, call in (("time_limit", limited), ("direct", direct)):
            score_module.call_with_time_limit = call
            t = time.perf_counter()
            score_transcripts(env, items)
            per[arm].append((time.perf_counter() - t) * 1000 / len(items))
    score_module.call_with_time_limit = limited
    ms = {arm: round(statistics.median(v), 3) for arm, v in per.items()}
    tasks = env.tasks("train") + env.tasks("heldout")
    probe_seconds = []
    for _ in range(3):
        t = time.perf_counter()
        run_probes(env, tasks, WEIGHTS, 100, lambda text: len(text) // 4)
        probe_seconds.append(time.perf_counter() - t)
    result = {
        "transcripts": len(items),
        "components": 4,
        "ms_per_transcript_time_limit": ms["time_limit"],
        "ms_per_transcript_direct": ms["direct"],
        "ratio": round(ms["time_limit"] / ms["direct"], 3),
        "probe_tasks": len(tasks),
        "probe_seconds": round(statistics.median(probe_seconds), 2),
        "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/score_cost.py",
    }
    write_results("score_cost", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
