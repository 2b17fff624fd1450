"""A config's `rewards`: TRL reward functions used as written (`file.py:function`, `file.py:*`), imported as plugins
are and registered as reward components (`import_rewards`). `grpolab.config` imports this module only when a config
names some, so the config stays a leaf."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import TYPE_CHECKING

from grpolab.envs.rubric import function_shape
from grpolab.errors import UserError
from grpolab.plugins import import_plugin, import_plugins
from grpolab.rewards.components import register_reward

if TYPE_CHECKING:
    from grpolab.config import LabConfig


def import_rewards(specs: Iterable[str]) -> list[str]:
    """Import the modules of a config's `rewards` (resolved) as plugins are, and register each function they name as
    a reward component of its own name (`file.py:*`: every public function defined in the file that has TRL's shape,
    `fn(prompts, completions, **kwargs)`), given TRL's conversational arguments (`completions` as message lists).
    Its default weight is 0, as a plugin's usually is, so that it is scored in no other config's run in this process:
    `load_config` weighs it 1.0 (as TRL weighs a reward function) where the config file does not. The names
    registered, in order; a reference to nothing, or to a function of another shape, is a UserError naming it."""
    specs = list(specs)
    if not specs:
        return []
    names: list[str] = []
    for spec in specs:
        module_spec, _, attr = spec.rpartition(":")
        module = import_plugin(module_spec)
        if attr == "*":
            found = [
                (name, fn)
                for name, fn in vars(module).items()
                if inspect.isfunction(fn)
                and fn.__module__ == module.__name__
                and not name.startswith("_")
                and function_shape(fn) == "trl"
            ]
            if not found:
                raise UserError(
                    f"rewards: {spec} names no reward function (no public fn(prompts, completions, **kwargs) there)",
                    'define TRL reward functions in that file, or name them one by one (rewards = ["file.py:fn"])',
                )
        else:
            fn = getattr(module, attr, None)
            if not callable(fn):
                fix = f"define {attr} there, or fix the name in {spec}"
                raise UserError(f"rewards: {module_spec} has no function {attr!r}", fix)
            if function_shape(fn) != "trl":
                raise UserError(
                    f"rewards: {spec} is not a TRL reward function (it takes no 'completions' parameter)",
                    "give it TRL's signature fn(prompts, completions, **kwargs) -> list[float | None], or register a "
                    "grpolab-shaped one with register_reward in a plugin",
                )
            found = [(attr, fn)]
        for name, fn in found:
            register_reward(name, fn, shape="trl", completions="messages")
            names.append(name)
    return names


def import_config_code(cfg: LabConfig) -> list[str]:
    """A config's code, in the order `grpolab.config.load_config` imports it: its plugins, then its TRL reward
    functions (`import_rewards`); the names of those, registered."""
    import_plugins(cfg.plugins)
    return import_rewards(cfg.rewards)
