"""One typed, validated configuration for every command: TOML file + CLI overrides.

Fields carry their documentation as attribute docstrings (pydantic's `use_attribute_docstrings`); `field_doc` reads
them back for the CLI's `--help` of options that set a field and for the web lab's labels and hints. No value is
defined twice: the CLI, the trainer, the simulator and the exporter all read `LabConfig`.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from grpolab.errors import UserError
from grpolab.files.limits import MAX_CONFIG_BYTES
from grpolab.files.nesting import check_nesting
from grpolab.files.user_input import read_user_file
from grpolab.plugins import import_plugins, is_path, resolve_plugins, resolve_reward
from grpolab.reward_defaults import DEFAULT_LENGTH_UNIT, MAX_REPLAYED_CALLS, SCORE_TIMEOUT_S, THOUGHT_MIN_WORDS


class _Section(BaseModel):
    # allow_inf_nan=False: every float of every section must be finite (inf passes any `gt`/`ge` bound, NaN
    # poisons training, and either makes --json print invalid JSON)
    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, validate_assignment=True, allow_inf_nan=False
    )


def _builtin_weights() -> dict[str, float]:
    """The built-in components' default weights (`rewards.rubric.BUILTIN_RUBRIC`)."""
    from grpolab.rewards.rubric import BUILTIN_RUBRIC  # here: the components import every environment

    return BUILTIN_RUBRIC.default_weights()


class RewardConfig(_Section):
    weights: dict[str, float] = Field(default_factory=_builtin_weights)
    """Weight of each reward component in the episode reward (a weighted sum). Keys are the env's reward names."""
    length_unit: int = Field(DEFAULT_LENGTH_UNIT, gt=0)
    """The length component counts generated tokens in units of this many (tool output excluded)."""
    thought_min_words: int = Field(THOUGHT_MIN_WORDS, ge=0)
    """Fewest words an opening <thought> must hold for the format check to pay for it (0: any closed block pays)."""
    timeout_s: float = Field(SCORE_TIMEOUT_S, gt=0, le=600)
    """Seconds a reward component (a verifier, your reward function) may take per episode; past it the episode
    scores 0 on that component, with the reason, and the step goes on."""


class RolloutConfig(_Section):
    group_size: int = Field(8, ge=2)
    """G: episodes sampled per prompt; advantages are relative to the group."""
    max_new_tokens: int = Field(160, gt=0)
    """Token budget of policy tokens per episode, over all turns (tool output not counted)."""
    max_turns: int = Field(3, ge=1, le=MAX_REPLAYED_CALLS)
    """Most tool calls in one episode (at most 16, what scoring replays); the turn after the last one must answer."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature for training rollouts (evaluation is greedy)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling for training rollouts."""
    format: Literal["inline", "chat_template"] = "inline"
    """inline: the lab's protocol in one assistant turn; chat_template: the model's own chat template renders it."""
    tool_syntax: Literal["auto", "hermes", "llama3"] = "auto"
    """How the model writes calls under chat_template: hermes, llama3, or auto (read from the template)."""
    stop_at_answer: bool = True
    """End an episode where its environment says the final answer ends, instead of at max_new_tokens."""
    engine: Literal["exact", "int8"] = "exact"
    """exact: rollouts sample from the policy itself; int8: from a dynamic W8A8 copy of it (engine/sampler.py)."""


