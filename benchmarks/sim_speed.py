"""Simulator and forecast speed: wall time of 1,000 GRPO iterations on the class policy (target: under 50 ms for one
run), the forecast from the shipped demo pilot, and the lab's whole redraw after a weight slider moves (target: 1 s).

    .venv/bin/python benchmarks/sim_speed.py

Class profiles are measured once (real reward on real transcripts), then the simulation alone is timed, best of 5.
The forecast is timed at the demo's 20 steps and the lab's 16 seeded runs. The lab's redraw (`handlers.simulate_view`:
forecast, cards, chart and the probe panel) is timed on a completion weight it has not drawn before, so the probes are
scored afresh, as when a person moves the slider.
"""

from __future__ import annotations

import argparse
import json
import time

from common import DEMO, write_results

from grpolab.config import LabConfig, load_config
from grpolab.envs import get_env
from grpolab.models import model_token_counter
from grpolab.simulator.forecast import demo_pilot, forecast
from grpolab.simulator.simulate import DEFAULT_PRIOR, SimSettings, measure_profiles, simulate


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    profiles = measure_profiles(get_env("finance"), model_token_counter(LabConfig().model))
    result = {}
    for runs in (1, 16):
        best = min(_time(profiles, SimSettings(LabConfig(), steps=1000, runs=runs)) for _ in range(5))
        result[f"ms_per_1000_iterations_runs={runs}"] = round(best * 1000, 1)
    cfg = load_config(DEMO)
    pilot, result["pilot"] = demo_pilot(cfg), "shipped"
    if pilot is None:  # not shipped (the lab keeps the simulator): the same pilot forecast_scoring builds, in memory
        pilot, result["pilot"] = _benchmark_pilot(), "forecast_scoring's, in memory (the lab does not ship it)"
    if pilot is not None:
        result["pilot_episodes"] = len(pilot.sampled)
        best = min(_timed(lambda: forecast(pilot, cfg, steps=cfg.train.steps, runs=16)) for _ in range(5))
        result["ms_forecast_demo_20_steps_runs=16"] = round(best * 1000, 1)
        result["ms_lab_redraw_after_a_weight_moves"] = round(1000 * _lab_redraw(cfg, pilot), 1)
    else:
        del result["pilot"]
    result = {**result, "date": time.strftime("%Y-%m-%d"), "command": "python benchmarks/sim_speed.py"}
    write_results("sim_speed", result)
    print(json.dumps(result, indent=2))


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _benchmark_pilot():
    """Every recorded forecast run's first step with its edits, references and forced-branch episodes, as
    `forecast_scoring.py` builds the pilot it would ship; None before any run is recorded."""
    import forecast_scoring as fs

    path = fs.results_path(fs.RUNS_NAME)
    if not path.is_file():
        return None
    runs = json.loads(path.read_text())["runs"]
    fs.BRANCH.extend(fs.branch_rows())
    return fs.make_pilot(runs, sorted(runs), fs.pilot_rescorer(runs))


def _lab_redraw(cfg, pilot) -> float:
    """Seconds of the lab's redraw for a completion weight not drawn before (median of 5 new values), forecasting
    from `pilot` as the lab does from a shipped one."""
    from grpolab.lab import form, handlers

    handlers.demo_pilot = lambda c: pilot  # the lab's forecast path, whichever pilot ships
    form.set_base_config(cfg)
    values = {n: c.default(cfg) for n, c in form.controls(cfg).items()}
    handlers.simulate_view(values)  # first draw: model tokenizer and caches warm, as on the page's load
    times = []
    for w in (2.5, 2.0, 1.5, 3.5, 4.0):
        times.append(_timed(lambda w=w: handlers.simulate_view({**values, "reward.weights.completion": w})))
    return sorted(times)[len(times) // 2]


def _time(profiles, settings) -> float:
    """Seconds one simulation of `settings` takes."""
    t = time.perf_counter()
    simulate(profiles, DEFAULT_PRIOR, settings)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
