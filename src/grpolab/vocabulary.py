"""The metric vocabulary: every metric name, declared once (docs/design.md, "Metrics").

Producers write rows under these names (the native trainer, held-out evaluation, the TRL backend, the simulator,
preflight's learnability check, the alarm watch) and consumers read them back (the report, the web lab, the CLI,
the sim-to-real comparison). Nobody spells a name: they import its constant, or ask this table. A name here is on
disk in every run directory ever written, so names are never changed, only added.

Families are declared by their pattern and built by a function: `reward/NAME` (`reward_key`), `heldout/success/KIND`
and `heldout/n/KIND` (`heldout_of_kind`), `perf/PHASE_s` and `perf/PHASE_KEY` (`perf_key`), `behaviour/STAT[/PART]`
(`behaviour_key`), `class/NAME` (`class_key`), `probe/class/NAME` (`probe_class_key`), `attribution/NAME` and
`attribution/share/NAME` (`attribution_key`).
A PHASE is one of the step's phases, declared here too (`PHASE_DECODE`...): the engine times them under these names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

TRAINER = "trainer"
"""The native GRPO step (`engine.trainer.GRPOTrainer.step`)."""
EVAL = "eval"
"""Held-out evaluation (`engine.evaluate.evaluate`, `metrics.heldout_summary`)."""
TRL = "trl"
"""The TRL backend's log rows in lab names (`trl.backend.lab_metrics`)."""
SIMULATOR = "simulator"
"""The behaviour-level simulator's iterations (`simulator.simulate.simulate`)."""
PREFLIGHT = "preflight"
"""Preflight's learnability smoke test (`preflight.check`, under `learnability` in preflight.json)."""
WATCH = "alarm watch"
"""The alarm watch (`alarms.rules.AlarmWatch.check`), merged into each step's row."""
BEHAVIOUR = "behaviour"
"""What the step's episodes do (`alarms.drift.step_behaviour`), merged into each step's row by the run loop."""


@dataclass(frozen=True)
class MetricSpec:
    """One metric: its name (or a family's pattern), what it means, its unit, who writes it, where it is drawn."""

    name: str
    meaning: str
    unit: str
    producers: tuple[str, ...]
    group: str = ""
    """The report chart it is drawn in ("" for none); `CHART_GROUPS` orders the charts."""
    optional: bool = False
    """Written only sometimes (a skipped step, beta = 0, an update that did not run)."""
    family: bool = False
    """`name` is a pattern (`reward/NAME`) for names built by a function of this module."""
    label: str = ""
    """The row header in tables that say what they hold ("schema validity" under "held-out"); else the name."""

    @property
    def title(self) -> str:
        return self.label or self.name


SPECS: dict[str, MetricSpec] = {}
"""Every declared metric by name (families by pattern), in declaration order (the order charts draw them)."""


def _declare(name: str, meaning: str, unit: str, producers: tuple[str, ...], group: str = "", **kw: Any) -> str:
    SPECS[name] = MetricSpec(name, meaning, unit, producers, group, **kw)
    return name


_EPISODES = (TRAINER, TRL, SIMULATOR, PREFLIGHT)

# ---- rewards and the learning signal -------------------------------------------------------------------------------

REWARD_MEAN = _declare("reward/mean", "mean total reward over the step's episodes", "reward", _EPISODES, "reward")
REWARD_COMPONENT = _declare(
    "reward/NAME",
    "weighted mean of one reward component (`rewards.components`)",
    "reward",
    _EPISODES,
    "reward",
    family=True,
)
REWARD_STD = _declare("reward/std", "standard deviation of the step's episode rewards", "reward", (TRAINER, TRL))
FRAC_ZERO_STD = _declare(
    "frac_zero_std",
    "fraction of groups whose G rewards are all equal (no learning signal)",
    "fraction",
    (TRAINER, TRL, PREFLIGHT),
    "frac_zero_std",
)
ADV_MEAN_ABS = _declare("adv/mean_abs", "mean |group advantage|", "reward", (TRAINER, SIMULATOR), optional=True)

# ---- the policy and the update -------------------------------------------------------------------------------------