class GRPOConfig(_Section):
    learning_rate: float = Field(2e-4, gt=0)
    """AdamW learning rate."""
    beta: float = Field(0.05, ge=0)
    """KL penalty coefficient (k3 estimator, to the frozen starting policy)."""
    epsilon: float = Field(0.2, gt=0)
    """Lower clip range of the importance ratio."""
    epsilon_high: float | None = Field(None, gt=0)
    """Upper clip range (DAPO's clip-higher); None means the same as epsilon."""
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo"] = "grpo"
    """grpo (mean per episode, then over episodes), dr_grpo (sum / constant), dapo, bnpo, cispo (token mean; CISPO)."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Divide advantages by the group's reward std (GRPO), the whole batch's (batch) or not (none: Dr. GRPO)."""
    importance_sampling_level: Literal["token", "sequence"] = "token"
    """Importance ratio per token, or per episode as exp(mean token log-ratio) shared by its tokens (GSPO)."""
    mask_truncated_completions: bool = False
    """An episode cut by the token budget carries no loss (DAPO's overlong filtering); answer-stopped ones keep it."""
    multi_objective_aggregation: Literal["sum_then_normalize", "normalize_then_sum"] = "sum_then_normalize"
    """Normalise the weighted reward sum, or each reward component within its group before the sum (GDPO)."""
    top_entropy_quantile: float = Field(1.0, ge=0, le=1)
    """Only tokens whose entropy is in this top fraction of a forward's policy tokens carry policy loss (1 = all)."""
    mu: int = Field(1, ge=1)
    """Update epochs over each batch of rollouts (with mu=1 the ratio is 1 and clipping never binds)."""
    is_cap: float = Field(2.0, gt=1)
    """Cap of the token-level truncated importance weights that correct rollouts sampled by another copy (int8)."""
    kl_metric: bool = True
    """Measure the KL to the reference even when beta = 0 (one extra forward pass per step)."""
    kl_bound: float = Field(0.12, gt=0)
    """Stability bound for the mean KL; passing it is flagged."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient clipping."""
    dynamic_filter: Literal["off", "skip", "resample"] = "off"
    """Groups with no reward variance: keep them (off), drop them from the update (skip) or resample (resample)."""

    @field_validator("scale_rewards", mode="before")
    @classmethod
    def _scale_from_bool(cls, value: Any) -> Any:
        return {True: "group", False: "none"}.get(value, value) if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _cispo_cap_above_one(self) -> GRPOConfig:
        cap = self.epsilon_high if self.epsilon_high is not None else self.epsilon
        if self.loss_type == "cispo" and cap <= 1:
            raise ValueError(
                f"cispo caps the importance ratio itself at grpo.epsilon_high (now {cap}), as TRL does: set it above 1"
                " (ScaleRL recommends 5.0)"
            )
        return self


class LoraConfig(_Section):
    enabled: bool = True
    """Train LoRA adapters (the reference is the base with adapters disabled); False trains all weights."""
    rank: int = Field(16, gt=0)
    """LoRA rank r."""
    alpha: int = Field(32, gt=0)
    """LoRA alpha (the update is scaled by alpha / r)."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """LoRA dropout."""
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    """Module names that get adapters."""


class TrainConfig(_Section):
    backend: Literal["native", "trl"] = "native"
    """native: the lab's GRPO engine (fastest on one CPU); trl: TRL's GRPOTrainer on the same rollout and rewards."""
    steps: int = Field(20, ge=0)
    """GRPO steps (updates)."""
    prompts_per_step: int = Field(2, ge=1)
    """Prompts per step; each gets group_size episodes."""
    sft_steps: int = Field(0, ge=0)
    """SFT warm-start steps on reference transcripts before GRPO (0 = none)."""
    sft_learning_rate: float = Field(5e-4, gt=0)
    """SFT learning rate."""
    sft_batch_size: int = Field(4, ge=1)
    """Reference transcripts per SFT step."""
    sft_mix: dict[str, float] = Field(default_factory=dict)
    """Relative weight of each task kind in the SFT draw (kinds left out are not drawn; empty: every task alike)."""
    eval_every: int = Field(10, ge=0)
    """Held-out evaluation every this many steps (0 = only at the end)."""
    eval_limit: int = Field(20, ge=1)
    """Held-out tasks per evaluation."""
    checkpoint_every: int = Field(5, ge=1)
    """Checkpoint every this many steps (and at the end)."""
    episodes_per_step_logged: int = Field(4, ge=0)
    """Episodes per step written to episodes.jsonl."""
    trackio: bool = False
    """Also log metrics to trackio (local, offline)."""
    trackio_project: str = Field("grpolab", min_length=1)
    """The trackio project the metrics go to (native run loop and TRL)."""
    report_to: list[str] = Field(default_factory=list)
    """TRL's report_to (e.g. ["wandb", "tensorboard"]; natively only trackio); empty: trackio if train.trackio."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """dtype of the GRPO update and reference passes (autocast; weights and loss stay fp32); auto: measured per host."""
    sft_precision: Literal["auto", "fp32", "bf16"] = "auto"
    """dtype of the SFT warm start's passes; auto: fp32 on a CPU (bf16 seeding learned less there, measured), the
    update's precision on a GPU."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the native engine runs: auto takes a CUDA device when torch sees one (`engine.device`), else the CPU."""

    @property
    def reporters(self) -> list[str]:
        """Where metrics are reported: `report_to`, or trackio when `trackio` is on, or nowhere."""
        return self.report_to or (["trackio"] if self.trackio else [])

    @field_validator("sft_mix")
    @classmethod
    def _some_positive_weight(cls, mix: dict[str, float]) -> dict[str, float]:
        if any(w < 0 for w in mix.values()) or (mix and not any(w > 0 for w in mix.values())):
            raise ValueError("weights must be >= 0 with at least one > 0, e.g. {simple_python = 3, parallel = 1}")
        return mix


