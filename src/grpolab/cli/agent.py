"""`grpolab export-model` (a run's agent as a plain transformers folder, optionally GGUF) and `grpolab chat`.

`chat` reads questions from --question flags, else from stdin when it is not a terminal (one per line), else
interactively; so scripts and tests drive it without a terminal.
"""

from __future__ import annotations

import json as jsonlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from grpolab.cli.options import (
    ConfigOpt,
    EnvOpt,
    JsonOpt,
    ModelOpt,
    PluginOpt,
    SeedOpt,
    console,
    err_console,
    finite,
    load_plugin_options,
    print_json,
    resolve_config,
    run_plugins,
    writing_to,
)
from grpolab.errors import UserError
from grpolab.rewards.functions import import_config_code

if TYPE_CHECKING:
    from grpolab.agent.chat import ChatEvent
    from grpolab.agent.gguf import GGUFType
    from grpolab.config import LabConfig

RunOpt = Annotated[Path | None, typer.Option("--run", help="Run directory (runs/NAME); its latest checkpoint.")]
EXIT_WORDS = {"exit", "quit", "/exit", "/quit"}


def register(app: typer.Typer) -> None:
    app.command(name="export-model")(export_model)
    app.command()(chat)


def export_model(
    run: Annotated[Path, typer.Option("--run", help="Run directory (runs/NAME) to export.")],
    out: Annotated[Path, typer.Option("--out", help="Folder to create (must not exist, or be empty).")],
    gguf: Annotated[bool, typer.Option("--gguf", help="Also write a GGUF file (llama.cpp, transformers).")] = False,
    gguf_type: Annotated[str, typer.Option("--gguf-type", help="GGUF tensor type: f32 (exact) or f16.")] = "f32",
    check: Annotated[
        bool, typer.Option("--check", help="Evaluate run and export on the held-out tasks; exit 1 if they differ.")
    ] = False,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Held-out tasks for --check.")] = None,
    plugin: PluginOpt = None,
    json: JsonOpt = False,
) -> None:
    """Export a run's agent: merged weights as a transformers model folder (and GGUF) that loads without grpolab."""
    from grpolab.agent.export import export_run  # torch and transformers: only for the commands that load a model

    load_plugin_options(plugin)
    run_plugins(run)  # exporting runs the run (its env for --check): its recorded plugins are imported, and named

    kind: GGUFType = gguf_type  # type: ignore[assignment]  # export_run rejects other values with a UserError
    with writing_to(out, "--out"):
        result = export_run(run, out, gguf=gguf, gguf_type=kind, check=check, check_limit=limit)
    if json:
        print_json(result.to_json())
    else:
        console.print(
            f"wrote {result.out} (step {result.step}, fp32 safetensors + tokenizer, "
            f"{result.folder_bytes / 1e6:.1f} MB) in {result.seconds:.1f} s"
        )
        if result.gguf is not None:
            console.print(f"wrote {result.gguf} ({result.gguf_type.upper()}, {result.gguf_bytes / 1e6:.1f} MB)")
        if result.check is not None:
            c = result.check
            console.print(
                f"held-out check: {c.identical}/{c.n} identical transcripts; success run {c.run_success:.2f}, "
                f"export {c.export_success:.2f} ({c.seconds:.0f} s)"
                + (f"; differ: {', '.join(c.differing[:5])}" if c.differing else "")
            )
    if result.check is not None and not result.check.same:
        raise typer.Exit(1)


def chat(
    run: RunOpt = None,
    model: ModelOpt = None,
    config: ConfigOpt = None,
    env: EnvOpt = None,
    seed: SeedOpt = None,
    question: Annotated[
        list[str] | None, typer.Option("--question", "-q", help="Ask this (repeatable); no prompt, no stdin.")
    ] = None,
    max_new_tokens: Annotated[int | None, typer.Option("--max-new-tokens", min=1, help="Per question.")] = None,
    max_turns: Annotated[int | None, typer.Option("--max-turns", min=1, help="Tool calls per question.")] = None,
    temperature: Annotated[float, typer.Option("--temperature", min=0.0, callback=finite, help="0 = greedy.")] = 0.0,
    history: Annotated[bool, typer.Option("--history", help="Keep earlier questions in the context.")] = False,
    task: Annotated[
        str | None,
        typer.Option("--task", help="Ask in this task's episode: its row (a TRL env's reset columns) and state."),
    ] = None,
    plugin: PluginOpt = None,
    json: JsonOpt = False,
) -> None:
    """Talk to an agent: it thinks, calls the environment's real tools and answers (--run, or --model incl. exports)."""
    from grpolab.agent.chat import ChatSession

    opts = {
        "max_new_tokens": max_new_tokens,
        "max_turns": max_turns,
        "temperature": temperature,
        "keep_history": history,
    }
    load_plugin_options(plugin)  # a run's (or an export's) own plugins come with its config
    if run is not None:
        if model is not None:
            raise UserError("pass --run or --model, not both", "--run runs/NAME chats with that run's agent")
        run_plugins(run)  # chatting runs the run: its recorded plugins are imported, and named
        session = ChatSession.from_run(run, task_id=task, **opts)
    else:
        session = ChatSession.from_config(_model_config(config, env, model, seed), task_id=task, **opts)
    for q in _questions(question):
        if json:
            print_json_line({"kind": "question", "text": q})
        for event in session.send(q):
            if json:
                print_json_line(event.to_json())
            else:
                _render(event)


def _model_config(config: Path | None, env: str | None, model: str | None, seed: int | None) -> LabConfig:
    """An exported folder brings its run's config (env, prompt); otherwise the usual config resolution."""
    from grpolab.agent.export import exported_config

    exported = exported_config(Path(model)) if model and Path(model).is_dir() else None
    if exported is not None and config is None and env is None:
        import_config_code(exported)  # chatting with an export runs it: the plugins and rewards its run recorded
        return exported
    return resolve_config(config, env, model, seed)


def _questions(given: list[str] | None) -> Iterator[str]:
    if given:
        yield from given
        return
    if not sys.stdin.isatty():
        for line in sys.stdin:
            if line.strip():
                yield line.strip()
        return
    err_console.print("Ask a question (empty line or 'exit' to quit).")
    while True:
        try:
            line = console.input(Text("you> ", style="bold")).strip()
        except (EOFError, KeyboardInterrupt):
            return
        if not line or line.lower() in EXIT_WORDS:
            return
        yield line


def print_json_line(data: dict) -> None:
    sys.stdout.write(jsonlib.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def _render(event: ChatEvent) -> None:
    """Model text is printed as plain Text, never as rich markup (it is untrusted)."""
    k = event.kind
    if k == "thought":
        console.print(Text("thinking: ", style="dim") + Text(event.text, style="dim italic"))
    elif k == "text":
        console.print(Text(event.text))
    elif k == "tool_call" and event.name is not None and event.arguments is not None:
        console.print(Text(f"→ {event.name}({jsonlib.dumps(event.arguments)})", style="cyan"))
    elif k == "tool_call":
        console.print(Text("→ malformed call: ", style="yellow") + Text(event.text or (event.raw or "")))
    elif k == "tool_response":
        console.print(Text("← ", style="green") + Text(jsonlib.dumps(event.response, default=str)))
    elif k == "error":
        console.print(Text(event.text, style="yellow"))
    elif k == "answer":
        console.print(Text("agent: ", style="bold") + Text(event.text or "(no final answer)"))