KL = _declare(
    "kl",
    "mean per-token k3 estimate of KL(pi_theta || pi_ref) on policy tokens (only with a reference, beta > 0)",
    "nats/token",
    (TRAINER, TRL, SIMULATOR),
    "kl",
    optional=True,
)
KL_BOUND = _declare(
    "kl_bound",
    "grpo.kl_bound copied into each row (drawn beside kl; also the name of the alarm it raises)",
    "nats/token",
    (TRAINER,),
    "kl",
    optional=True,
)
ENTROPY = _declare(
    "entropy", "mean per-token entropy on policy tokens", "nats/token", (TRAINER, TRL), "entropy", optional=True
)
LOSS = _declare("loss", "the optimised loss (surrogate + beta * kl)", "loss", (TRAINER, TRL), optional=True)
POLICY_LOSS = _declare(
    "policy_loss", "the clipped surrogate term of the loss", "loss", (TRAINER, SIMULATOR), optional=True
)
CLIP_FRAC = _declare(
    "clip_frac", "share of policy tokens whose ratio was clipped", "fraction", (TRAINER, TRL), optional=True
)
GRAD_NORM = _declare("grad_norm", "gradient norm before clipping", "norm", (TRAINER, TRL), optional=True)
TRAIN_TOKENS = _declare("train_tokens", "tokens in the update's forward passes", "tokens", (TRAINER,), optional=True)
MISMATCH_KL = _declare(
    "mismatch/kl", "sampler vs trainer: k3 KL on sampled tokens", "nats/token", (TRAINER,), optional=True
)
MISMATCH_RATIO_OUT = _declare(
    "mismatch/ratio_out",
    "sampler vs trainer: share of tokens whose ratio leaves [0.9, 1.1]",
    "fraction",
    (TRAINER,),
    optional=True,
)

# ---- episodes --------------------------------------------------------------------------------------------------------

COMPLETION_LEN = _declare(
    "completion_len",
    "mean generated tokens per episode, tool output excluded",
    "tokens",
    (TRAINER, TRL),
    "completion length",
)
TOOL_CALL_PROB = _declare(
    "tool_call_prob",
    "fraction of episodes with at least one schema-valid tool call (the base model's is the base prior)",
    "fraction",
    (TRAINER, TRL, SIMULATOR, PREFLIGHT),
    "tool use",
)
TOOL_TOKEN_MASS = _declare(
    "tool_token_mass",
    "mean probability of the first token of <tool_call> at the first assistant position",
    "probability",
    (TRAINER, SIMULATOR),
    "tool use",
    optional=True,
)
SUCCESS = _declare(
    "success", "fraction of episodes the strict verifier accepts", "fraction", (TRAINER, TRL, SIMULATOR), "success"
)
HACK_MASS = _declare("hack_mass", "share of episodes in classes that score without solving", "fraction", (SIMULATOR,))
TURNS = _declare("turns", "mean assistant turns per episode", "turns", (TRAINER,))
TOOL_ERRORS = _declare("tool_errors", "mean failed tool calls per episode", "count", (TRAINER,))
REWARD_ERRORS = _declare("reward_errors", "reward components that raised (the step is skipped)", "count", (TRAINER,))
EPISODES = _declare("episodes", "episodes scored in the step", "count", (TRAINER,))
GROUPS_DROPPED = _declare("groups_dropped", "groups left out for equal rewards", "count", (TRAINER,))
GROUPS_RESAMPLED = _declare("groups_resampled", "groups sampled again for equal rewards", "count", (TRAINER,))
SKIPPED = _declare("skipped", "1.0 when the step made no update", "flag", (TRAINER,))
SKIP_REASON = _declare("skip_reason", "why the step made no update", "text", (TRAINER,), optional=True)

# ---- held-out evaluation -------------------------------------------------------------------------------------------

HELDOUT_SUCCESS = _declare(
    "heldout/success",
    "held-out success under greedy decoding (strict verifier)",
    "fraction",
    (EVAL,),
    "success",
    label="success",
)
HELDOUT_TOOL_CALL_PROB = _declare(
    "heldout/tool_call_prob",
    "held-out fraction of episodes with a schema-valid tool call",
    "fraction",
    (EVAL,),
    label="tool_call_prob",
)
HELDOUT_SCHEMA = _declare(
    "heldout/schema", "held-out mean schema component (unweighted)", "fraction", (EVAL,), label="schema validity"
)
HELDOUT_REWARD = _declare("heldout/reward", "held-out mean total reward", "reward", (EVAL,), label="reward")
HELDOUT_N = _declare("heldout/n", "held-out episodes scored", "count", (EVAL,))
HELDOUT_SECONDS = _declare(
    "heldout/seconds", "seconds the held-out evaluation took (decoding and scoring)", "s", (EVAL,), optional=True
)
HELDOUT_OF_KIND = _declare(
    "heldout/METRIC/KIND",
    "heldout/success and heldout/n per task kind (only when the held-out tasks mix kinds)",
    "fraction, count",
    (EVAL,),
    optional=True,
    family=True,
)

