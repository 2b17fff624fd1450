"""Rewards: `replay` (a transcript re-executed against real tools), `components` (the built-ins), `rubric` (what an
environment is scored under), `score`. A plugin adds a component for every environment with `register_reward`."""

from grpolab.rewards.components import register_reward, unregister_reward
from grpolab.rewards.rubric import Rubric

__all__ = ["Rubric", "register_reward", "unregister_reward"]