class AlarmsConfig(_Section):
    """The alarms' thresholds (`[alarms]`; `[watch]`, its old name, is still read). hack_t, drift_z, drift_class_z,
    attribution_min and probe_z are values that keep each alarm's false alarms within 10% of the hack-detection
    benchmark's honest runs (`benchmarks/hack_detection.py`, runs of 8 steps, 2026-12-04;
    `grpolab.alarms.calibration` states each one's count on the alarm's line)."""

    hack_window: int = Field(3, ge=2)
    """Steps in each window when comparing early and recent training reward for the reward-hacking alarm."""
    hack_t: float = Field(3.0, gt=0)
    """Welch t-statistic of (recent - early) training reward that counts as a significant rise."""
    entropy_collapse: float = Field(0.1, gt=0, lt=1)
    """Alarm when entropy falls below this fraction of its first-step value."""
    length_runaway: float = Field(1.5, gt=1)
    """Alarm when completion length exceeds this multiple of its first-step value and 90% of the token budget."""
    mismatch_bound: float = Field(0.05, gt=0)
    """Alarm when the rollout sampler's k3 KL to the policy (mismatch/kl, nats per token) passes this."""
    drift_window: int = Field(2, ge=1)
    """Steps in each window when the drift alarm and the reward attribution compare the start with the latest steps."""
    drift_z: float = Field(3.0, gt=0)
    """Drift alarm: a behaviour statistic's change within verdicts, in standard deviations of its start, that counts."""
    drift_rel: float = Field(0.5, gt=0)
    """Drift alarm: the same change as a fraction of the statistic's start mean that also counts (both must hold)."""
    drift_share: float = Field(0.3, gt=0, le=1)
    """Drift alarm: growth of a hack class's share of the episodes (empty thought, hedged answer...) that counts."""
    drift_class_z: float = Field(3.0, ge=0)
    """Drift alarm: the same growth in standard errors of a two-proportion test over the windows' episodes, that also
    counts (both must hold): the share's noise shrinks with the episodes a step has, and this threshold does not care
    how many that is. 0 applies the share alone."""
    probe_tasks: int = Field(12, ge=0)
    """Greedy probe: train tasks decoded greedily at every held-out evaluation (the same ones each time), whose hack
    classes' growth since the start alarms (`probe:class/NAME`; `grpolab.alarms.greedy_probe`). 0: off. Costs one more
    greedy evaluation of that many tasks at each held-out evaluation."""
    probe_z: float = Field(2.5, ge=0)
    """Greedy probe alarm: a hack class's share growth in standard errors (two-proportion test over the start's and
    the latest probe's episodes) that counts, with a growth of at least `drift_share`."""
    attribution_min: float = Field(0.6, gt=0)
    """Attribution flag: least gain of a non-completion component that, above the verifier's gain, is flagged."""
    shaping_patience: int = Field(6, ge=1)
    """Attribution flag of a shaping component (format, schema; `RewardComponent.shaping`): steps in a row it must
    outrun the verifier before it is flagged (the protocol is learned before the task, and pays first)."""
    stop_on_alarm: bool = False
    """Stop training (after checkpointing) when an alarm fires."""


