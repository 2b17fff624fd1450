"""`grpolab simulate`: the policy & reward simulator, calibrated on real episodes, with a sim-to-real check."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated, Any

import typer

from grpolab.cli.options import ConfigOpt, EnvOpt, JsonOpt, SeedOpt, WeightsOpt, console, print_json, resolve_config
from grpolab.errors import UserError


def register(app: typer.Typer) -> None:
    app.command()(simulate)


def calibration_rows(path: Path) -> list[dict[str, Any]]:
    """Scored episode rows from a run dir (eval/0.jsonl, else step-1 episodes) or a `check --save` JSON file."""
    from grpolab.rundir import read_jsonl

    if path.is_dir():
        rows = read_jsonl(path / "eval" / "0.jsonl") or [
            r for r in read_jsonl(path / "episodes.jsonl") if r.get("step") == 1
        ]
    elif path.is_file():
        try:
            rows = jsonlib.loads(path.read_text())["dry_run"]["base_episodes"]
        except (ValueError, KeyError, TypeError):
            raise UserError(f"{path} is not a `grpolab check --save` report", "pass a run directory or such a report")
    else:
        raise UserError(f"calibration source not found: {path}", "pass a run directory or a `check --save` JSON file")
    if not rows:
        raise UserError(f"{path} has no scored episodes to calibrate from", "run an eval or a training step first")
    return rows


def simulate(
    config: ConfigOpt = None,
    env: EnvOpt = None,
    seed: SeedOpt = None,
    weights: WeightsOpt = None,
    steps: Annotated[int, typer.Option("--steps", help="GRPO iterations to simulate.")] = 100,
    runs: Annotated[int, typer.Option("--runs", help="Seeded runs averaged (band = 10-90%).")] = 16,
    beta: Annotated[float | None, typer.Option("--beta", help="KL coefficient (default: grpo.beta).")] = None,
    lr: Annotated[float, typer.Option("--lr", help="Step size on the class logits (simulator units).")] = 0.5,
    calibrate: Annotated[
        Path | None, typer.Option("--calibrate", help="Run dir or check report: initial class mix.")
    ] = None,
    real: Annotated[Path | None, typer.Option("--real", help="Run dir to compare with (sim-to-real gap).")] = None,
    json: JsonOpt = False,
) -> None:
    """Simulate GRPO on a behaviour-level policy whose class rewards are measured with the real reward."""
    from grpolab.engine.loop import env_for
    from grpolab.models import load_tokenizer
    from grpolab.rundir import read_jsonl
    from grpolab.trust.simulate import (
        DEFAULT_PRIOR,
        SimSettings,
        fit_lr,
        measure_profiles,
        prior_from_rows,
        sim_to_real,
    )
    from grpolab.trust.simulate import simulate as run_sim

    cfg = resolve_config(config, env, seed=seed, weights=weights)
    source = calibrate or real
    prior = prior_from_rows(calibration_rows(source)) if source else DEFAULT_PRIOR
    tok = load_tokenizer()
    profiles = measure_profiles(env_for(cfg), lambda text: len(tok(text, add_special_tokens=False).input_ids))
    result = run_sim(profiles, prior, SimSettings.from_config(cfg, steps=steps, runs=runs, beta=beta, lr=lr))
    result["prior_source"] = str(source) if source else "documented default (SmolLM2-135M base: mostly free text)"
    if real is not None:
        real_rows = read_jsonl(real / "metrics.jsonl")
        if not real_rows:
            raise UserError(f"{real} has no metrics.jsonl rows", "pass a run directory that has trained steps")
        result["sim_to_real"] = sim_to_real(result, real_rows)
        settings = SimSettings.from_config(cfg, steps=max(r["step"] for r in real_rows), runs=runs, beta=beta, lr=lr)
        fitted_lr, fitted_gap = fit_lr(profiles, prior, settings, real_rows)
        result["sim_to_real_fitted"] = {"lr": fitted_lr, "gap": fitted_gap}
    if json:
        print_json(result)
        return
    console.print("[bold]simulation[/bold] (behaviour-level policy; class rewards measured with the real reward)")
    for name, c in result["classes"].items():
        console.print(f"  {name:<18} reward {c['reward']:+.2f}   p {c['initial']:.2f} -> {c['final']:.2f}")
    last = result["iterations"][-1]
    console.print(f"after {steps} steps: reward {last['reward']:+.2f}, kl {last['kl']:.3f}, tool_call_prob "
                  f"{last['tool_call_prob']:.0%}, hack_mass {last['hack_mass']:.0%}, success {last['success']:.0%}")  # fmt: skip
    if "sim_to_real" in result:
        gap = {k: round(v, 3) for k, v in result["sim_to_real"].items()}
        fit = result["sim_to_real_fitted"]
        console.print(f"sim-to-real gap (mean |sim - real| per step) at lr={lr}: {gap}")
        console.print(f"best-fitting lr={fit['lr']:.3g}: gap { ({k: round(v, 3) for k, v in fit['gap'].items()}) }")
