"""The lab's form, generated from one table: each control names the field it sets, and its bounds (`lab.limits`),
default (the lab's base config: the demo's, or `grpolab lab --config FILE`) and help (the config field's docstring)
are read from where they are declared. The reward weights are one control per component of the base config's
environment (`rubric_of`): built-ins, what plugins registered, and the environment's own.

Values travel by name: the page hands a handler `{field name: value}` (`Form.named`), and `config_from_form` puts
each value into the field its control names, so the order of the controls on the page cannot mix them up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from grpolab.config import DEMO_CONFIG, LabConfig, field_doc, load_config
from grpolab.envs import Environment, env_for
from grpolab.envs.rubric import Rubric
from grpolab.lab.limits import BOUNDS, Bound, check_env, check_settings
from grpolab.rewards.rubric import rubric_of
from grpolab.simulator.simulate import DEFAULT_LR, SimSettings

WEIGHT = "reward.weights."
"""Prefix of a weight control's name: `reward.weights.format` sets the format component's weight."""

SIMULATOR = "simulator."
"""Prefix of the simulator's own knobs, which are not config fields."""


def _text(value: Any) -> str:
    """A dropdown's value ("" when nothing is picked)."""
    return "" if value is None else str(value)


_MODEL_HELP = field_doc("model") + " The lab offers these; `grpolab lab --allow-model` adds others."


@dataclass(frozen=True)
class Control:
    """One input of the form: the field it sets (dotted, as in the config) and how the page shows it."""

    name: str
    label: str
    kind: Literal["slider", "number", "dropdown"] = "number"
    cast: Callable[[Any], Any] = float
    """What the value is turned into on its way into the config (a request can carry any JSON value)."""
    step: float = 1
    """A slider's step."""
    help: str | None = None
    """Help for a control that is not a config field (config fields bring their docstring)."""
    value: Any = None
    """A fixed starting value (a weight's, read from the base config's rubric); None: read from the config."""
    span: tuple[float, float] | None = None
    """A slider's range where it is narrower than its bound (a weight may be ±100; its slider spans ±10, or as far
    as its starting value), so that a drag moves it in useful steps; its number box takes any value in range."""

    @property
    def bound(self) -> Bound | None:
        return BOUNDS.get(WEIGHT.rstrip(".") if self.name.startswith(WEIGHT) else self.name)

    def info(self) -> str:
        return self.help if self.help is not None else field_doc(self.name)

    def default(self, base: LabConfig) -> Any:
        """The control's starting value: the base config's (the demo's, on which the simulator is calibrated)."""
        if self.value is not None:
            return self.value
        if self.name == "simulator.lr":
            return DEFAULT_LR
        if self.name == "simulator.steps":
            return base.train.steps
        node: Any = base
        for part in self.name.split("."):
            node = getattr(node, part)
        return node


# fmt: off
HEAD_CONTROLS = (
    Control("env",                 "environment",               "dropdown", _text),
    Control("model",               "base model",                "dropdown", _text, help=_MODEL_HELP),
)
GRPO_CONTROLS = (
    Control("grpo.beta",           "beta (KL)",                 "slider",   float, step=0.01),
    Control("grpo.epsilon",        "epsilon (clip)",            "slider",   float, step=0.01),
    Control("rollout.group_size",  "G",                         "slider",   int),
    Control("grpo.learning_rate",  "learning rate (real runs)", "number",   float),
)
"""With the weights between them: the config the simulator, the export and a training job share, in page order."""

SIMULATOR_CONTROLS = (
    Control("simulator.lr",        "simulator step size",       "slider",   float, step=0.01, help=SimSettings.LR_DOC),
    Control("simulator.steps",     "simulated iterations",      "slider",   int,   step=10,   help=""),
)
"""The simulator's own knobs."""

JOB_CONTROLS = (
    Control("train.steps",         "GRPO steps",                "number",   int),
    Control("train.sft_steps",     "SFT warm-start steps",      "number",   int),
)
"""What a real run (the export, a training job) adds to the config."""
# fmt: on

ENV_FIELDS = frozenset({"plugins", "env", "task_kinds", "prompt_example", "data", "data_env"})
"""The config fields that say which environment (and which tasks, tools and verifier) a config runs."""

_BASE: dict[str, LabConfig] = {}


def set_base_config(cfg: LabConfig | None) -> None:
    """The config the form starts from and fills in (`grpolab lab --config FILE`); None: the demo's."""
    _BASE.clear()
    if cfg is not None:
        _BASE["base"] = cfg


@lru_cache(maxsize=1)
def demo_config() -> LabConfig:
    """The demo's config, read once (every slider move builds a config on it); callers only read it."""
    return load_config(DEMO_CONFIG)


def base_config() -> LabConfig:
    """The lab's base config: what `set_base_config` set, else the demo's."""
    return _BASE.get("base") or demo_config()


def env_key(cfg: LabConfig) -> str:
    """The part of `cfg` that names its environment, as JSON: the key environments are cached by."""
    return cfg.model_dump_json(include=set(ENV_FIELDS))


@lru_cache(maxsize=16)
def env_of(key: str) -> Environment:
    """The environment an `env_key` describes, built once per lab process (a data environment reads its files)."""
    return env_for(LabConfig.model_validate_json(key))


def rubric_for(cfg: LabConfig) -> Rubric:
    """The components `cfg`'s environment is scored under."""
    return rubric_of(env_of(env_key(cfg)))