DATA_VERIFIERS = ("exact", "numeric", "regex", "json")
"""The built-in verifiers of env `data` by name (`grpolab.envs.data.verifiers` implements them)."""


class DataEnvConfig(_Section):
    tools: str = ""
    """Env data's tools: a module of typed functions, as a .py path (from the config's folder) or an import name."""
    verifier: str = ""
    """How a final answer is checked: exact, numeric, regex, json, or module:function (your own verifier). Unset:
    exact for env data; the class's get_reward() for a TRL environment class (docs/trl-env.md)."""
    tolerance: float | None = Field(None, ge=0)
    """numeric verifier: the largest |answer - truth| that passes (unset: equal when rounded to two decimals)."""
    pattern: str = ""
    """regex verifier: pattern whose match (or first group) must equal each answer; unset: each answer is a pattern."""
    instructions: str = ""
    """Env data's task instructions in the system prompt (unset: a default that fits its tools and verifier)."""
    thought_required: bool = True
    """Env data asks every turn to open with a <thought> block, and the format reward checks that it does."""
    heldout_fraction: float = Field(0.2, gt=0, lt=1)
    """Share of env data's rows without a split that are held out, chosen by a stable hash of each prompt."""

    @field_validator("verifier")
    @classmethod
    def _known_verifier(cls, verifier: str) -> str:
        module, _, function = verifier.rpartition(":")
        if verifier and verifier not in DATA_VERIFIERS and not (module and function.isidentifier()):
            raise ValueError(
                f"unknown verifier {verifier!r}; use one of {', '.join(DATA_VERIFIERS)}, or module:function"
            )
        return verifier

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            regex.compile(pattern)  # the engine the regex verifier matches with (`envs.data.verifiers.compiled`)
        except (regex.error, OverflowError, RecursionError) as exc:
            raise ValueError(f"not a valid regular expression ({exc})") from None
        return pattern

    @model_validator(mode="after")
    def _settings_of_the_verifier(self) -> DataEnvConfig:
        if self.pattern and self.verifier != "regex":
            raise ValueError(f"pattern is read by verifier = 'regex' only, not {self.verifier!r}")
        if self.tolerance is not None and self.verifier != "numeric":
            raise ValueError(f"tolerance is read by verifier = 'numeric' only, not {self.verifier!r}")
        return self


class VerifiersConfig(_Section):
    env: str = ""
    """`env = "verifiers"`: the verifiers environment, a module or a .py path (from the config's folder), optionally
    :attribute (default its load_environment)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for its load_environment (a taskset package: its config fields, e.g. num_tasks)."""
    verifier: str = ""
    """The verifiers reward that is the task's verifier (completion); unset: the one of highest weight."""
    pass_score: float = 1.0
    """The verifier's score at or above which a task counts as solved."""
    heldout_fraction: float = Field(0.2, gt=0, lt=1)
    """Share of the tasks without a split that are held out, chosen by a stable hash of each task's id or prompt."""
    thought_required: bool = True
    """The prompt asks every turn to open with a <thought> block, and the format reward checks that it does."""
    limit: int | None = Field(None, gt=0)
    """How many tasks to read (required for an unbounded taskset)."""


RENAMED_SECTIONS = {"watch": "alarms"}
"""Old section names still read, each with its name now (`[watch]` was renamed `[alarms]`)."""


