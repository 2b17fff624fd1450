"""Trusting the result: `check` (preflight), `compare` (side-by-side trajectories) and `report` (HTML)."""

from __future__ import annotations

import html
import json as jsonlib
from pathlib import Path
from typing import Annotated

import typer
from rich.columns import Columns
from rich.panel import Panel
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
    err_console,
    load_plugin_options,
    print_json,
    resolve_config,
    run_plugins,
    writing_to,
)
from grpolab.engine.evaluate import evaluate
from grpolab.engine.policy import apply_warm_start, engine_model, load_policy
from grpolab.envs import env_for
from grpolab.files.outputs import output_target, write_output
from grpolab.metrics import episode_row
from grpolab.report.changes import change_lines, changes_html, what_changed
from grpolab.report.html import render_report
from grpolab.report.trajectories import page, side_by_side
from grpolab.rewards.rubric import check_weights
from grpolab.rundir import RunDir
from grpolab.trust.forecast import winners_line
from grpolab.trust.preflight import check as run_check
from grpolab.vocabulary import FRAC_ZERO_STD, HELDOUT_SUCCESS, REWARD_MEAN, TOOL_CALL_PROB


def register(app: typer.Typer) -> None:
    app.command()(check)
    app.command()(compare)
    app.command()(report)


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
    target = output_target(save, "--save") if save is not None else None  # before minutes of work
    cfg = resolve_config(config, env, model, seed, weights, plugins=plugin)
    environment = env_for(cfg)
    check_weights(cfg, environment)  # before the model loads
    policy, tokenizer = engine_model(cfg.model, cfg)
    report = run_check(policy, tokenizer, environment, cfg, prompts, group_size)
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
        console.print(
            f"forecast over {fc['steps']} GRPO steps from the {pilot['episodes']} smoke-test episodes "
            f"(sampled in {pilot['seconds']:.0f} s): growing: {grows}",
            markup=False,
        )
        if len(fc.get("winners") or {}) > 1:
            console.print(f"  {winners_line(fc['winners'], fc['runs'])}", markup=False)
        for line in [*fc["warnings"], *fc["notes"]]:
            console.print(f"  {line}", markup=False)
        console.print(f"  {fc['accuracy_line']}", markup=False)


SFT_START = "sft-start"
"""What `compare` calls a run's SFT-seeded start when it compares with it instead of the base."""


def compare(
    run: Annotated[str, typer.Option("--run", help="Trained run directory (or a model name).")],
    against: Annotated[
        str,
        typer.Option(
            "--against",
            help="'base' (the run's SFT-seeded start where the base solves no held-out prompt), a run dir or a model.",
        ),
    ] = "base",
    limit: Annotated[int, typer.Option("--limit", min=1, help="Held-out prompts.")] = 6,
    html_out: Annotated[Path | None, typer.Option("--html", help="Write the side-by-side page here.")] = None,
    config: ConfigOpt = None,
    plugin: PluginOpt = None,
    json: JsonOpt = False,
) -> None:
    """Side-by-side trajectories of two policies on the same held-out prompts (greedy), with rewards and reasons."""
    target = output_target(html_out, "--html") if html_out is not None else None  # before minutes of work
    base_cfg = resolve_config(config, plugins=plugin)
    for side in (run, against):  # comparing runs each run named: its recorded plugins are imported, and named
        run_plugins(Path(side))
    right_model, right_tok, cfg = load_policy(run, base_cfg)  # a run brings its own config
    left_model, left_tok, _ = load_policy(cfg.model if against == "base" else against, cfg)
    env = env_for(cfg)
    left_sum, left_eps = evaluate(left_model, left_tok, env, cfg, "heldout", limit)
    notes: list[str] = []
    if against == "base" and left_sum[HELDOUT_SUCCESS] == 0:
        # a base that never does the task makes learning it look like drift (calls 0 -> 2): where the run has an
        # SFT warm start, GRPO's own changes are the ones from that start
        trained = RunDir(Path(run))
        warm = trained.warm_start() if trained.is_run() else None
        never = f"the base model solved none of the {len(left_eps)} held-out prompts"
        if warm is None:
            notes.append(f"{never}: every change below includes learning the task (the run has no SFT warm start)")
        else:
            notes.append(f"{never}: comparing with the run's SFT-seeded start ({SFT_START}) instead")
            against = SFT_START
            left_model = apply_warm_start(left_model, cfg, warm)
            left_sum, left_eps = evaluate(left_model, left_tok, env, cfg, "heldout", limit)
    right_sum, right_eps = evaluate(right_model, right_tok, env, cfg, "heldout", limit)
    left_rows, right_rows = [episode_row(e) for e in left_eps], [episode_row(e) for e in right_eps]
    changes = what_changed(left_rows, right_rows, cfg, env.thought_required, (against, run))
    if target is not None:
        body = f"<h1>{html.escape(against)} vs {html.escape(str(run))}</h1>"
        body += side_by_side(left_rows, right_rows, against, run, limit)
        body += changes_html(changes, [])
        with writing_to(target.named, "--html"):
            write_output(target, page(f"{against} vs {run}", body))
    if json:
        print_json(
            {
                "notes": notes,
                "left": {"name": against, **left_sum, "episodes": left_rows},
                "right": {"name": run, **right_sum, "episodes": right_rows},
                "what_changed": [
                    {"name": c.name, "before": c.before, "after": c.after, "flagged": c.flagged}
                    for c in changes.changes
                ],
            }
        )
        return
    for note in notes:
        console.print(note, markup=False, style="yellow")
    # model text, prompts and run names are data: Text, never markup (an answer may contain "[/x]")
    for a, b in zip(left_rows, right_rows):
        console.print(Text(str(a["task_id"]), style="bold") + Text(f": {a['prompt']} (expected {a['answer']})"))
        panels = [
            Panel(
                Text(r["text"]),
                title=Text(f"{name}  {r['breakdown']}"),
                subtitle=Text(r["reasons"]["completion"][:60]),
                width=60,
            )
            for name, r in ((against, a), (run, b))
        ]
        console.print(Columns(panels))
    console.print(
        f"held-out success: {against} {left_sum[HELDOUT_SUCCESS]:.0%}  vs  {run} {right_sum[HELDOUT_SUCCESS]:.0%}",
        markup=False,
    )
    for line in change_lines(changes):
        console.print(line, markup=False, style="bold red" if "FLAGGED" in line else None)


def report(run: Annotated[Path, typer.Option("--run", help="Run directory.")], plugin: PluginOpt = None) -> None:
    """(Re)write runs/NAME/report.html from the run's artifacts (malformed ones are named and left out)."""
    load_plugin_options(plugin)  # a run is data: the report reads its rows and imports none of its plugins

    skipped: list[str] = []
    with writing_to(RunDir(run).report_path, "--run"):
        written = render_report(run, skipped)
    for line in skipped:
        err_console.print(f"skipped: {line}", markup=False)
    console.print(f"wrote {written}")
