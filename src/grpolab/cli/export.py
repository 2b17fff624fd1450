"""`grpolab export-trl`: write a runnable TRL GRPOTrainer script (and accelerate configs) for a lab config."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
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
    print_json,
    resolve_config,
    writing_to,
)
from grpolab.envs import env_for
from grpolab.files.outputs import output_target
from grpolab.rewards.rubric import check_weights


def register(app: typer.Typer) -> None:
    app.command(name="export-trl")(export_trl)


def export_trl(
    config: ConfigOpt = None,
    env: EnvOpt = None,
    model: ModelOpt = None,
    seed: SeedOpt = None,
    weights: WeightsOpt = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="Script to write.")] = Path("train_grpo.py"),
    standalone: Annotated[
        bool, typer.Option("--standalone", help="Bundle grpolab's source into the script (no grpolab install).")
    ] = False,
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="num_processes in the GPU accelerate configs.")] = 8,
    accelerate_dir: Annotated[
        Path | None,
        typer.Option("--accelerate-dir", help="Folder for the accelerate configs (default: beside the script)."),
    ] = None,
    plugin: PluginOpt = None,
    json: JsonOpt = False,
) -> None:
    """Export the config as a TRL GRPOTrainer script with the same rewards, weights, prompts and LoRA/GRPO settings."""
    from grpolab.trl.export import export_trl as write_trl_script  # torch (the engine's settings)
    from grpolab.trl.settings import trl_section_notes, unsupported

    cfg = resolve_config(config, env, model, seed, weights, plugins=plugin)
    check_weights(cfg, env_for(cfg))  # a script whose weights name no component of its env would fail where it runs
    # a script that goes into a stream (/dev/stdout, a FIFO): what is said about it goes to stderr, not into it
    stream = output_target(output, "-o").stream
    with writing_to(output, "-o"):
        paths = write_trl_script(cfg, output, standalone=standalone, gpus=gpus, accelerate_dir=accelerate_dir)
    notes, section = unsupported(cfg), trl_section_notes(cfg)
    if json:
        print_json({"written": [str(p) for p in paths], "not_expressed_in_trl": notes, "trl_section": section})
        return
    say = err_console if stream else console
    for p in paths:
        say.print(f"wrote {p}", markup=False)
    for n in notes:
        say.print(Text("not expressed in TRL: ", style="yellow") + Text(n))
    for n in section:
        say.print(Text("passed to TRL: ", style="cyan") + Text(n))
    if len(paths) == 1:
        say.print("accelerate configs not written (the script went into a stream): add --accelerate-dir DIR")
        return
    launch = paths[1].parent / "accelerate_zero2.yaml"
    say.print(f"run it: python {output}   (multi-GPU: accelerate launch --config_file {launch} {output})", markup=False)