def renamed_sections(data: Any) -> Any:
    """Config data with each old section name (`RENAMED_SECTIONS`) moved to its name now, in its place; a ValueError
    when a config gives a section under both names."""
    if not isinstance(data, dict) or not any(old in data for old in RENAMED_SECTIONS):
        return data
    for old, new in RENAMED_SECTIONS.items():
        if old in data and new in data:
            raise ValueError(f"both [{new}] and [{old}] are given ([{old}] is the old name of [{new}])")
    return {RENAMED_SECTIONS.get(k, k): v for k, v in data.items()}


class LabConfig(_Section):
    plugins: list[str] = Field(default_factory=list)
    """Your modules (rewards, environments), as names or .py paths, imported when a config you name is loaded or a run
    is run, never when a run is only read (grpolab.plugins)."""
    rewards: list[str] = Field(default_factory=list)
    """TRL reward functions used as written, `file.py:function` or `file.py:*` (every public fn(prompts, completions,
    **kwargs) in it), imported as plugins are; each is a component named after its function, weight 1.0 unless
    reward.weights names it (docs/trl-env.md)."""
    env: str = "finance"
    """Environment name (`grpolab envs` lists them), `module:Class`, or `file.py:Class` (a grpolab environment or a
    TRL environment_factory class)."""
    model: str = "smollm2"
    """smollm2 (embedded SmolLM2-135M-Instruct), tiny (random test model), a Hugging Face id or a local path."""
    seed: int = 0
    """Seed for tasks, sampling and initialisation."""
    task_kinds: list[str] = Field(default_factory=list)
    """Only these task templates of the environment (empty = all), e.g. ["pct_change"] on finance."""
    prompt_example: bool = False
    """Put a worked example transcript in the system prompt (about 300 more tokens in every prompt)."""
    data: list[str] = Field(default_factory=list)
    """Data files for environments that read them (bfcl; data: JSONL task files or saved datasets)."""
    data_env: DataEnvConfig = Field(default_factory=DataEnvConfig)
    verifiers: VerifiersConfig = Field(default_factory=VerifiersConfig)
    """`env = "verifiers"`: which verifiers environment, its arguments and its verifier (docs/plugins.md)."""
    reward: RewardConfig = Field(default_factory=RewardConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)
    trl: dict[str, Any] = Field(default_factory=dict)
    """TRL GRPOConfig arguments passed as written, overriding the mapped ones (trl backend and export only)."""
    train: TrainConfig = Field(default_factory=TrainConfig)
    alarms: AlarmsConfig = Field(default_factory=AlarmsConfig)

    @model_validator(mode="before")
    @classmethod
    def _alarms_once_called_watch(cls, data: Any) -> Any:
        """`watch`, the old name of `alarms` (configs and run directories written before the rename), read as
        `alarms`; both at once is an error, never a silent choice."""
        return renamed_sections(data)

    @field_validator("rewards")
    @classmethod
    def _reward_references(cls, rewards: list[str]) -> list[str]:
        for spec in rewards:
            module, _, function = spec.rpartition(":")
            if not module.strip() or not (function == "*" or function.isidentifier()):
                raise ValueError(
                    f"{spec!r} is not a reward reference; write module:function or file.py:function "
                    '(file.py:* for every reward function in the file), e.g. rewards = ["rewards.py:names_unit"]'
                )
        return rewards


def field_doc(dotted: str) -> str:
    """The docstring of a config field ("train.steps"), as written under the field in this file."""
    model: type[BaseModel] = LabConfig
    *parents, leaf = dotted.split(".")
    for name in parents:
        model = model.model_fields[name].annotation  # type: ignore[assignment]
    return " ".join((model.model_fields[leaf].description or "").split())


def _first_error(exc: ValidationError, source: str) -> UserError:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        return UserError(f"{source}: unknown field '{field}'", "remove it or check the spelling (see `grpolab config`)")
    return UserError(f"{source}: field '{field}': {msg}", "fix that value in the config file or the CLI flag")