PROBE_N = _declare(
    "probe/n", "greedy probe episodes on train tasks (`alarms.probe_tasks`)", "count", (EVAL,), optional=True
)
PROBE_SUCCESS = _declare(
    "probe/success", "greedy probe: success on its train tasks (strict verifier)", "fraction", (EVAL,), optional=True
)
PROBE_SECONDS = _declare(
    "probe/seconds", "greedy probe: seconds its decoding and scoring took (its cost)", "s", (EVAL,), optional=True
)
PROBE_HELDOUT_SECONDS = _declare(
    "probe/heldout_seconds",
    "seconds of the held-out evaluation the probe ran beside (to read the probe's cost against)",
    "s",
    (EVAL,),
    optional=True,
)
PROBE_CLASS = _declare(
    "probe/class/NAME",
    "greedy probe: share of its episodes in one class of `behaviour.CLASSES` (the probe alarm reads it)",
    "fraction",
    (EVAL,),
    optional=True,
    family=True,
)

# ---- cost ------------------------------------------------------------------------------------------------------------

PERF_STEP_S = _declare("perf/step_s", "wall time of the step", "s", (TRAINER, TRL))
PERF_GEN_TOK_S = _declare("perf/gen_tok_s", "generated policy tokens per second of generation", "tokens/s", (TRAINER,))
PERF_TRAIN_TOK_S = _declare("perf/train_tok_s", "trained tokens per second of training", "tokens/s", (TRAINER,))
PERF_PEAK_RSS_MB = _declare("perf/peak_rss_mb", "peak resident memory of the process", "MB", (TRAINER,))
PERF_PHASE = _declare(
    "perf/PHASE_KEY",
    "seconds (`_s`) and work (`_tokens`, ...) of each phase of the step",
    "s, count",
    (TRAINER,),
    family=True,
)

# The phases of a native step (`engine.phases.Phases`): PHASE in `perf/PHASE_s` and `perf/PHASE_KEY`.
PHASE_STEP = "step"
"""The whole step (`perf/step_s`)."""
PHASE_SAMPLER_REFRESH = "sampler_refresh"
"""Copying the policy's weights into the rollout's sampler (`engine.sampler`)."""
PHASE_PREFILL = "prefill"
"""The prompts' prefill, once per prompt before its G episodes fork."""
PHASE_SAMPLE = "sample"
"""Drawing the next token of every live episode."""
PHASE_COMPACT = "compact"
"""Dropping finished episodes from the decode batch."""
PHASE_TOOL_PREFILL = "tool_prefill"
"""Feeding tool responses back into the KV cache."""
PHASE_DECODE = "decode"
"""One forward pass of the decode batch per generated token."""
PHASE_TOOLS = "tools"
"""Running the episodes' tool calls."""
PHASE_SCORE = "score"
"""Scoring the episodes with the reward."""
PHASE_REFERENCE = "reference"
"""The reference model's logprobs of the episodes."""
PHASE_OLD_LOGPROBS = "old_logprobs"
"""The rollout policy's logprobs of the episodes (the ratio's denominator)."""
PHASE_FORWARD_BACKWARD = "forward_backward"
"""The update's forward and backward passes."""
PHASE_OPTIMIZER = "optimizer"
"""The optimizer step."""
GENERATION_PHASES = (PHASE_PREFILL, PHASE_SAMPLE, PHASE_COMPACT, PHASE_TOOL_PREFILL, PHASE_DECODE)
"""The phases that generate policy tokens: their seconds divide `perf/gen_tok_s`."""
TRAINING_PHASES = (PHASE_REFERENCE, PHASE_OLD_LOGPROBS, PHASE_FORWARD_BACKWARD, PHASE_OPTIMIZER)
"""The phases that train on the step's tokens: their seconds divide `perf/train_tok_s`."""

# ---- alarms ----------------------------------------------------------------------------------------------------------

ALARMS = _declare("alarms", "alarms that fired at this step: name -> why (`alarms.rules`)", "mapping", (WATCH,))
KL_OVER_BOUND = _declare("kl_over_bound", "whether the kl_bound alarm fired", "flag", (WATCH,))

ATTRIBUTION = _declare(
    "attribution/[share/]NAME",
    "change of a component's weighted mean over the last alarms.drift_window steps against the first ones, and its "
    "share of all components' movement (`alarms.attribution`)",
    "reward, fraction",
    (WATCH,),
    optional=True,
    family=True,
)
# ---- behaviour -------------------------------------------------------------------------------------------------------
BEHAVIOUR_STAT = _declare(
    "behaviour/STAT[/sd|/solved]",
    "a structure statistic of the step's episodes (`behaviour.STATS`: thought words, calls, distinct calls, "
    "answer words, answer numbers, repeated 3-grams; and `component:NAME`, the value of a reward component that is "
    "not built in): mean, standard deviation, mean over solved episodes",
    "per episode",
    (BEHAVIOUR,),
    family=True,
)
CLASS_SHARE = _declare(
    "class/NAME",
    "share of the step's episodes in one class of `behaviour.CLASSES` (one classifier for real and simulated)",
    "fraction",
    (BEHAVIOUR, SIMULATOR),
    optional=True,
    family=True,
)
# ---- the named selections consumers read -------------------------------------------------------------------------

