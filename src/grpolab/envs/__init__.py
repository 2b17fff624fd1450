"""Environment registry: built-ins by name, user environments as `module:attribute` or an entry point.

A user environment is any object with the `Environment` interface (see `grpolab.envs.base`); register it in a
package's entry points under the group `grpolab.envs`, or pass `--env my_pkg.my_module:MyEnv`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from grpolab.envs.arithmetic import ArithmeticEnv
from grpolab.envs.base import SPLITS, Environment, Evidence, Split, Task, Verdict
from grpolab.envs.bfcl.env import BFCLEnv
from grpolab.envs.capitals import CapitalsEnv
from grpolab.envs.code.env import CodeEnv
from grpolab.envs.data import DataEnv
from grpolab.envs.finance import FinanceEnv
from grpolab.errors import UserError
from grpolab.plugins import plugin_module

if TYPE_CHECKING:
    from grpolab.config import DataEnvConfig, LabConfig

__all__ = [
    "SPLITS",
    "Environment",
    "Evidence",
    "Split",
    "Task",
    "Verdict",
    "env_for",
    "env_names",
    "get_env",
]


def _finance() -> Environment:
    return FinanceEnv()


def _finance_shifted() -> Environment:
    return FinanceEnv(shifted=True)  # the finance tasks behind renamed tools: evaluation on unseen tools


def _arithmetic() -> Environment:
    return ArithmeticEnv()


def _bfcl(data: list[str] | None = None, task_kinds: list[str] | None = None) -> Environment:
    return BFCLEnv(data, task_kinds)  # reads only the requested categories, and validates their names


def _data(data: list[str] | None = None, settings: DataEnvConfig | None = None) -> Environment:
    return DataEnv(data, settings)  # every row is read and checked now: a bad one fails before any model loads


def _capitals() -> Environment:
    return CapitalsEnv()


def _code() -> Environment:
    return CodeEnv()


def _tau2_retail() -> Environment:
    try:  # an optional package, imported when asked for (and left out of export-trl's standalone bundle)
        from grpolab.envs.tau2 import Tau2RetailEnv
    except ModuleNotFoundError as exc:
        raise UserError(f"env 'tau2_retail' is not available here ({exc})", "use an installed grpolab") from None
    return Tau2RetailEnv()


BUILTIN: dict[str, Callable[[], Environment]] = {
    "finance": _finance,
    "finance_shifted": _finance_shifted,
    "arithmetic": _arithmetic,
    "bfcl": _bfcl,
    "code": _code,
    "capitals": _capitals,
    "data": _data,
    "tau2_retail": _tau2_retail,
}


def env_names() -> list[str]:
    return sorted(BUILTIN) + sorted(ep.name for ep in entry_points(group="grpolab.envs"))


def get_env(
    name: str,
    task_kinds: list[str] | None = None,
    prompt_example: bool = True,
    data: list[str] | None = None,
    data_env: DataEnvConfig | None = None,
    plugins: list[str] | None = None,
) -> Environment:
    """Build an environment by name, `module:attribute`, or entry point. Unknown names are a UserError. In
    `module:attribute`, a module that one of `plugins` (a config's, resolved) names by its file is that plugin as
    imported, even where another file of that name came first (`grpolab.plugins.plugin_module`)."""
    if name == "bfcl":
        env = _bfcl(data, task_kinds)  # its files are read within grpolab.files.limits
    elif name == "data":
        env = _data(data, data_env)  # its task files, tools module and verifier come from the config
    elif name in BUILTIN:
        env = BUILTIN[name]()
    elif ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = plugin_module(module_name, plugins or []) or importlib.import_module(module_name)
            factory = getattr(module, attr)
        except Exception as exc:  # ImportError, AttributeError, or whatever the module raises on import
            raise UserError(
                f"cannot load environment {name!r} ({type(exc).__name__}: {exc})",
                f"check the module and class name; a module that is not installed is found through PYTHONPATH, "
                f'or name its file as a plugin (plugins = ["path/to/{module_name.split(".")[-1]}.py"] in the '
                f"config, or --plugin) and keep --env {name}",
            ) from None
        env = _build(name, factory)
    else:
        eps = {ep.name: ep for ep in entry_points(group="grpolab.envs")}
        if name not in eps:
            raise UserError(f"unknown env {name!r}", f"use one of: {', '.join(env_names())} (or module:Class)")
        env = _build(name, eps[name].load())
    if task_kinds and name != "bfcl":
        kinds = {t.kind for split in ("train", "heldout") for t in env.tasks(split)}
        unknown = sorted(set(task_kinds) - kinds)
        if unknown:
            raise UserError(f"unknown task kind {unknown[0]!r} for env {name!r}", f"use some of: {sorted(kinds)}")
        if hasattr(env, "task_kinds"):
            env.task_kinds = list(task_kinds)
    if not prompt_example:
        env.example = ""
    return env


ENV_INTERFACE = ("tasks", "verify", "messages", "system_prompt", "toolbox_for")
"""What the rollout, the rewards and the evaluation call on an environment (see `grpolab.envs.base`)."""


def _build(name: str, factory: object) -> Environment:
    """A user environment from its class or factory: it must build without arguments and have the interface."""
    fix = "point --env at an Environment subclass or a function returning one (see grpolab.envs.base)"
    if not callable(factory):
        raise UserError(f"environment {name!r} is a {type(factory).__name__}, not a class or factory", fix)
    try:
        env = factory()
    except Exception as exc:  # whatever a user's constructor raises is a bad --env, not a crash
        raise UserError(f"environment {name!r} could not be built ({type(exc).__name__}: {exc})", fix) from None
    missing = [a for a in ENV_INTERFACE if not callable(getattr(env, a, None))]
    if missing or not (hasattr(env, "toolbox") or getattr(env, "stateful", False)):  # stateful: tools per episode
        what = ", ".join(missing) or "toolbox"
        raise UserError(f"{name!r} gave a {type(env).__name__}, not an environment (it has no {what})", fix)
    if isinstance(env, Environment):
        # the base class's verifier and task list raise NotImplementedError: scoring would be NaN on every episode
        needed = ["tasks", "verify" if env.executes_tools else "verify_calls", *(["start_episode"] * env.stateful)]
        unwritten = [m for m in needed if getattr(type(env), m) is getattr(Environment, m)]
        if unwritten:
            raise UserError(
                f"environment {name!r} ({type(env).__name__}) does not define {' or '.join(unwritten)}",
                "write them (tasks(split) -> list[Task]; verify(task, final_answer, evidence) -> Verdict, or "
                "verify_calls(task, calls) with executes_tools = False; start_episode(task) -> EpisodeState when "
                "stateful = True; see grpolab.envs.base and docs/stateful.md)",
            )
    return env


def env_for(cfg: LabConfig) -> Environment:
    """The environment a config describes (name, task kinds, prompt example, data files, env data's settings)."""
    return get_env(cfg.env, cfg.task_kinds or None, cfg.prompt_example, cfg.data or None, cfg.data_env, cfg.plugins)
