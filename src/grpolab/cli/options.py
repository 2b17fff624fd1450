"""Options every command shares (--config, --env, --model, --seed, --weights, --json) and how they resolve."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from grpolab.config import LabConfig, load_config, parse_weights

console = Console(stderr=False, highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML config file (see `grpolab config`).")]
EnvOpt = Annotated[str | None, typer.Option("--env", help="Environment name (`grpolab envs`).")]
ModelOpt = Annotated[
    str | None, typer.Option("--model", help="smollm2 (embedded), tiny (test model), an HF id or a local path.")
]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Random seed.")]
WeightsOpt = Annotated[str | None, typer.Option("--weights", help="Reward weights F,S,C,L, e.g. 1,1.5,3,-0.05.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def resolve_config(
    config: Path | None,
    env: str | None = None,
    model: str | None = None,
    seed: int | None = None,
    weights: str | None = None,
    **dotted: Any,
) -> LabConfig:
    """File values, then CLI overrides; only options the user gave override (None means not given)."""
    overrides: dict[str, Any] = {"env": env, "model": model, "seed": seed}
    if weights is not None:
        overrides["reward.weights"] = parse_weights(weights)
    overrides.update({k.replace("__", "."): v for k, v in dotted.items()})
    return load_config(config, overrides)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()
