"""The `grpolab` command line. Commands are thin: they resolve the config, call the library and print."""

from __future__ import annotations

import json as jsonlib
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from grpolab.cli import agent as cli_agent
from grpolab.cli import export as cli_export
from grpolab.cli import lab as cli_lab
from grpolab.cli import preflight as cli_preflight
from grpolab.cli import results as cli_results
from grpolab.cli import sim as cli_sim
from grpolab.cli import train as cli_train
from grpolab.cli.inputs import completion_text, tool_arguments
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
    print_json,
    resolve_config,
)
from grpolab.cli.supervise import run_supervised
from grpolab.config import config_to_dict
from grpolab.envs import SPLITS, Environment, env_for, env_names, get_env
from grpolab.envs.base import EpisodeState
from grpolab.errors import UserError
from grpolab.rewards.rubric import check_weights
from grpolab.rewards.score import score_transcript
from grpolab.scaffold import new_env
from grpolab.tools import ToolBox, failure_text

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="grpolab: GRPO for tool-calling agents on open-weight models, with rewards you can trust.",
)
tools_app = typer.Typer(no_args_is_help=True, help="Run an environment's tools by hand.")
reward_app = typer.Typer(no_args_is_help=True, help="Score transcripts with the configured reward.")
app.add_typer(tools_app, name="tools")
app.add_typer(reward_app, name="reward")
cli_train.register(app)
cli_preflight.register(app)
cli_results.register(app)
cli_sim.register(app)
cli_export.register(app)
cli_lab.register(app)
cli_agent.register(app)


@app.command()
def config(
    config: ConfigOpt = None,
    env: EnvOpt = None,
    model: ModelOpt = None,
    seed: SeedOpt = None,
    weights: WeightsOpt = None,
    plugin: PluginOpt = None,
    json: JsonOpt = False,
) -> None:
    """Print the resolved configuration (defaults < TOML file < flags), its reward weights checked against the
    environment's rubric."""
    cfg = resolve_config(config, env, model, seed, weights, plugins=plugin)
    environment = env_for(cfg)
    check_weights(cfg, environment)  # an unknown reward name is refused here as where it is scored
    if json:
        print_json(config_to_dict(cfg))
        return
    for section, values in config_to_dict(cfg).items():
        # values are the user's (model names, data paths) and "[reward]" would read as a markup tag
        line = f"{section} = {values!r}" if not isinstance(values, dict) else f"[{section}] {values}"
        console.print(line, markup=False)
    from grpolab.engine.policy import resolve_precision  # torch: only for the precision line

    try:  # on a CPU with native bf16, auto is settled by a probe that loads the model
        choice = resolve_precision(cfg, environment)
    except UserError as exc:  # the config is printed all the same: a model that does not load is train's error
        console.print(f"train.precision {cfg.train.precision}: not resolved here ({exc})", markup=False)
        return
    console.print(f"train.precision {choice.requested} -> {choice.chosen} on this host: {choice.why}", markup=False)
    from grpolab.engine.device import engine_device
    from grpolab.engine.precision import choose_sft_precision

    sft = choose_sft_precision(cfg.train.sft_precision, choice.chosen, engine_device(cfg.train.device).type)
    console.print(f"train.sft_precision {sft.requested} -> {sft.chosen} on this host: {sft.why}", markup=False)


@app.command("new-env")
def new_env_command(
    name: Annotated[str, typer.Argument(help="The folder to write (letters, digits, - and _).")],
    into: Annotated[
        Path, typer.Option("--into", help="The existing folder to write it in (never made for you).")
    ] = Path("."),
    stateful: Annotated[
        bool, typer.Option("--stateful", help="An environment with state: an order desk, one sqlite db per episode.")
    ] = False,
) -> None:
    """Write a working environment to edit: tools, tasks (JSONL), a reward plugin, a config and tests (--stateful:
    an order desk on sqlite, its env in shop.py, a database per episode)."""
    folder = new_env(name, into, stateful)
    files = "shop.py, schema.sql, seed.sql" if stateful else "tools.py, rewards.py"
    console.print(f"wrote {folder}/: {files}, tasks.jsonl, config.toml, tests, README.md", markup=False)
    console.print(f"next: grpolab check --config {folder / 'config.toml'} --model tiny", markup=False)


@app.command()
def envs(json: JsonOpt = False) -> None:
    """List the environments."""
    rows = []
    for name in env_names():
        try:
            e = get_env(name)
        except UserError as exc:  # an environment that needs data it cannot find still gets listed
            rows.append({"name": name, "description": f"unavailable: {exc}", "tools": [], "train": 0, "heldout": 0})
            continue
        rows.append(
            {
                "name": name,
                "description": e.description,
                "tools": list(_offered_tools(e).tools),
                "train": len(e.tasks("train")),
                "heldout": len(e.tasks("heldout")),
            }
        )
    if json:
        print_json(rows)
        return
    table = Table("env", "tools", "train", "held-out", "description")
    for r in rows:
        cells = (r["name"], ", ".join(r["tools"]), str(r["train"]), str(r["heldout"]), r["description"])
        table.add_row(*map(Text, cells))  # data, never markup
    console.print(table)


def _offered_tools(e: Environment) -> ToolBox:
    """The tools an environment offers (a stateful one's, read from a fresh episode of its first task)."""
    toolbox = getattr(e, "toolbox", None)
    if toolbox is None and e.stateful:
        return e.toolbox_for(next(iter(e.all_tasks().values())))
    return toolbox if toolbox is not None else ToolBox([])