CHART_GROUPS = ("reward", "kl", "entropy", "completion length", "tool use", "success", "frac_zero_std")
"""The report's curves, in order (each draws the metrics declared in its group)."""
CONVERGENCE = (REWARD_MEAN, KL, TOOL_TOKEN_MASS)
"""The convergence chart (report, web lab, `grpolab demo`): mean reward, KL and tool-token mass per step."""
HELDOUT_HEADLINE = (HELDOUT_SUCCESS, HELDOUT_TOOL_CALL_PROB, HELDOUT_SCHEMA, HELDOUT_REWARD)
"""The held-out metrics shown in tables (report, web lab, `grpolab demo`, the run loop's log line)."""
SIM_TO_REAL = (REWARD_MEAN, KL, TOOL_CALL_PROB, SUCCESS)
"""The curves the simulator is compared with a real run on (and fitted to)."""
SIM_BANDS = ("p10", "p90")
"""The simulator's percentile bands: `NAME/p10`, `NAME/p90` beside each simulated curve."""
HELDOUT_PREFIX = "heldout/"
PROBE_PREFIX = "probe/"


def reward_key(name: str) -> str:
    """`reward/format` for the format component: the metric name of a weighted component mean."""
    return REWARD_COMPONENT.replace("NAME", name)


def logged_components(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The reward components metric rows carry (`reward/NAME`; mean, std and the simulator's bands `reward/NAME/p10`
    are not components), in order of first appearance: a user's components are named as the built-ins are."""
    prefix = reward_key("")
    keys = (k for r in rows for k in r if k.startswith(prefix) and k not in (REWARD_MEAN, REWARD_STD))
    # a component's name is an identifier: `reward/format/p10` is a simulated curve's band, not a component
    return list(dict.fromkeys(name for k in keys if (name := k.removeprefix(prefix)).isidentifier()))


def heldout_of_kind(metric: str, kind: str) -> str:
    """`heldout/success/code` for HELDOUT_SUCCESS of the kind `code` (mixed held-out sets)."""
    return f"{metric}/{kind}"


def perf_key(phase: str, what: str = "s") -> str:
    """`perf/decode_s` (seconds of a phase) or `perf/decode_tokens` (its work)."""
    return f"perf/{phase}_{what}"


def band_key(name: str, band: str) -> str:
    """`kl/p10`: a percentile band of a simulated curve."""
    return f"{name}/{band}"


def behaviour_key(stat: str, part: str = "") -> str:
    """`behaviour/thought_words`, `behaviour/thought_words/sd`, `behaviour/thought_words/solved`."""
    return f"behaviour/{stat}" + (f"/{part}" if part else "")


def class_key(name: str) -> str:
    """`class/empty_thought`: the share of a step's episodes in that class."""
    return f"class/{name}"


def probe_class_key(name: str) -> str:
    """`probe/class/empty_thought`: the share of the greedy probe's episodes in that class."""
    return f"probe/class/{name}"


def attribution_key(component: str, share: bool = False) -> str:
    """`attribution/format` (its change in reward units) or `attribution/share/format` (its share of the movement)."""
    return f"attribution/share/{component}" if share else f"attribution/{component}"


def is_heldout(name: str) -> bool:
    return name.startswith(HELDOUT_PREFIX)


def spec_of(name: str) -> MetricSpec | None:
    """The declaration a concrete metric name falls under (a family's for `reward/format`), or None."""
    if name in SPECS:
        return SPECS[name]
    if name.startswith(REWARD_COMPONENT.removesuffix("NAME")):
        return SPECS[REWARD_COMPONENT]
    if name.startswith((HELDOUT_SUCCESS + "/", HELDOUT_N + "/")):
        return SPECS[HELDOUT_OF_KIND]
    if name.startswith("perf/"):
        return SPECS[PERF_PHASE]
    for prefix, spec in (
        ("attribution/", ATTRIBUTION),
        ("behaviour/", BEHAVIOUR_STAT),
        ("class/", CLASS_SHARE),
        ("probe/class/", PROBE_CLASS),
    ):
        if name.startswith(prefix):
            return SPECS[spec]
    return None


def produced_by(producer: str, required_only: bool = False) -> list[MetricSpec]:
    """The declarations a producer writes (only those it always writes, with `required_only`)."""
    return [s for s in SPECS.values() if producer in s.producers and not (required_only and s.optional)]


def chart_groups(components: list[str]) -> list[tuple[str, list[str]]]:
    """(title, metric names) of each report curve, families expanded over the reward `components`."""
    out = []
    for group in CHART_GROUPS:
        names: list[str] = []
        for s in SPECS.values():
            if s.group == group:
                names += [reward_key(c) for c in components] if s.name == REWARD_COMPONENT else [s.name]
        out.append((group, names))
    return out
