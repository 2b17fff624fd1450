"""`grpolab simulate`: the policy & reward simulator, calibrated on real episodes, with a sim-to-real check."""

from __future__ import annotations

import json as jsonlib
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from grpolab.cli.options import (
    ConfigOpt,
    EnvOpt,
    JsonOpt,
    SeedOpt,
    WeightsOpt,
    console,
    err_console,
    finite,
    positive_finite,
    print_json,
    resolve_config,
)
from grpolab.config import field_doc
from grpolab.errors import UserError
from grpolab.trust.simulate import SimSettings

MAX_SIM_STEPS = 10_000
MAX_SIM_RUNS = 256
"""Bounds on `simulate`: its arrays grow with steps x runs (16 runs x 1,000 steps take about 0.1 s)."""


def register(app: typer.Typer) -> None:
    app.command()(simulate)


def calibration_rows(path: Path) -> list[dict[str, Any]]:
    """Scored episode rows from a run dir (eval/0.jsonl, else step-1 episodes) or a `check --save` JSON file."""
    from grpolab.rundir import RunDir

    if path.is_dir():
        run = RunDir(path)
        rows = run.eval_rows("0") or [r for r in run.episodes() if r.get("step") == 1]
    elif path.exists():
        from grpolab.files import MAX_DATA_BYTES, read_user_file

        fix = "pass a run directory or a `grpolab check --save` report"
        text = read_user_file(path, "calibration report", MAX_DATA_BYTES, fix)
        try:
            rows = jsonlib.loads(text)["dry_run"]["base_episodes"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise UserError(f"{path} is not a `grpolab check --save` report", fix) from None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise UserError(f"{path}: dry_run.base_episodes is not a list of episode rows", fix)
    else:
        raise UserError(f"calibration source not found: {path}", "pass a run directory or a `check --save` JSON file")
    usable = [r for r in rows if _classifiable(r)]
    if len(usable) < len(rows):
        err_console.print(f"skipped {len(rows) - len(usable)} malformed episode row(s) of {path}", markup=False)
    if not usable:
        raise UserError(f"{path} has no scored episodes to calibrate from", "run an eval or a training step first")
    return usable


def _classifiable(row: dict[str, Any]) -> bool:
    """Whether the simulator can read an episode row's class (a damaged row has the wrong types)."""
    from grpolab.trust.simulate import classify

    try:
        classify(row)
    except (AttributeError, TypeError, ValueError):
        return False
    return True


def _comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Metric rows a simulation can be held against: a step in range, finite numbers only (malformed values of a
    hand-edited or damaged metrics.jsonl are left out, not a crash)."""
    keep = []
    for r in rows:
        if 1 <= r["step"] <= MAX_SIM_STEPS:
            values = {k: v for k, v in r.items() if isinstance(v, (int, float)) and math.isfinite(v)}
            keep.append({**values, "step": r["step"]})
    return keep


def simulate(
    config: ConfigOpt = None,
    env: EnvOpt = None,
    seed: SeedOpt = None,
    weights: WeightsOpt = None,
    steps: Annotated[int, typer.Option("--steps", min=1, max=MAX_SIM_STEPS, help="GRPO iterations to simulate.")] = 100,
    runs: Annotated[
        int, typer.Option("--runs", min=1, max=MAX_SIM_RUNS, help="Seeded runs averaged (band = 10-90%).")
    ] = 16,
    beta: Annotated[
        float | None, typer.Option("--beta", callback=finite, help=f"{field_doc('grpo.beta')} (grpo.beta)")
    ] = None,
    lr: Annotated[float, typer.Option("--lr", callback=positive_finite, help=SimSettings.LR_DOC)] = 0.5,
    calibrate: Annotated[
        Path | None, typer.Option("--calibrate", help="Run dir or check report: initial class mix.")
    ] = None,
    real: Annotated[Path | None, typer.Option("--real", help="Run dir to compare with (sim-to-real gap).")] = None,
    json: JsonOpt = False,
) -> None:
    """Simulate GRPO on a behaviour-level policy whose class rewards are measured with the real reward."""
    from grpolab.envs import env_for
    from grpolab.models import default_token_counter
    from grpolab.rundir import RunDir
    from grpolab.trust.simulate import DEFAULT_PRIOR, fit_lr, measure_profiles, prior_from_rows, sim_to_real
    from grpolab.trust.simulate import simulate as run_sim

    cfg = resolve_config(config, env, seed=seed, weights=weights, grpo__beta=beta)
    source = calibrate or real
    prior = prior_from_rows(calibration_rows(source)) if source else DEFAULT_PRIOR
    profiles = measure_profiles(env_for(cfg), default_token_counter(), cfg.reward.length_unit)
    result = run_sim(profiles, prior, SimSettings(cfg, steps=steps, runs=runs, lr=lr))
    result["prior_source"] = str(source) if source else "documented default (SmolLM2-135M base: mostly free text)"
    if real is not None:
        real_rows = _comparable(RunDir(real).metrics())
        if not real_rows:
            raise UserError(f"{real} has no metrics.jsonl rows", "pass a run directory that has trained steps")
        result["sim_to_real"] = sim_to_real(result, real_rows)
        settings = SimSettings(cfg, steps=max(r["step"] for r in real_rows), runs=runs, lr=lr)
        fitted_lr, fitted_gap = fit_lr(profiles, prior, settings, real_rows)
        result["sim_to_real_fitted"] = {"lr": fitted_lr, "gap": fitted_gap}
    if json:
        print_json(result)
        return
    console.print("[bold]simulation[/bold] (behaviour-level policy; class rewards measured with the real reward)")
    for name, c in result["classes"].items():
        console.print(f"  {name:<18} reward {c['reward']:+.2f}   p {c['initial']:.2f} -> {c['final']:.2f}")
    last = result["iterations"][-1]
    console.print(
        f"after {steps} steps: reward {last['reward/mean']:+.2f}, kl {last['kl']:.3f}, "
        f"tool_call_prob {last['tool_call_prob']:.0%}, hack_mass {last['hack_mass']:.0%}, success {last['success']:.0%}"
    )
    for warning in result["warnings"]:
        console.print(f"[bold red]WARNING: {warning}[/bold red]")
    if "sim_to_real" in result:
        gap = {k: round(v, 3) for k, v in result["sim_to_real"].items()}
        fit = result["sim_to_real_fitted"]
        console.print(f"sim-to-real gap (mean |sim - real| per step) at lr={lr}: {gap}")
        console.print(f"best-fitting lr={fit['lr']:.3g}: gap { ({k: round(v, 3) for k, v in fit['gap'].items()}) }")
