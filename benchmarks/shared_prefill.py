"""The rollout's prefill of τ²-bench retail prompts with their shared start prefilled once, against every prompt
prefilled whole, in one process (issue 39: the tau2 eval spent most of its time prefilling a ~4.5k-token policy).

    python benchmarks/shared_prefill.py [--tasks 8] [--rounds 2]

Each round runs `run_episodes` on the first `--tasks` held-out tasks (one episode each, greedy, one new token, so
the prefill is nearly all of it) twice: with the shared start (`rollout.SHARED_PREFIX_MIN` as shipped) and with
every prompt whole (`SHARED_PREFIX_MIN` out of reach), alternating which goes first. Best time of the rounds per
mode; the first tokens and their log-probs must agree. Writes benchmarks/results/shared_prefill.json.
"""

from __future__ import annotations

import argparse
import time

import torch
from common import CONFIGS, command_line, write_results

from grpolab.config import load_config
from grpolab.engine import rollout
from grpolab.engine.policy import build_policy
from grpolab.envs import env_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=8, help="held-out tasks prefilled per run")
    parser.add_argument("--rounds", type=int, default=2, help="runs per mode (best counted)")
    args = parser.parse_args()
    cfg = load_config(CONFIGS / "tau2_retail.toml", {})
    env = env_for(cfg)
    model, tok, _ = build_policy(cfg)
    tasks = env.tasks("heldout")[: args.tasks]
    prompts = [rollout.prompt_ids(tok, env, t) for t in tasks]
    shared = rollout.shared_prefix(prompts)
    settings = rollout.sampling_settings(cfg, greedy=True, max_new_tokens=1)
    shipped = rollout.SHARED_PREFIX_MIN
    seconds: dict[str, list[float]] = {"shared": [], "whole": []}
    first: dict[str, list[tuple[int, float]]] = {}
    for r in range(args.rounds):
        for mode in ("shared", "whole") if r % 2 == 0 else ("whole", "shared"):
            rollout.SHARED_PREFIX_MIN = shipped if mode == "shared" else 10**9
            start = time.perf_counter()
            with torch.no_grad():
                episodes = rollout.run_episodes(model, tok, env, tasks, 1, settings)
            seconds[mode].append(time.perf_counter() - start)
            first[mode] = [(e.completion_ids[0], e.logprobs[0]) for e in episodes]
            for e in episodes:
                e.close()
            print(mode, f"{seconds[mode][-1]:.1f} s", flush=True)
    rollout.SHARED_PREFIX_MIN = shipped
    best = {mode: min(s) for mode, s in seconds.items()}
    result = {
        "tasks": len(tasks),
        "prompt_tokens": [len(p) for p in prompts],
        "shared_tokens": shared,
        "seconds": seconds,
        "best_s": best,
        "speedup": best["whole"] / best["shared"],
        "same_first_tokens": [t for t, _ in first["shared"]] == [t for t, _ in first["whole"]],
        "max_first_logprob_diff": max(abs(a[1] - b[1]) for a, b in zip(first["shared"], first["whole"])),
        "date": time.strftime("%Y-%m-%d"),
        "command": command_line("shared_prefill.py", args),
    }
    print(f"wrote {write_results('shared_prefill', result)}")


if __name__ == "__main__":
    main()
