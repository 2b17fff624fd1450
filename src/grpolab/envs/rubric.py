"""A rubric: reward components by name (verifiers' `Rubric`), and the record of one component.

An environment carries a rubric of its own components (`Environment.rubric`, added with `self.rubric.add(...)`);
the scorer reads it over the default one, the built-ins and what plugins registered (`rewards.rubric.rubric_of`).
A component is the single home of its name, short letter, default weight, function and description.

A component's function has one of two shapes, told apart by its signature (or `shape=`):
- grpolab: `fn(replay, task, env, ctx) -> (value, reason)`, one transcript at a time (`rewards.components`);
- trl: `fn(prompts, completions, **kwargs) -> list[float | None]`, batched as TRL's `reward_funcs` are; kwargs
  carry the tasks' fields as TRL passes dataset columns (answer, truth, kind, task_id and the task's meta), one
  entry per completion; None means "not applicable" and scores 0 with that reason.

Which components a transcript is scored on (`Rubric.scored`): the standard ones (F, S, C, L: logged even at weight
0), then every other one the weights name (weight 0 logs it without paying for it). Weights the config leaves out
are 0, except a non-standard component's own default weight, which applies unless the config names it
(`Rubric.resolve`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from grpolab.errors import UserError

Completions = Literal["text", "messages"]
"""How a TRL-shaped function gets its prompts and completions (`RewardComponent.completions`)."""
Shape = Literal["grpolab", "trl"]
"""grpolab: `fn(replay, task, env, ctx) -> (value, reason)`; trl: `fn(prompts, completions, **kwargs)`."""


@dataclass(frozen=True)
class RewardComponent:
    name: str
    """Config key (`reward.weights.NAME`) and metric name (`reward/NAME`)."""
    letter: str
    """Short form in breakdowns (`F:+1.0 | S:+1.5 | ...`) and in `--weights F,S,C,L`."""
    default_weight: float
    """Weight in the default configuration."""
    fn: Callable[..., Any]
    description: str
    standard: bool = True
    """Standard components are always computed and logged (even at weight 0) and set by `--weights F,S,C,L`."""
    shape: Shape = "grpolab"
    """grpolab: `fn(replay, task, env, ctx) -> (value, reason)`; trl: `fn(prompts, completions, **kwargs) ->
    list[float | None]`, batched (`rewards.score`)."""
    shaping: bool = False
    """Learned on the way to the verifier (the protocol: format, schema): the reward attribution flags it only once
    it has outrun the verifier for `alarms.shaping_patience` steps in a row (`alarms.attribution`)."""
    completions: Completions = "text"
    """What a TRL-shaped function gets as `prompts` and `completions`: text (each task's prompt, each transcript) or
    messages (TRL's conversational form, as TRL gives a reward function on tool-calling data: a prompt is a list
    with one user message, a completion the list of assistant and tool messages; `rewards.score`)."""


def function_shape(fn: object) -> Shape:
    """`trl` for `fn(prompts, completions, **kwargs)`, `grpolab` for `fn(replay, task, env, ctx)`."""
    try:
        params = inspect.signature(fn).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "grpolab"
    return "trl" if "completions" in params else "grpolab"


def make_component(
    name: str,
    fn: Callable[..., Any],
    letter: str | None = None,
    weight: float = 0.0,
    description: str = "",
    shape: Shape | None = None,
    shaping: bool = False,
    completions: Completions = "text",
) -> RewardComponent:
    """A user's component: `weight` is its default weight, the letter its short form in breakdowns (default: the
    name); the shape is read from `fn`'s signature unless given; `shaping` marks a component learned on the way to
    the verifier (`RewardComponent.shaping`); `completions` the form a TRL-shaped one is given its transcripts in
    (`RewardComponent.completions`). A bad name is a UserError."""
    if not name.isidentifier():
        raise UserError(f"reward component name {name!r} is not an identifier", "use letters, digits and _")
    if not callable(fn):
        raise UserError(f"reward component {name!r} is a {type(fn).__name__}, not a function", "pass a function")
    if shape not in (None, "grpolab", "trl"):
        raise UserError(f"reward component {name!r}: unknown shape {shape!r}", 'use shape="grpolab" or shape="trl"')
    if completions not in ("text", "messages"):
        raise UserError(f"reward component {name!r}: unknown completions {completions!r}", 'use "text" or "messages"')
    doc = description or " ".join((fn.__doc__ or "").split())
    shape = shape or function_shape(fn)
    return RewardComponent(name, letter or name, float(weight), fn, doc, False, shape, shaping, completions)


def check_letters(components: Iterable[RewardComponent]) -> None:
    """Each component's letter is its own within one rubric (breakdowns and logs name components by it): a second
    component with a letter already taken is a UserError naming both and the fix. A component without a letter
    shows its name, which no other component has."""
    taken: dict[str, RewardComponent] = {}
    for component in components:
        first = taken.setdefault(component.letter, component)
        if first is not component:
            raise UserError(
                f"reward components {first.name!r} and {component.name!r} both have the letter {component.letter!r} "
                f"(a breakdown would show two {component.letter}: entries)",
                f"give {component.name!r} another letter (letter=...; letters in use: {', '.join(taken)})",
            )


class Rubric:
    """Reward components by name: those of `base` (looked up live), then this rubric's own."""

    def __init__(self, components: tuple[RewardComponent, ...] = (), base: Rubric | None = None):
        self.base = base
        self.own: dict[str, RewardComponent] = {c.name: c for c in components}

    @property
    def components(self) -> dict[str, RewardComponent]:
        """Every component in table order (the base's, then this rubric's own)."""
        return {**(self.base.components if self.base is not None else {}), **self.own}

    def add(
        self,
        name: str,
        fn: Callable[..., Any],
        letter: str | None = None,
        weight: float = 0.0,
        description: str = "",
        shape: Shape | None = None,
        shaping: bool = False,
        completions: Completions = "text",
    ) -> RewardComponent:
        """Add a component of this rubric's own (`make_component`: default weight, letter, shape, shaping, the form of
        its completions); a letter another of its components has is a UserError (`check_letters`)."""
        component = make_component(name, fn, letter, weight, description, shape, shaping, completions)
        check_letters({**self.components, name: component}.values())
        self.own[name] = component
        return component

    def remove(self, name: str) -> None:
        """Remove one of this rubric's own components (tests, notebooks)."""
        self.own.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self.components

    def __getitem__(self, name: str) -> RewardComponent:
        return self.components[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.components)

    def standard_names(self) -> list[str]:
        """The standard components in table order: the order of `--weights F,S,C,L` and of every breakdown."""
        return [c.name for c in self.components.values() if c.standard]

    def default_weights(self) -> dict[str, float]:
        """The standard components' default weights, and any other component's that is not 0."""
        return {c.name: c.default_weight for c in self.components.values() if c.standard or c.default_weight}

    def letter(self, name: str) -> str:
        """`F` for format...; a component without a letter (or unknown here) shows its name."""
        c = self.components.get(name)
        return c.letter if c is not None else name

    def letters(self) -> dict[str, str]:
        return {n: c.letter for n, c in self.components.items()}

    def resolve(self, weights: dict[str, float], where: str = "reward.weights") -> dict[str, float]:
        """The weights a transcript is scored with: `weights` checked against this rubric (an unknown name is a
        UserError naming it, the known ones and how to add one), plus the default weight of each non-standard
        component `weights` leaves out."""
        components = self.components
        unknown = [n for n in weights if n not in components]
        if unknown:
            raise UserError(
                f"{where}: unknown reward {unknown[0]!r}; known rewards: {', '.join(components)}",
                f"fix the name, or add a component called {unknown[0]!r}: a plugin module (plugins = [...] in the "
                "config, or --plugin) that calls grpolab.rewards.register_reward, or an environment that adds it "
                "to its rubric (docs/plugins.md)",
            )
        defaults = {n: c.default_weight for n, c in components.items() if not c.standard and c.default_weight}
        return {**weights, **{n: w for n, w in defaults.items() if n not in weights}}

    def scored(self, weights: dict[str, float]) -> list[str]:
        """The components a transcript is scored on: the standard ones, then the others `weights` names."""
        standard = self.standard_names()
        return [*standard, *(n for n in weights if n not in standard)]