WEIGHT_SPAN = 10.0
"""A weight slider spans ±this (further where the config's weight lies beyond it)."""


def weight_controls(base: LabConfig) -> tuple[Control, ...]:
    """One weight control per component of the base config's environment, starting at the weight it scores with
    (a component the config does not weight starts at its default weight)."""
    rubric = rubric_for(base)
    weights = rubric.resolve(dict(base.reward.weights))
    return tuple(
        Control(
            WEIGHT + n,
            f"weight {rubric.letter(n)} ({n})",
            "slider",
            step=0.05,
            help=c.description,
            value=weights.get(n, 0.0),
            span=(min(-WEIGHT_SPAN, weights.get(n, 0.0)), max(WEIGHT_SPAN, weights.get(n, 0.0))),
        )
        for n, c in rubric.components.items()
    )


def config_controls(base: LabConfig) -> tuple[Control, ...]:
    """The config controls in page order: environment and model, the weights of `base`'s environment, GRPO."""
    return (*HEAD_CONTROLS, *weight_controls(base), *GRPO_CONTROLS)


def controls(base: LabConfig) -> dict[str, Control]:
    """Every control of the page over `base`, by the field it sets."""
    return {c.name: c for c in (*config_controls(base), *SIMULATOR_CONTROLS, *JOB_CONTROLS)}


def starting_values(base: LabConfig) -> dict[str, Any]:
    """What the page's simulator view starts from: each config control's and the simulator's own starting value (the
    values `render` gives the components the view reads)."""
    return {c.name: c.default(base) for c in (*config_controls(base), *SIMULATOR_CONTROLS)}


def config_from_form(values: Mapping[str, Any]) -> LabConfig:
    """The config a form describes: every config control's value, by name, into the field it names (the
    simulator's knobs are ignored; the job controls are optional). On the base config's environment, what the form
    does not show comes from the base config; on another, from the defaults. A weight is kept when the chosen
    environment scores that component (and is not 0, beyond the standard four). Anything out of bounds is a
    UserError."""
    overrides: dict[str, Any] = {}
    for control in (*HEAD_CONTROLS, *GRPO_CONTROLS, *(c for c in JOB_CONTROLS if c.name in values)):
        overrides[control.name] = control.cast(values[control.name])
    overrides["model"] = overrides["model"] or LabConfig.model_fields["model"].default
    base = base_config()
    check_env(overrides["env"], base.env)  # before it is built for its rubric
    on_base = overrides["env"] == base.env
    rubric = rubric_for(base if on_base else LabConfig(env=overrides["env"]))
    weights = {k.removeprefix(WEIGHT): float(v) for k, v in values.items() if k.startswith(WEIGHT)}
    # a component at weight 0 beyond the standard four is not scored at all, as when a config leaves it out
    standard = rubric.standard_names()
    overrides["reward.weights"] = {n: w for n, w in weights.items() if n in rubric.components and (w or n in standard)}
    cfg = load_config(None, overrides, base=base if on_base else None)
    check_settings(cfg, base.env)  # the browser bounds the controls; a request can carry anything
    return cfg


def check_simulator(values: Mapping[str, Any]) -> tuple[float, int]:
    """The simulator's (step size, iterations) from a form, within their bounds."""
    for control in SIMULATOR_CONTROLS:
        assert control.bound is not None
        control.bound.check(control.label, values[control.name])
    return float(values["simulator.lr"]), int(values["simulator.steps"])


def render(controls: Iterable[Control], demo: LabConfig, choices: Mapping[str, list[str]]) -> dict[str, Any]:
    """Gradio components for `controls`, created where the caller's layout is: `{field name: component}`.
    `choices` gives each dropdown its options."""
    import gradio as gr  # the lab extra: `grpolab lab` imports this module before it knows gradio is there

    out: dict[str, Any] = {}
    for c in controls:
        value, info = c.default(demo), c.info() or None
        if c.kind == "dropdown":
            out[c.name] = gr.Dropdown(choices[c.name], value=value, label=c.label, info=info)
        elif c.kind == "slider":
            bound = c.bound
            assert bound is not None, c.name  # every slider has a bound in lab.limits.BOUNDS
            low, high = c.span or (bound.low, bound.high)
            # the weights' ids are what the browser test types into (the slider's number box)
            elem_id = f"w-{c.name.removeprefix(WEIGHT)}" if c.name.startswith(WEIGHT) else None
            out[c.name] = gr.Slider(low, high, value=value, step=c.step, label=c.label, info=info, elem_id=elem_id)
        else:
            precision = 0 if c.cast is int else None  # whole steps
            out[c.name] = gr.Number(value, label=c.label, info=info, precision=precision)
    return out


class Form:
    """The page's controls by field name, and the way back from Gradio's `{component: value}` to names."""

    def __init__(self, components: Mapping[str, Any]):
        self.components = dict(components)
        self._names = {id(c): name for name, c in self.components.items()}

    def inputs(self, *groups: Iterable[Control]) -> set[Any]:
        """The components of these controls, as a set: Gradio then calls the handler with one dict."""
        return {self.components[c.name] for group in groups for c in group}

    def named(self, data: Mapping[Any, Any]) -> dict[str, Any]:
        """`{component: value}` (what Gradio passes for a set of inputs) as `{field name: value}`."""
        return {self._names[id(c)]: v for c, v in data.items() if id(c) in self._names}