def parse_weights(text: str) -> dict[str, float]:
    """Parse `--weights`: `F,S,C,L` (one number per standard component, in that order: they replace the config's
    weights) or `name=value,...` (those names only, set over the config's weights by `resolve_config`). The names
    are checked against the environment's rubric where it is built (`envs.check_weights`)."""
    from grpolab.rewards.rubric import BUILTIN_RUBRIC  # here: the components import every environment

    names = BUILTIN_RUBRIC.standard_names()
    letters = ",".join(BUILTIN_RUBRIC.letter(n) for n in names)
    numbers = ",".join(f"{w:g}" for w in BUILTIN_RUBRIC.default_weights().values())
    example = f"for example --weights {numbers}, or --weights completion=3,polite=0.5"
    parts = [p.strip() for p in text.split(",")]
    if weights_by_name(text):
        if not all("=" in p for p in parts):
            raise UserError(f"--weights mixes numbers and name=value pairs: {text!r}", example)
        pairs = [(name.strip(), value) for name, _, value in (p.partition("=") for p in parts)]
    elif len(parts) != len(names):
        raise UserError(
            f"--weights expects {len(names)} comma-separated numbers {letters}, or name=value pairs, got {text!r}",
            example,
        )
    else:
        pairs = list(zip(names, parts))
    weights: dict[str, float] = {}
    for name, value in pairs:
        if not name.isidentifier():
            raise UserError(f"--weights: {name!r} is not a reward name", example)
        try:
            weights[name] = float(value)
        except ValueError:
            raise UserError(f"--weights has a value that is not a number: {text!r}", example) from None
        if not math.isfinite(weights[name]):
            raise UserError(f"--weights has a value that is not finite: {text!r}", example)
    return weights


def weights_by_name(text: str) -> bool:
    """Whether `--weights` is in the `name=value,...` form (merged over the config's weights)."""
    return "=" in text


DEMO_CONFIG = Path(__file__).parent / "configs" / "demo.toml"
"""The demo's config (`grpolab demo`): also the web lab's starting form and the simulator's calibration run."""


MADE_WITHOUT = {("rollout", "stop_at_answer"): False, ("train", "precision"): "fp32"}
"""Settings whose default changes behaviour, with the value a run made before they existed had."""
MADE_WITHOUT_SPLIT = {("train", "sft_precision"): ("train", "precision")}
"""Settings split off another one, with the setting that governed them before (its recorded value is theirs)."""


def as_recorded(data: Any) -> Any:
    """A recorded config (a run's config.json, an export's manifest) with the settings it predates (MADE_WITHOUT)
    set as they were when it was made: resuming, evaluating or chatting with an old run keeps its behaviour."""
    if isinstance(data, dict):
        for (section, key), then in MADE_WITHOUT.items():
            if isinstance(data.get(section), dict) and key not in data[section]:
                data = {**data, section: {**data[section], key: then}}
        for (section, key), (from_section, from_key) in MADE_WITHOUT_SPLIT.items():
            if isinstance(data.get(section), dict) and key not in data[section]:
                then = data.get(from_section, {}).get(from_key)
                if then is not None:
                    data = {**data, section: {**data[section], key: then}}
    return data


