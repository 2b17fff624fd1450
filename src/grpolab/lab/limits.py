"""What the web lab accepts from a page (or from anyone posting to its API): bounded settings, known models and
environments, run names and paths inside the runs folder.

Gradio's sliders and dropdowns bound values only in the browser; every handler checks here again, because a
request can carry any value. Each refusal is a UserError naming the field and its bound.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpolab.config import LabConfig
from grpolab.envs import env_names
from grpolab.errors import UserError

KNOWN_MODELS = ("smollm2", "tiny")
"""Models the lab offers without being told: the embedded one and the tiny random test model."""

RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A new run's name: a plain directory name (no separators, no leading dot), at most 64 characters."""


@dataclass(frozen=True)
class Bound:
    low: float
    high: float

    def check(self, name: str, value: float) -> None:
        if not (isinstance(value, (int, float)) and math.isfinite(value) and self.low <= value <= self.high):
            raise UserError(f"{name} = {value!r} is outside the lab's range [{self.low:g}, {self.high:g}]", _FIX)


_FIX = "pick a value in range (for bigger jobs use `grpolab train` on the command line)"

BOUNDS = {
    "train.steps": Bound(0, 500),
    "train.sft_steps": Bound(0, 500),
    "grpo.learning_rate": Bound(1e-7, 1e-2),
    "rollout.group_size": Bound(2, 32),
    "grpo.beta": Bound(0, 1),
    "grpo.epsilon": Bound(0.05, 0.5),
    "reward.weights": Bound(-100, 100),
    "simulator.steps": Bound(10, 300),
    "simulator.lr": Bound(0.01, 2),
}
"""Every setting the page sends, bounded as its control is (steps: a CPU lab trains tens, not thousands)."""


@dataclass(frozen=True)
class LabLimits:
    """The lab's policy: which models it may load and how many training jobs may run at once."""

    allowed_models: tuple[str, ...] = ()
    """Model names or paths the person who started the lab allowed (`grpolab lab --allow-model`)."""
    max_jobs: int = 2
    """Training jobs running at once, over every lab serving the same runs folder (the machine has 2 cores)."""
    base_env: str | None = None
    """The environment of the lab's base config (`grpolab lab --config FILE`), offered beside the registered ones
    (`offered_envs`); `lab.app.build` sets it."""

    @property
    def models(self) -> tuple[str, ...]:
        return KNOWN_MODELS + tuple(m for m in self.allowed_models if m not in KNOWN_MODELS)

    def check_model(self, model: str) -> None:
        if model not in self.models:
            raise UserError(
                f"model {model!r} is not one the lab may load ({', '.join(self.models)})",
                "restart the lab with --allow-model NAME_OR_PATH to allow it",
            )

    def check_config(self, cfg: LabConfig) -> None:
        """A config a training job may run on: bounded settings and a model the lab may load."""
        check_settings(cfg, self.base_env)
        self.check_model(cfg.model)


def offered_envs(base_env: str | None = None) -> list[str]:
    """The environments the lab offers: the registered ones, and the base config's (`grpolab lab --config FILE`:
    the person who started the lab named its `module:Class`; a web request never names one of its own)."""
    names = env_names()
    return names if base_env is None or base_env in names else [*names, base_env]


def check_env(env: Any, base_env: str | None = None) -> None:
    """An environment the form may name: one the lab offers (`offered_envs`), never another module:attr (an import
    and a call) from a web request."""
    offered = offered_envs(base_env)
    if env not in offered:
        raise UserError(f"environment {env!r} is not offered by the lab", f"use one of: {', '.join(offered)}")


def check_settings(cfg: LabConfig, base_env: str | None = None) -> None:
    """The environment (`check_env`) and the bounded settings of a config built from the form (before anything
    uses it)."""
    check_env(cfg.env, base_env)
    for name, bound in BOUNDS.items():
        section, _, key = name.partition(".")
        if section == "simulator":
            continue
        value = getattr(getattr(cfg, section), key)
        for v in value.values() if isinstance(value, dict) else [value]:
            bound.check(name, v)


def run_name(name: str) -> str:
    """A new run's name, checked: a plain directory name."""
    name = (name or "").strip()
    if not RUN_NAME.fullmatch(name):
        raise UserError(f"run name {name[:80]!r} is not a plain directory name", "use letters, digits, '-', '_', '.'")
    return name


def inside(root: Path, name: str) -> Path:
    """The run directory a name or path picks, which must lie inside the runs folder `root` (symlinks resolved),
    or a UserError. A relative name is taken from `root`."""
    fix = "pick a run listed under the lab's --runs folder"
    try:
        base = root.resolve()
        path = (Path(name) if Path(name).is_absolute() else root / name).resolve()
        path.exists()  # raises for a name too long (resolve does not), which every later look at it would
    except (OSError, ValueError, RuntimeError) as exc:  # a NUL byte, a name too long, a symlink loop
        raise UserError(f"{name[:80]!r} is not a usable path ({exc})", fix) from None
    if path == base or base not in path.parents:
        raise UserError(f"{name[:200]!r} is outside the runs folder {root}", fix)
    return path
