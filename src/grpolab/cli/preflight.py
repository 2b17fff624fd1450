"""`grpolab check`: the preflight before any training (`grpolab.preflight.check`), printed or saved as JSON."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from grpolab.cli.options import (
    ConfigOpt,
    EnvOpt,
    JsonOpt,
    ModelOpt,
    PluginOpt,
    SeedOpt,
    WeightsOpt,
    console,
    print_json,
    resolve_config,
    writing_to,
)
from grpolab.envs import env_for
from grpolab.files.outputs import output_target, write_output
from grpolab.rewards.rubric import check_weights
from grpolab.simulator.forecast import forecast_summary, winners_line
from grpolab.vocabulary import FRAC_ZERO_STD, REWARD_MEAN, TOOL_CALL_PROB


def register(app: typer.Typer) -> None:
    app.command()(check)


def check(
    config: ConfigOpt = None,
    env: EnvOpt = None,
    model: ModelOpt = None,
    seed: SeedOpt = None,
    weights: WeightsOpt = None,
    prompts: Annotated[int, typer.Option("--prompts", min=1, help="Prompts for the learnability smoke test.")] = 4,
    group_size: Annotated[
        int | None, typer.Option("--group-size", min=2, help="G for the smoke test (default: config).")
    ] = None,
    allow_gameable: Annotated[
        bool, typer.Option("--allow-gameable", help="Exit 0 even when a probe beats honest work.")
    ] = False,
    save: Annotated[
        Path | None, typer.Option("--save", help="Also write the report as JSON here (e.g. runs/NAME/preflight.json).")
    ] = None,
    plugin: PluginOpt = None,
    json: JsonOpt = False,
) -> None:
    """Dry-run the reward, run the gameability probes and the shortcut probes, and the learnability smoke test on the
    base model. Exits 1 when a probe matches or beats honest work; a shortcut the reward pays (an edit of honest work
    that scores above it) is named with its margin and the components that pay for it."""
    from grpolab.engine.policy import engine_model  # torch: only for the commands that load a model
    from grpolab.preflight.check import check as run_check

    target = output_target(save, "--save") if save is not None else None  # before minutes of work
    cfg = resolve_config(config, env, model, seed, weights, plugins=plugin)
    environment = env_for(cfg)
    check_weights(cfg, environment)  # before the model loads
    policy, tokenizer = engine_model(cfg.model, cfg)
    report = run_check(policy, tokenizer, environment, cfg, prompts, group_size, forecast=forecast_summary)
    if target is not None:
        with writing_to(target.named, "--save"):
            write_output(target, jsonlib.dumps(report, indent=2, default=str) + "\n")
    if json:
        print_json(report)
    else:
        _print(report)
    if report["gameable"] and not allow_gameable:
        raise typer.Exit(1)


def _print(report: dict) -> None:
    # the console prints no markup: the model may be a user's path, task ids and probe names come from data
    head = f" env={report['env']} model={report['model']} weights={report['weights']}"
    console.print(Text("Reward check", style="bold") + Text(head))
    ref = report["dry_run"]["references"][0]
    console.print(f"reference transcript {ref['task_id']}: {ref['total']:+.2f}  {ref['breakdown']}")
    table = Table("probe", "worst task", "score", "honest", "margin", "verdict")
    for p in report["probes"]:
        verdict = Text("GAMEABLE", style="red") if p["gameable"] else Text("below honest", style="green")
        table.add_row(
            p["probe"], p["task_id"], f"{p['score']:+.2f}", f"{p['honest']:+.2f}", f"{p['margin']:+.2f}", verdict
        )
    console.print(table)
    for line in report["gameable"]:
        console.print(Text(line, style="red"))
    shortcuts = Table("shortcut (an edit of honest work)", "best task", "score", "honest", "margin", "paid by")
    for r in report.get("shortcuts", []):
        paid = ", ".join(f"{k} {v:+.3f}" for k, v in r["paying"].items()) if r["paid"] else "-"
        shortcuts.add_row(
            r["shortcut"], r["task_id"], f"{r['score']:+.3f}", f"{r['honest']:+.3f}", f"{r['margin']:+.3f}", paid
        )
    if report.get("shortcuts"):
        console.print(shortcuts)
    for line in report.get("shortcuts_paid", []):
        console.print(Text(line, style="yellow"))
    iso = report.get("isolation")
    if iso:
        color = "green" if iso["level"] == "strong" else "bold red"
        console.print(Text(f"sandbox: {iso['summary']}", style=color))
        if iso["level"] != "strong":
            console.print(
                Text("WARNING: model-written code runs with WEAK isolation on this machine", style="bold red")
            )
    learn = report["learnability"]
    console.print(
        f"learnability ({learn['prompts']} prompts x G={learn['group_size']}): "
        f"mean reward {learn[REWARD_MEAN]:+.2f}, tool_call_prob (base prior) {learn[TOOL_CALL_PROB]:.0%}, "
        f"frac_zero_std {learn[FRAC_ZERO_STD]:.0%}, pass@G {learn['pass_at_g']}, "
        f"all-pass {len(learn['all_pass'])}, all-fail {len(learn['all_fail'])}"
    )
    console.print(f"recommendation: {learn['recommendation']}")
    fc = report.get("forecast") or {}
    if "error" in fc:
        console.print(f"forecast: {fc['error']}", markup=False)
    elif fc:
        pilot = fc["pilot"]
        grows = ", ".join(f"{c} {a:.0%} -> {b:.0%}" for c, (a, b) in fc["growing"].items()) or "no class"
        branch = report.get("branch_episodes") or []
        cost = f"sampled in {pilot['seconds']:.0f} s" + (
            f"; {len(branch)} more on the no-thought branch in {report['branch_seconds']:.0f} s" if branch else ""
        )
        console.print(
            f"forecast over {fc['steps']} GRPO steps from the {pilot['episodes']} smoke-test episodes "
            f"({cost}): growing: {grows}",
            markup=False,
        )
        if len(fc.get("winners") or {}) > 1:
            console.print(f"  {winners_line(fc['winners'], fc['runs'])}", markup=False)
        for line in [*fc["warnings"], *fc["notes"]]:
            console.print(f"  {line}", markup=False)
        console.print(f"  {fc['accuracy_line']}", markup=False)