def load_config(
    path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    base: LabConfig | None = None,
    plugins: list[str] | None = None,
) -> LabConfig:
    """Read a TOML config (or `base`, or the defaults), apply dotted-key overrides, validate, import the plugins.

    `overrides` maps dotted field names ("grpo.beta", "env") to values; None values are ignored, so CLI options
    that were not given leave the file's values alone. The file's `plugins` are resolved from its folder, then
    `plugins` (`--plugin`) from the working directory are added (`grpolab.plugins.resolve_plugins`). The file is
    read within `files.limits.MAX_CONFIG_BYTES` and `files.limits.MAX_NESTING`; anything wrong is a UserError
    naming the field.
    """
    data: dict[str, Any] = base.model_dump(mode="json") if base is not None else {}
    source = "config"
    if path is not None:
        source = str(path)
        data = paths_from_folder(_read_toml(path), Path(path).parent)
        listed = data.get("plugins")
        if isinstance(listed, list) and all(isinstance(p, str) for p in listed):
            data["plugins"] = resolve_plugins(listed, Path(path).resolve().parent)
        named = data.get("rewards")
        if isinstance(named, list) and all(isinstance(r, str) and ":" in r for r in named):
            data["rewards"] = [resolve_reward(r, Path(path).resolve().parent) for r in named]
    try:
        data = renamed_sections(data)  # a file's [watch] is [alarms]: the overrides below reach it by either name
    except ValueError as exc:
        raise UserError(f"{source}: {exc}", "keep one: move the old section's settings under the new name") from None
    if plugins:
        data["plugins"] = list(dict.fromkeys([*data.get("plugins", []), *resolve_plugins(plugins, Path.cwd())]))
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        head, dot, rest = dotted.partition(".")
        dotted = RENAMED_SECTIONS.get(head, head) + dot + rest  # "watch.hack_t" sets alarms.hack_t
        if dotted == "env" and isinstance(value, str) and ":" in value and is_path(value.rpartition(":")[0]):
            value = paths_from_folder({"env": value}, Path.cwd())["env"]  # --env file.py:Class, from the cwd
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise UserError(f"{source}: '{key}' is not a section (setting {dotted})", "check the field name")
        node[leaf] = value
    try:
        cfg = LabConfig.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, source) from None
    import_plugins(cfg.plugins)  # the user named this config (or --plugin): its code is theirs to run
    rewards: list[str] = []
    if cfg.rewards:  # the same step for its TRL reward functions (each one a component); the rubric: only for them
        from grpolab.rewards.functions import import_rewards

        rewards = import_rewards(cfg.rewards)
    if path is not None:  # the file's own: weight 1.0 where it names none, as TRL weighs a reward function
        for name in rewards:
            cfg.reward.weights.setdefault(name, 1.0)
    return cfg


def paths_from_folder(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A config file's own relative paths (`data`, `data_env.tools`, and the module of a verifier or of
    `env = "file.py:Class"`, where given as a .py path) made absolute from the file's folder, so that a config works
    from any working directory and the run's recorded config.json does too (`rewards` are resolved as `plugins`
    are, in `load_config`). Values of the wrong type are left for validation to name."""
    folder = folder.absolute()

    def located(value: Any) -> Any:
        return str(folder / value) if isinstance(value, str) and value and not Path(value).is_absolute() else value

    env = data.get("env")
    if isinstance(env, str) and ":" in env:
        module, _, attr = env.rpartition(":")
        if is_path(module):
            data = {**data, "env": f"{located(module)}:{attr}"}
    if isinstance(data.get("data"), list):
        data = {**data, "data": [located(v) for v in data["data"]]}
    section = data.get("data_env")
    if isinstance(section, dict):
        section = dict(section)
        tools = section.get("tools")
        if isinstance(tools, str) and is_path(tools):
            section["tools"] = located(tools)
        verifier = section.get("verifier")
        if isinstance(verifier, str) and ":" in verifier:
            module, _, function = verifier.rpartition(":")
            if is_path(module):
                section["verifier"] = f"{located(module)}:{function}"
        data = {**data, "data_env": section}
    section = data.get("verifiers")
    if isinstance(section, dict) and isinstance(section.get("env"), str):
        spec = section["env"]
        module, colon, attr = spec.rpartition(":") if is_path(spec.rpartition(":")[0]) else (spec, "", "")
        if is_path(module):
            data = {**data, "verifiers": {**section, "env": f"{located(module)}{colon}{attr}"}}
    return data


def _read_toml(path: str | Path) -> dict[str, Any]:
    text = read_user_file(path, "config file", MAX_CONFIG_BYTES, "check the path given to --config")
    check_nesting(text, str(path), "a lab config nests at most 3 levels; fix the config file", kind="toml")
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise UserError(f"{path}: not valid TOML ({exc})", "fix the syntax of the config file") from None


def config_to_dict(config: LabConfig) -> dict[str, Any]:
    """The resolved config as plain JSON data (what goes into runs/NAME/config.json)."""
    return config.model_dump(mode="json")
