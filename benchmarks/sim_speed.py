"""Simulator speed: wall time of 1,000 GRPO iterations on the class policy (target: under 50 ms for one run).

    .venv/bin/python benchmarks/sim_speed.py

Class profiles are measured once (real reward on real transcripts), then the simulation alone is timed, best of 5.
"""

from __future__ import annotations

import argparse
import json
import time

from common import write_results

from grpolab.config import LabConfig
from grpolab.envs import get_env
from grpolab.models import model_token_counter
from grpolab.trust.simulate import DEFAULT_PRIOR, SimSettings, measure_profiles, simulate


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    profiles = measure_profiles(get_env("finance"), model_token_counter(LabConfig().model))
    result = {}
    for runs in (1, 16):
        best = min(_time(profiles, SimSettings(LabConfig(), steps=1000, runs=runs)) for _ in range(5))
        result[f"ms_per_1000_iterations_runs={runs}"] = round(best * 1000, 1)
    result = {**result, "date": time.strftime("%Y-%m-%d"), "command": "python benchmarks/sim_speed.py"}
    write_results("sim_speed", result)
    print(json.dumps(result, indent=2))


def _time(profiles, settings) -> float:
    """Seconds one simulation of `settings` takes."""
    t = time.perf_counter()
    simulate(profiles, DEFAULT_PRIOR, settings)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
