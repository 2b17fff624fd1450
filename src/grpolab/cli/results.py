"""After a run: `compare` (side-by-side trajectories of two policies) and `report` (the run's HTML report)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Annotated

import typer
from rich.columns import Columns
from rich.panel import Panel
from rich.text import Text

from grpolab.cli.options import (
    ConfigOpt,
    JsonOpt,
    PluginOpt,
    console,
    err_console,
    load_plugin_options,
    print_json,
    resolve_config,
    run_plugins,
    writing_to,
)
from grpolab.envs import env_for
from grpolab.files.outputs import output_target, write_output
from grpolab.metrics import episode_row
from grpolab.rundir import RunDir
from grpolab.vocabulary import HELDOUT_SUCCESS


def register(app: typer.Typer) -> None:
    app.command()(compare)
    app.command()(report)


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
    from grpolab.engine.evaluate import evaluate  # torch: only for the commands that load a model
    from grpolab.engine.policy import apply_warm_start, load_policy
    from grpolab.report.changes import change_lines, changes_html, what_changed  # every env's module
    from grpolab.report.trajectories import page, side_by_side

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
    from grpolab.report.html import render_report

    load_plugin_options(plugin)  # a run is data: the report reads its rows and imports none of its plugins

    skipped: list[str] = []
    with writing_to(RunDir(run).report_path, "--run"):
        written = render_report(run, skipped)
    for line in skipped:
        err_console.print(f"skipped: {line}", markup=False)
    console.print(f"wrote {written}")
