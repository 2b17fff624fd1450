"""grpolab: an open-weight agent RL lab (GRPO for tool-calling models, with rewards you can trust).

The public API is the names below (`from grpolab import Environment, Task, Verdict, register_reward`); everything
else lives in submodules that may change. Each name is imported from its defining module on first use (PEP 562),
so `import grpolab` stays as light as a config read: no torch, no transformers, no environment is loaded until a
name that needs it is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_PUBLIC: dict[str, str] = {
    # a config
    "load_config": "grpolab.config",
    "LabConfig": "grpolab.config",
    # an environment
    "Environment": "grpolab.envs.base",
    "Task": "grpolab.envs.base",
    "EpisodeState": "grpolab.envs.base",
    "Evidence": "grpolab.envs.base",
    "Verdict": "grpolab.envs.base",
    "Tool": "grpolab.tools",
    "env_for": "grpolab.envs",
    # rewards
    "register_reward": "grpolab.rewards.components",
    "Rubric": "grpolab.envs.rubric",
    "RewardComponent": "grpolab.envs.rubric",
    "score_transcript": "grpolab.rewards.score",
}
"""Each public name and the module that defines it."""

__all__ = [  # the keys of _PUBLIC, written out for tools that read __all__ statically
    "load_config",
    "LabConfig",
    "Environment",
    "Task",
    "EpisodeState",
    "Evidence",
    "Verdict",
    "Tool",
    "env_for",
    "register_reward",
    "Rubric",
    "RewardComponent",
    "score_transcript",
]

if TYPE_CHECKING:  # for type checkers and editors; at run time `__getattr__` imports each on first use
    from grpolab.config import LabConfig, load_config
    from grpolab.envs import env_for
    from grpolab.envs.base import Environment, EpisodeState, Evidence, Task, Verdict
    from grpolab.envs.rubric import RewardComponent, Rubric
    from grpolab.rewards.components import register_reward
    from grpolab.rewards.score import score_transcript
    from grpolab.tools import Tool


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'grpolab' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
