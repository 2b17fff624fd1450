"""`grpolab simulate`: the policy & reward simulator, calibrated on real episodes, with a sim-to-real check."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from grpolab.behaviour import classify_episode
from grpolab.cli.options import (
    ConfigOpt,
    EnvOpt,
    JsonOpt,
    PluginOpt,
    SeedOpt,
    WeightsOpt,
    console,
    err_console,
    finite,
    positive_finite,
    print_json,
    resolve_config,
    run_plugins,
)
from grpolab.config import LabConfig, field_doc
from grpolab.envs import env_for
from grpolab.errors import UserError
from grpolab.files.limits import MAX_DATA_BYTES
from grpolab.files.nesting import check_nesting
from grpolab.files.user_input import read_user_file
from grpolab.rundir import RunDir
from grpolab.rundir.snapshot import drawable_metrics
from grpolab.simulator.forecast import (
    demo_pilot,
    env_references,
    env_rescorer,
    forecast,
    load_accuracy,
    pilot_from_rows,
    reach_shortcuts,
    winners_line,
    with_branch,
)
from grpolab.simulator.simulate import (
    DEFAULT_KL_SCALE,
    DEFAULT_LR,
    DEFAULT_PRIOR,
    DEFAULT_RUNS,
    SimSettings,
    fit_lr,
    measure_profiles,
    prior_from_rows,
    sim_to_real,
)
from grpolab.simulator.simulate import simulate as run_sim
from grpolab.vocabulary import HACK_MASS, KL, REWARD_MEAN, SIM_TO_REAL, SUCCESS, TOOL_CALL_PROB

MAX_SIM_STEPS = 10_000
MAX_SIM_RUNS = 256
"""Bounds on `simulate`: its arrays grow with steps x runs (16 runs x 1,000 steps take about 0.1 s)."""


def register(app: typer.Typer) -> None:
    app.command()(simulate)


REPORT_FIX = "pass a run directory or a `grpolab check --save` report"


def check_report(path: Path) -> dict[str, Any]:
    """A `check --save` report, read as untrusted input."""
    text = read_user_file(path, "calibration report", MAX_DATA_BYTES, REPORT_FIX)
    check_nesting(text, f"calibration report {path}", REPORT_FIX)
    try:
        report = jsonlib.loads(text)
    except (ValueError, RecursionError):
        raise UserError(f"{path} is not a `grpolab check --save` report", REPORT_FIX) from None
    if not isinstance(report, dict):
        raise UserError(f"{path} is not a `grpolab check --save` report", REPORT_FIX)
    return report


def calibration_rows(path: Path) -> list[dict[str, Any]]:
    """Scored episode rows from a run dir (the first GRPO step's episodes: samples of the policy GRPO starts from;
    else the greedy eval/0.jsonl) or a `check --save` JSON file (its smoke test's episodes)."""
    return pilot_rows(path)[0]


def pilot_rows(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(`calibration_rows`, the episodes on the no-thought branch that a `check --save` report keeps: [] for a run dir
    or a report without them, `grpolab.engine.branches`), the report read once."""
    branch: list[dict[str, Any]] = []
    if path.is_dir():
        run = RunDir(path)
        rows = [r for r in run.episodes() if r.get("step") == 1] or run.eval_rows("0")
    elif path.exists():
        report = check_report(path)
        kept = report.get("branch_episodes")
        branch = [r for r in kept if isinstance(r, dict) and _classifiable(r)] if isinstance(kept, list) else []
        try:
            rows = report.get("pilot_episodes") or report["dry_run"]["base_episodes"]
        except (KeyError, TypeError):
            raise UserError(f"{path} is not a `grpolab check --save` report", REPORT_FIX) from None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise UserError(
                f"{path}: pilot_episodes (or dry_run.base_episodes) is not a list of episode rows", REPORT_FIX
            )
    else:
        raise UserError(f"calibration source not found: {path}", "pass a run directory or a `check --save` JSON file")
    usable = [r for r in rows if _classifiable(r)]
    if len(usable) < len(rows):
        err_console.print(f"skipped {len(rows) - len(usable)} malformed episode row(s) of {path}", markup=False)
    if not usable:
        raise UserError(f"{path} has no scored episodes to calibrate from", "run an eval or a training step first")
    return usable, branch


def _classifiable(row: dict[str, Any]) -> bool:
    """Whether the simulator can read an episode row's class (a damaged row has the wrong types)."""
    try:
        classify_episode(row)
    except (AttributeError, TypeError, ValueError):
        return False
    return True


def comparable_rows(real: Path) -> list[dict[str, Any]]:
    """Metric rows of a real run a simulation can be held against, read by the report's and the lab's reader
    (`rundir.snapshot.drawable_metrics`): a step in range, values that are finite and within ±MAX_DRAWN. What was
    left out is named on stderr; a run with nothing left to compare is a UserError."""
    problems: list[str] = []
    rows = [r for r in drawable_metrics(RunDir(real), problems) if 1 <= r["step"] <= MAX_SIM_STEPS]
    for line in problems:
        err_console.print(f"skipped: {line}")
    if not rows:
        raise UserError(f"{real} has no metrics.jsonl rows", "pass a run directory that has trained steps")
    if not any(key in r for r in rows for key in SIM_TO_REAL):
        raise UserError(
            f"{real}/metrics.jsonl has no values to compare with ({', '.join(SIM_TO_REAL)})",
            "pass a run directory whose metrics.jsonl is intact",
        )
    return rows


def _forecast(
    source: Path,
    config: Path | None,
    env: str | None,
    seed: int | None,
    weights: str | None,
    plugin: list[str] | None,
    beta: float | None,
    steps: int | None,
    runs: int,
    json: bool,
) -> None:
    """`simulate --pilot`: the forecast from the pilot's episodes (`grpolab.simulator.forecast`)."""
    from grpolab.models import model_token_counter  # torch: only where a tokenizer counts tokens

    base = (run_plugins(source) or RunDir(source).read_config()) if source.is_dir() and config is None else None
    cfg = resolve_config(config, env, seed=seed, weights=weights, base=base, plugins=plugin, grpo__beta=beta)
    steps = steps_of(steps, cfg)
    environment = env_for(cfg)
    rows, branch = pilot_rows(source)
    sampled = pilot_from_rows(rows, str(source), environment.thought_required)
    count_tokens = model_token_counter(cfg.model)
    rescore, reference = env_rescorer(environment, cfg, count_tokens), env_references(environment, count_tokens)
    reached = reach_shortcuts(sampled, rows, rescore, environment.thought_tag, environment.thought_required, reference)
    reached = with_branch(reached, branch, environment.thought_required)
    result = forecast(reached, cfg, steps, runs)
    if json:
        print_json(result)
        return
    print_forecast(result)


def profile_accuracy_line() -> str:
    """What the class-profile simulator scored on real runs, and where the forecast is."""
    acc = load_accuracy()
    sim = (acc.get("baselines") or {}).get("simulator")
    if not sim:
        return "class-profile simulator: not scored on real runs in this checkout; --pilot forecasts from samples"
    return (
        f"class-profile simulator on {sim['runs']} real runs: direction {sim['direction']:.0%}, winner "
        f"{sim['winner']:.0%}; --pilot RUN (or a `check --save` report) forecasts from your model's own samples "
        f"(direction {acc['scores']['direction']:.0%}, winner {acc['scores']['winner']:.0%})"
    )


def print_forecast(result: dict[str, Any]) -> None:
    """The forecast as `simulate --pilot` and `check` print it: classes, what grows, what it cannot know, accuracy."""
    p = result["pilot"]
    console.print(Text("forecast", style="bold") + Text(f" from {p['episodes']} pilot episodes ({p['source']})"))
    for name, c in result["classes"].items():
        how = "reached, not sampled" if c["reached_by_edit"] else f"{c['pilot_episodes']} sampled"
        console.print(
            f"  {name:<18} reward {c['reward']:+.2f}   p {c['initial']:.2f} -> {c['final']:.2f}   ({how})", markup=False
        )
    last = result["iterations"][-1]
    console.print(
        f"after {result['settings']['steps']} steps: reward {last[REWARD_MEAN]:+.2f}, "
        f"tool_call_prob {last[TOOL_CALL_PROB]:.0%}, hack_mass {last[HACK_MASS]:.0%}, success {last[SUCCESS]:.0%}"
    )
    if result["growing"]:
        grows = ", ".join(f"{c} {a:.0%} -> {b:.0%}" for c, (a, b) in result["growing"].items())
        console.print(f"growing: {grows}", markup=False)
    if result.get("winners"):
        console.print(winners_line(result["winners"], result["settings"]["runs"]), markup=False)
    if result["unknown"]:
        unknown = ", ".join(result["unknown"])
        console.print(f"cannot forecast (no pilot episode, no edit or reference reaches them): {unknown}")
    for note in result["notes"]:
        console.print(f"note: {note}", markup=False)
    for warning in result["warnings"]:
        console.print(Text(f"WARNING: {warning}", style="bold red"))
    console.print(result["accuracy_line"], markup=False)


def steps_of(steps: int | None, cfg: LabConfig) -> int:
    """The iterations to forecast: the flag's, else the config's GRPO steps (what a run of it would take), as the lab
    starts its slider."""
    return steps if steps is not None else min(cfg.train.steps, MAX_SIM_STEPS)


def simulate(
    config: ConfigOpt = None,
    env: EnvOpt = None,
    seed: SeedOpt = None,
    weights: WeightsOpt = None,
    steps: Annotated[
        int | None,
        typer.Option("--steps", min=1, max=MAX_SIM_STEPS, help="GRPO iterations to simulate (default: train.steps)."),
    ] = None,
    runs: Annotated[
        int, typer.Option("--runs", min=1, max=MAX_SIM_RUNS, help="Seeded runs averaged (band = 10-90%).")
    ] = DEFAULT_RUNS,
    beta: Annotated[
        float | None, typer.Option("--beta", callback=finite, help=f"{field_doc('grpo.beta')} (grpo.beta)")
    ] = None,
    lr: Annotated[float, typer.Option("--lr", callback=positive_finite, help=SimSettings.LR_DOC)] = DEFAULT_LR,
    calibrate: Annotated[
        Path | None, typer.Option("--calibrate", help="Run dir or check report: initial class mix.")
    ] = None,
    real: Annotated[Path | None, typer.Option("--real", help="Run dir to compare with (sim-to-real gap).")] = None,
    pilot: Annotated[
        Path | None,
        typer.Option("--pilot", help="Run dir (its first step) or `check --save` report: forecast from these samples."),
    ] = None,
    plugin: PluginOpt = None,
    json: JsonOpt = False,
) -> None:
    """Forecast what GRPO does to your model under these weights (--pilot: from its own sampled episodes, re-scored;
    the demo's config: from the shipped samples of its seeded model), or simulate GRPO on fixed class profiles
    measured with the real reward."""
    if pilot is not None:
        _forecast(pilot, config, env, seed, weights, plugin, beta, steps, runs, json)
        return
    # compared with a real run, the simulation follows that run's config unless a file or flag says otherwise
    # and simulating it runs its env: its recorded plugins are imported, and named
    base = (run_plugins(real) or RunDir(real).read_config()) if real is not None and config is None else None
    cfg = resolve_config(config, env, seed=seed, weights=weights, base=base, plugins=plugin, grpo__beta=beta)
    steps = steps_of(steps, cfg)
    source = calibrate or real
    shipped = demo_pilot(cfg) if source is None else None
    if shipped is not None:  # the demo's own samples, as the lab forecasts it: re-scored under these weights
        result = forecast(shipped, cfg, steps, runs)
        if json:
            print_json(result)
        else:
            print_forecast(result)
        return
    from grpolab.models import model_token_counter

    prior = prior_from_rows(calibration_rows(source)) if source else DEFAULT_PRIOR
    environment = env_for(cfg)
    profiles = measure_profiles(
        environment,
        model_token_counter(cfg.model),
        cfg.reward.length_unit,
        weights=cfg.reward.weights,
        thought_min_words=cfg.reward.thought_min_words,
    )
    result = run_sim(profiles, prior, SimSettings(cfg, steps=steps, runs=runs, lr=lr))
    result["prior_source"] = (
        str(source) if source else "documented default (the demo's first GRPO step, after SFT seeding)"
    )
    if real is not None:
        real_rows = comparable_rows(real)
        result["sim_to_real"] = sim_to_real(result, real_rows)
        settings = SimSettings(cfg, steps=max(r["step"] for r in real_rows), runs=runs, lr=lr)
        last = max(real_rows, key=lambda r: r["step"])
        at_last = {row["step"]: row for row in result["iterations"]}.get(last["step"])
        result["sim_to_real_fitted"] = fit_lr(profiles, prior, settings, real_rows)
        result["sim_to_real_last_step"] = {
            "step": last["step"],
            **{key: {"sim": at_last[key] if at_last else None, "real": last.get(key)} for key in SIM_TO_REAL},
        }
    if json:
        print_json(result)
        return
    console.print(
        Text("simulation", style="bold") + " (behaviour-level policy; class rewards measured with the real reward)"
    )
    for name, c in result["classes"].items():
        console.print(f"  {name:<18} reward {c['reward']:+.2f}   p {c['initial']:.2f} -> {c['final']:.2f}")
    last = result["iterations"][-1]
    console.print(
        f"after {steps} steps: reward {last[REWARD_MEAN]:+.2f}, kl {last[KL]:.3f}, "
        f"tool_call_prob {last[TOOL_CALL_PROB]:.0%}, hack_mass {last[HACK_MASS]:.0%}, success {last[SUCCESS]:.0%}"
    )
    for warning in result["warnings"]:
        console.print(Text(f"WARNING: {warning}", style="bold red"))
    console.print(profile_accuracy_line(), markup=False)
    if "sim_to_real" in result:
        gap = {k: round(v, 3) for k, v in result["sim_to_real"].items()}
        fit = result["sim_to_real_fitted"]
        console.print(
            f"sim-to-real gap (mean |sim - real| per step) at lr={lr}, kl_scale={DEFAULT_KL_SCALE:.3g}: {gap}"
        )
        last = result["sim_to_real_last_step"]
        if all(last[k]["sim"] is not None and last[k]["real"] is not None for k in (KL, SUCCESS)):
            console.print(
                f"at step {last['step']}: kl sim {last[KL]['sim']:.4f} vs real {last[KL]['real']:.4f}, "
                f"success sim {last[SUCCESS]['sim']:.0%} vs real {last[SUCCESS]['real']:.0%}"
            )
        console.print(
            f"best fit: lr={fit['lr']:.3g}, kl_scale={fit['kl_scale']:.3g}: gap "
            f"{ ({k: round(v, 3) for k, v in fit['gap'].items()}) }"
        )
