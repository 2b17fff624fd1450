"""Options every command shares (--config, --env, --model, --seed, --weights, --json) and how they resolve."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from grpolab.config import LabConfig, field_doc, load_config, parse_weights, weights_by_name
from grpolab.errors import UserError
from grpolab.plugins import import_plugins, resolve_plugins
from grpolab.rewards.rubric import BUILTIN_RUBRIC

# markup and emoji codes are off: what commands print is mostly model, user and data text (prompts, paths, task ids,
# categories), where "[/x]" would raise MarkupError, "[bold]" vanish and ":o:" become an emoji. Styling goes
# through rich.text.Text.
console = Console(stderr=False, highlight=False, soft_wrap=True, markup=False, emoji=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True, markup=False, emoji=False)

_LETTERS = ",".join(BUILTIN_RUBRIC.letter(n) for n in BUILTIN_RUBRIC.standard_names())
_DEFAULTS = ",".join(f"{w:g}" for w in BUILTIN_RUBRIC.default_weights().values())

ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML config file (see `grpolab config`).")]
EnvOpt = Annotated[str | None, typer.Option("--env", help=field_doc("env"))]
ModelOpt = Annotated[str | None, typer.Option("--model", help=field_doc("model"))]
SeedOpt = Annotated[int | None, typer.Option("--seed", help=field_doc("seed"))]
WeightsOpt = Annotated[
    str | None,
    typer.Option(
        "--weights",
        help=f"Reward weights {_LETTERS} (reward.weights), e.g. {_DEFAULTS}; or name=value,... set over the config's.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
PluginOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--plugin",
        metavar="MOD",
        help="Import this module or .py file first (your rewards, environments); repeatable; a run records it.",
    ),
]


def finite(value: float | None) -> float | None:
    """Typer callback for float options: NaN and infinities are refused (exit 2 naming the option)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def positive_finite(value: float | None) -> float | None:
    """Typer callback for float options that must be a finite number above 0."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value} is not a finite number above 0")
    return value


def field_option(flag: str, field: str, kind: type = int) -> Any:
    """A CLI option that sets one config field, with the field's docstring as its help."""
    callback = finite if kind is float else None
    return Annotated[kind | None, typer.Option(flag, help=f"{field_doc(field)} ({field})", callback=callback)]


def resolve_config(
    config: Path | None,
    env: str | None = None,
    model: str | None = None,
    seed: int | None = None,
    weights: str | None = None,
    base: LabConfig | None = None,
    plugins: list[str] | None = None,
    **dotted: Any,
) -> LabConfig:
    """File values (or `base`'s), then CLI overrides; only options the user gave override (None: not given).
    `plugins` (`--plugin`) are imported before the config is validated and recorded in it."""
    overrides: dict[str, Any] = {"env": env, "model": model, "seed": seed}
    named: dict[str, float] = {}
    if weights is not None:
        if weights_by_name(weights):
            named = parse_weights(weights)  # set over the file's (or the default) weights, below
        else:
            overrides["reward.weights"] = parse_weights(weights)
    overrides.update({k.replace("__", "."): v for k, v in dotted.items()})
    cfg = load_config(config, overrides, base, plugins)
    if named:
        cfg.reward.weights = {**cfg.reward.weights, **named}
    return cfg


def load_plugin_options(plugins: list[str] | None) -> None:
    """Import `--plugin` modules for a command that reads a run (whose own plugins its config.json names)."""
    if plugins:
        import_plugins(resolve_plugins(plugins, Path.cwd()))


def run_plugins(run: Path) -> LabConfig | None:
    """For a command that runs a run (chat, compare, export-model, simulate --real): its config, with the plugins
    it records imported, each named on stderr as code of the run's that now runs here (`RunDir.config_to_run`).
    None where `run` is no run directory (the command's own reading of it says what is wrong)."""
    from grpolab.rundir import RunDir  # the run directory's reader: only for the commands that read one

    if not RunDir(run).is_run():
        return None
    notes: list[str] = []
    cfg = RunDir(run).config_to_run(notes)
    for line in notes:
        err_console.print(line, markup=False, soft_wrap=True)
    return cfg


@contextmanager
def writing_to(path: Path, flag: str) -> Iterator[None]:
    """Writing an output the user named: a file system error (read-only, a folder in the way, no space) is a
    UserError naming the path and the flag, not a traceback."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UserError(f"cannot write {path} ({reason})", f"pick a writable path for {flag}") from None


def print_json(data: Any) -> None:
    """Strict JSON on stdout: a non-finite number (a reward that failed is NaN) is written as null, never as the
    NaN/Infinity tokens that JSON parsers other than Python's reject."""
    sys.stdout.write(json.dumps(_strict(data), indent=2, default=str, allow_nan=False) + "\n")
    sys.stdout.flush()


def _strict(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _strict(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_strict(v) for v in data]
    return data
