"""The rubric an environment is scored under: the built-in components, what plugins registered for every
environment (`register_reward`), then the environment's own (`Environment.rubric`; the `Rubric` class and the two
function shapes: `grpolab.envs.rubric`). `check_weights` checks a config's weights against it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpolab.envs.rubric import RewardComponent, Rubric, check_letters
from grpolab.errors import UserError
from grpolab.rewards.components import BUILTIN_COMPONENTS, BUILTIN_NAMES, registered_components

if TYPE_CHECKING:
    from grpolab.config import LabConfig
    from grpolab.envs.base import Environment

__all__ = ["BUILTIN_RUBRIC", "DEFAULT_RUBRIC", "Rubric", "check_weights", "rubric_of"]


BUILTIN_RUBRIC = Rubric(BUILTIN_COMPONENTS)
"""The built-in components alone: the `--weights F,S,C,L` order and the config's default weights."""


class _DefaultRubric(Rubric):
    """The built-ins and what plugins registered for every environment (`register_reward`), read live."""

    @property
    def components(self) -> dict[str, RewardComponent]:
        return {**BUILTIN_RUBRIC.components, **registered_components(), **self.own}


DEFAULT_RUBRIC: Rubric = _DefaultRubric()
"""What every environment's rubric starts from."""


def rubric_of(env: Environment | object) -> Rubric:
    """The rubric an environment is scored under: the default one (built-ins, then what plugins registered), then
    the environment's own components (`Environment.rubric`). An own component may not take a built-in name, nor a
    letter another component of this rubric has (`check_letters`)."""
    own = getattr(env, "rubric", None)
    if not isinstance(own, Rubric) or not own.own:
        return DEFAULT_RUBRIC
    clash = sorted(set(own.own) & BUILTIN_NAMES)
    if clash:
        raise UserError(f"the environment adds a reward component called {clash[0]!r}, which is built in", "rename it")
    rubric = Rubric(tuple(own.own.values()), base=DEFAULT_RUBRIC)
    check_letters(rubric.components.values())  # the env's own letters against what plugins registered since
    return rubric


def check_weights(cfg: LabConfig, env: Environment) -> None:
    """The config's reward weights against the environment's rubric: an unknown name is a UserError naming it, the
    known ones and how to add one; a component the config leaves out gets its default weight (0 for the built-ins,
    a plugin's or the environment's own otherwise), written into `cfg` so that a run's config.json records it.
    Scoring checks the same (`rewards.score`); commands call this first to refuse before any work."""
    resolved = rubric_of(env).resolve(cfg.reward.weights, f"reward.weights (env {cfg.env})")
    if resolved != cfg.reward.weights:
        cfg.reward.weights = resolved