@app.command()
def tasks(
    config: ConfigOpt = None,
    env: EnvOpt = None,
    seed: SeedOpt = None,
    split: Annotated[str, typer.Option("--split", help="train or heldout.")] = "train",
    limit: Annotated[int | None, typer.Option("--limit", min=0, help="Show at most this many.")] = None,
    plugin: PluginOpt = None,
    json: JsonOpt = False,
) -> None:
    """List an environment's tasks with their answers and reference transcripts."""
    cfg = resolve_config(config, env, seed=seed, plugins=plugin)
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}", "use --split train or --split heldout")
    e = env_for(cfg)
    items = e.tasks(split)[:limit]  # type: ignore[arg-type]
    rows = [
        {
            "id": t.id,
            "kind": t.kind,
            "prompt": t.prompt,
            "answer": t.answer,
            "reference_transcript": e.reference_transcript(t),
        }
        for t in items
    ]
    if json:
        print_json(rows)
        return
    table = Table("id", "prompt", "answer")
    for r in rows:
        table.add_row(Text(r["id"]), Text(r["prompt"]), Text(str(r["answer"])))  # data (a prompt may hold "[/x]")
    console.print(table)


@tools_app.command("run")
def tools_run(
    name: Annotated[str, typer.Argument(help="Tool name.")],
    args: Annotated[str, typer.Argument(help="Arguments as a JSON object.")],
    config: ConfigOpt = None,
    env: EnvOpt = None,
    plugin: PluginOpt = None,
    json: JsonOpt = False,
) -> None:
    """Run one tool with JSON arguments and print its response."""
    cfg = resolve_config(config, env, plugins=plugin)
    e = env_for(cfg)
    offered = _offered_tools(e)
    tool = offered.get(name)
    if tool is None:
        raise UserError(f"unknown tool {name!r} in env {cfg.env!r}", f"use one of: {', '.join(offered.tools)}")
    arguments = tool_arguments(args)
    problem = tool.validation_error(arguments)
    if problem:
        raise UserError(f"tool arguments do not fit {name}'s schema: {problem}", f"see `grpolab envs` for {name}")
    if not e.stateful:
        _print_response(tool.run(arguments), json)
        return
    # the tool runs on a fresh episode's state, which is gone once it answers
    err_console.print(f"env {cfg.env!r} is stateful: {name} ran on a fresh episode", markup=False)
    episode = e.start_episode(next(iter(e.all_tasks().values())))
    try:
        response = episode.toolbox.execute(name, arguments)
    finally:
        failure = _close_failure(episode)
    _print_response(response, json)  # what the tool answered is shown even when the close that follows failed
    if failure:
        raise UserError(
            f"env {cfg.env!r}: the episode's close raised {failure} (after {name} answered)",
            "fix the close function the environment's start_episode gives its EpisodeState",
        )


def _close_failure(episode: EpisodeState) -> str | None:
    """Close an episode; what its close raised (`OSError: ...`), or None when it closed cleanly."""
    try:
        episode.close()
    except Exception as exc:  # the environment's own code: its failure is named, not a traceback
        return failure_text(exc)
    return None


def _print_response(response: dict, json: bool) -> None:
    if json:
        print_json(response)
    else:
        console.print(jsonlib.dumps(response), markup=False)  # a tool's output is data


@reward_app.command("score")
def reward_score(
    task: Annotated[str, typer.Option("--task", help="Task id (`grpolab tasks`).")],
    completion: Annotated[Path, typer.Option("--completion", help="Transcript file ('-' for stdin).")],
    config: ConfigOpt = None,
    env: EnvOpt = None,
    weights: WeightsOpt = None,
    plugin: PluginOpt = None,
    json: JsonOpt = False,
) -> None:
    """Score an assistant transcript (tool responses included) by re-executing its tool calls."""
    from grpolab.models import model_token_counter

    cfg = resolve_config(config, env, weights=weights, plugins=plugin)
    e = env_for(cfg)
    t = e.task(task)
    text = completion_text(completion)
    s = score_transcript(
        e,
        t,
        text,
        cfg.reward.weights,
        cfg.reward.length_unit,
        count_tokens=model_token_counter(cfg.model),
        thought_min_words=cfg.reward.thought_min_words,
        timeout_s=cfg.reward.timeout_s,
    )
    if json:
        print_json(s.to_json())
        return
    console.print(Text(f"{s.total:+.2f}", style="bold") + Text(f"  {s.breakdown}"))
    for k, reason in s.reasons.items():  # reasons quote the transcript: data, never markup
        console.print(f"  {k:<11} {s.components[k]:.2f}  {reason}", markup=False)


def main(argv: list[str] | None = None) -> None:
    """Entry point: one line and exit 2 for bad input, never a traceback for it."""
    try:
        rv = app(args=argv, standalone_mode=False)
    except UserError as exc:
        err_console.print(f"error: {exc}", markup=False)
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:  # usage errors (bad flag values): click's message, exit 2
        show = getattr(exc, "show", None)
        if show:
            show()
        sys.exit(getattr(exc, "exit_code", 2))
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)


def run(argv: list[str] | None = None) -> None:
    """The `grpolab` command: `main` in a child process that a supervisor watches (`grpolab.cli.supervise`), so
    that code it runs which ends the process (os._exit, a signal) is a named error, never a silent exit 0."""
    run_supervised(main, argv)


if __name__ == "__main__":
    run()
