"""What the starting policy does on a branch it rarely takes: its episodes sampled freely and with the opening
thought banned, scored with the demo's reward.

    .venv/bin/python benchmarks/forced_branch.py [--out runs/forecast_runs] [--prompts 4] [--group 8]

A shortcut nobody sampled yet (the demo's dropped thought: 0 of 16 first-step episodes of seed 0) cannot be forecast
from the pilot's classes, and an edit of a sampled transcript (drop its thought) keeps that transcript's outcome. Here
the policy itself is sampled on that branch: the seeded demo model (`forecast_runs.py`'s shared SFT seeding) writes
its episodes with the token that opens `<thought>` banned after `<`, so each episode starts straight with a call (or
free text). Its scored episodes are what the model does without a thought, under the model's own token budget.
`forecast_scoring.py` adds the branch's episodes of the shortcut class to every pilot (as reached, not sampled).
Writes benchmarks/results/forced_branch.json.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from common import DEMO, write_results
from forecast_runs import DEMO_WEIGHTS, overrides

from grpolab.behaviour import classify_episode
from grpolab.config import load_config
from grpolab.engine.policy import build_policy
from grpolab.engine.rollout import run_episodes, sample_next, sampling_settings
from grpolab.envs import env_for
from grpolab.metrics import episode_row
from grpolab.rewards.score import score_episodes

SEED = 7


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/forecast_runs"))
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    args = ap.parse_args()
    cfg = load_config(DEMO, overrides(DEMO_WEIGHTS, 0, 12))
    env = env_for(cfg)
    model, tok, _ = build_policy(cfg, warm_start=args.out / "seeding-demo" / "sft" / "trainable.pt")
    s = sampling_settings(cfg)
    opener, thought = tok.encode("<thought>", add_special_tokens=False)[:2]
    train = env.tasks("train")
    tasks = train[:: max(1, len(train) // args.prompts)][: args.prompts]
    arms = {}
    for arm in ("free", "no_thought"):
        gen = torch.Generator().manual_seed(SEED)

        def banned(rows, logits, gen=gen):
            logits = logits.clone()
            for i, e in enumerate(rows):
                if e.completion_ids == [opener]:  # `<` opened the turn: it may open a call, not a thought
                    logits[i, thought] = -float("inf")
            return sample_next(logits, s, gen)

        start = time.perf_counter()
        eps = run_episodes(model, tok, env, tasks, args.group, s, gen, choose=banned if arm == "no_thought" else None)
        r = cfg.reward
        score_episodes(env, eps, r.weights, r.length_unit, r.thought_min_words, r.timeout_s)
        rows = [episode_row(e) for e in eps]
        short = [
            {
                "group": x["group"],
                "task_id": x["task_id"],
                "class": classify_episode(x),
                "total": x["total"],
                "components": x["components"],
                "tokens": x["tokens"],
                "valid_calls": x["valid_calls"],
            }
            for x in rows
        ]
        by: dict[str, list[dict]] = {}
        for x in short:
            by.setdefault(x["class"], []).append(x)
        arms[arm] = {
            "seconds": round(time.perf_counter() - start, 1),
            "classes": {
                c: {
                    "episodes": len(v),
                    "mean_total": round(statistics.mean(x["total"] for x in v), 3),
                    "solved": round(statistics.mean(x["components"]["completion"] >= 1.0 for x in v), 3),
                    "tokens": round(statistics.mean(x["tokens"] for x in v), 1),
                }
                for c, v in sorted(by.items(), key=lambda kv: -len(kv[1]))
            },
            "episodes": short,
        }
        print(arm, {c: (v["episodes"], v["mean_total"], v["solved"]) for c, v in arms[arm]["classes"].items()})
    write_results(
        "forced_branch",
        {
            "date": time.strftime("%Y-%m-%d"),
            "command": "python benchmarks/forced_branch.py",
            "weights": cfg.reward.weights,
            "prompts": len(tasks),
            "group": args.group,
            "arms": arms,
        },
        indent=1,
    )


if __name__ == "__main__":
    main()
