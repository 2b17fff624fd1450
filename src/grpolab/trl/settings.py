"""The lab config mapped field by field onto TRL's GRPOConfig and peft's LoraConfig, and what TRL cannot express.

Each value carries the lab field it came from; `train --backend trl` and the exported script both use this mapping,
so the two cannot drift apart. Every `LabConfig` field is declared in exactly one of `MAPPED` (its value reaches
TRL), `NOT_APPLICABLE` (the lab's run loop honours it for both backends) or `UNSUPPORTED` (TRL cannot honour it:
`train --backend trl` refuses a setting that would change the result and notes the rest); a test walks the config
so that a new field fails until it is classified here.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from grpolab.config import LabConfig
from grpolab.engine.precision import choose_sft_precision, native_bf16
from grpolab.engine.trainer import MICRO_BATCH_TOKENS
from grpolab.errors import UserError
from grpolab.models import LORA_FIELDS, peft_lora_args
from grpolab.rundir import KEEP_CHECKPOINTS

TRL_VERSION = "1.16.0"
"""The TRL release the exported script and the backend are tested against."""


def bf16_here(precision: str = "auto") -> bool:
    """Whether TRL trains in bf16 on this machine: `train.precision` where it is forced (or resolved by the run
    loop); auto: on a CUDA GPU with bf16, or on a CPU with native bf16 dot products (`engine.precision.native_bf16`:
    elsewhere a bf16 matmul is emulated, 177x slower than fp32 on an AVX2-only EPYC)."""
    if precision != "auto":
        return precision == "bf16"
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return native_bf16() is not None


def sft_bf16_here(sft_precision: str = "auto", precision: str = "auto") -> bool:
    """Whether the SFT warm start trains in bf16 here: the native rule (`engine.precision.choose_sft_precision`:
    forced, or under auto as the update on a GPU and fp32 on a CPU), with TRL's update precision (`bf16_here`)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    update = "bf16" if bf16_here(precision) else "fp32"
    return choose_sft_precision(sft_precision, update, device).chosen == "bf16"


@dataclass(frozen=True)
class Setting:
    name: str
    """The TRL / peft argument."""
    value: Any
    source: str
    """The lab config field(s) it comes from, or why it is fixed."""
    from_section: bool = False
    """Set by the config's `[trl]` section: written as given, never as an expression decided at run time."""


def grpo_settings(cfg: LabConfig, output_dir: str) -> list[Setting]:
    """GRPOConfig arguments equal to the lab config (one optimizer step per lab step and epoch, as natively), then
    the `[trl]` section's, which replace mapped ones of the same name (`trl_section`)."""
    return _with_section(_mapped_settings(cfg, output_dir), trl_section(cfg))


def micro_batch_cap(cfg: LabConfig) -> int:
    """The most episodes TRL runs in one forward and backward: as many as fit the native engine's
    MICRO_BATCH_TOKENS, an episode counted at its longest prompt plus its full policy budget
    (rollout.max_new_tokens x rollout.max_turns). Unlike the native update, which runs a group's prompt once, TRL
    runs every episode's prompt again and pads each to the longest: at the demo's shape, 4 episodes a micro-batch
    without the prompt counted held ~3,000 positions and TRL peaked at 12.2 GB (benchmarks/vs_trl.py --shape demo).
    bnpo keeps them all in one: TRL takes its token mean per micro-batch, which would change the loss."""
    if cfg.grpo.loss_type == "bnpo":
        return cfg.train.prompts_per_step * cfg.rollout.group_size
    episode = longest_prompt(cfg) + cfg.rollout.max_new_tokens * cfg.rollout.max_turns
    return max(1, MICRO_BATCH_TOKENS // episode)


def longest_prompt(cfg: LabConfig) -> int:
    """Tokens of the config's longest train prompt in its episode format (the longest of the 8 longest by
    characters: tokenising every task of a large env would cost seconds), or 0 where the model's tokenizer is not
    at hand (a Hugging Face id not cached here: the cap then counts the policy budget alone)."""
    return _longest_prompt(
        cfg.model_dump_json(
            include={
                "model",
                "env",
                "task_kinds",
                "prompt_example",
                "data",
                "data_env",
                "verifiers",
                "plugins",
                "rollout",
            }
        )
    )


@lru_cache(maxsize=8)
def _longest_prompt(key: str) -> int:
    from grpolab.envs import env_for  # the env and tokenizer: only where a micro-batch is sized
    from grpolab.formats import checked_format
    from grpolab.models import load_tokenizer

    cfg = LabConfig.model_validate_json(key)
    try:
        tokenizer = load_tokenizer(cfg.model)
    except UserError:
        return 0
    env = env_for(cfg)
    fmt = checked_format(tokenizer, env, cfg.rollout.format, cfg.rollout.tool_syntax)
    tasks = sorted(env.tasks("train"), key=lambda t: -len(str(env.messages(t))))[:8]  # the longest texts
    return max((len(fmt.prompt_ids(env, t)) for t in tasks), default=0)


def micro_batch(per_process: int, cap: int) -> int:
    """Episodes per micro-batch: the largest divisor of a process's episodes per step that is at most `cap` (a step
    is then `per_process // micro_batch` micro-batches of one size, whose gradients TRL accumulates)."""
    return max(d for d in range(1, max(per_process, 1) + 1) if per_process % d == 0 and d <= max(cap, 1))


def _mapped_settings(cfg: LabConfig, output_dir: str) -> list[Setting]:
    g = cfg.grpo
    episodes = cfg.train.prompts_per_step * cfg.rollout.group_size
    micro = micro_batch(episodes, micro_batch_cap(cfg))
    accumulate = "one optimizer step per batch of rollouts, as the native engine"
    bf16 = bf16_here(cfg.train.precision)
    names = list(cfg.reward.weights)
    return [
        Setting("output_dir", output_dir, "the script's first argument"),
        Setting("num_generations", cfg.rollout.group_size, "rollout.group_size"),
        Setting(
            "per_device_train_batch_size",
            micro,
            "episodes per forward+backward: the native token budget (micro_batch_cap)",
        ),
        Setting("gradient_accumulation_steps", episodes // micro, accumulate),
        Setting("steps_per_generation", episodes // micro, "one generation batch (the whole step) per optimizer step"),
        Setting("num_iterations", g.mu, "grpo.mu"),
        Setting("max_steps", cfg.train.steps * g.mu, "train.steps x grpo.mu (TRL counts optimizer steps)"),
        Setting("learning_rate", g.learning_rate, "grpo.learning_rate"),
        Setting("lr_scheduler_type", "constant", "the native engine keeps the learning rate constant"),
        Setting("weight_decay", 0.0, "the native engine uses AdamW without weight decay"),
        Setting("max_grad_norm", g.max_grad_norm, "grpo.max_grad_norm"),
        Setting("beta", g.beta, "grpo.beta"),
        Setting("epsilon", g.epsilon, "grpo.epsilon"),
        Setting("epsilon_high", g.epsilon_high if g.epsilon_high is not None else g.epsilon, "grpo.epsilon_high"),
        Setting("loss_type", g.loss_type, "grpo.loss_type (the same losses under the same names)"),
        Setting("scale_rewards", g.scale_rewards, "grpo.scale_rewards"),
        Setting("importance_sampling_level", g.importance_sampling_level, "grpo.importance_sampling_level"),
        Setting(
            "mask_truncated_completions",
            g.mask_truncated_completions,
            "grpo.mask_truncated_completions (the lab rollout ends each episode not cut by the budget with EOS)",
        ),
        Setting("multi_objective_aggregation", g.multi_objective_aggregation, "grpo.multi_objective_aggregation"),
        Setting("top_entropy_quantile", g.top_entropy_quantile, "grpo.top_entropy_quantile"),
        Setting("reward_weights", [cfg.reward.weights[n] for n in names], f"reward.weights ({', '.join(names)})"),
        Setting(
            "max_completion_length", cfg.rollout.max_new_tokens, "rollout.max_new_tokens (also dr_grpo's constant)"
        ),
        Setting("temperature", cfg.rollout.temperature, "rollout.temperature (TRL scales logits by it as well)"),
        Setting("top_p", cfg.rollout.top_p, "rollout.top_p"),
        Setting("seed", cfg.seed, "seed"),
        Setting("bf16", bf16, "train.precision (auto: bf16 on a GPU or CPU with native bf16, measured per host)"),
        Setting("use_cpu", not torch.cuda.is_available(), "CPU only where there is no GPU"),
        Setting("gradient_checkpointing", False, "TRL defaults to True; off as in the native engine"),
        Setting("save_steps", cfg.train.checkpoint_every, "train.checkpoint_every"),
        Setting("save_total_limit", KEEP_CHECKPOINTS, f"the run dir keeps {KEEP_CHECKPOINTS} checkpoints"),
        Setting("logging_steps", 1, "one metrics row per step"),
        Setting("report_to", cfg.train.reporters or "none", "train.report_to (empty: trackio if train.trackio)"),
        Setting("project", cfg.train.trackio_project, "train.trackio_project"),
        Setting("remove_unused_columns", False, "keep task_id for the reward functions"),
    ]


@lru_cache(maxsize=1)
def grpo_config_fields() -> frozenset[str]:
    """The arguments TRL's GRPOConfig takes (its dataclass fields)."""
    try:
        from trl import GRPOConfig  # heavy optional dependency (transformers): only for a [trl] section
    except ImportError:
        raise UserError("the config's [trl] section is checked against TRL", f"pip install trl=={TRL_VERSION}")
    return frozenset(f.name for f in dataclasses.fields(GRPOConfig) if f.init)


def trl_section(cfg: LabConfig) -> dict[str, Any]:
    """The config's `[trl]` section, checked against TRL's GRPOConfig fields: a key it does not take is a UserError
    naming each one with its near matches."""
    if not cfg.trl:
        return {}
    known = grpo_config_fields()
    unknown = [k for k in cfg.trl if k not in known]
    if unknown:
        hints = [
            f"{k}: did you mean {' or '.join(near)}?" if (near := difflib.get_close_matches(k, known, 3)) else f"{k}: -"
            for k in unknown
        ]
        raise UserError(
            f"[trl] has {'a key' if len(unknown) == 1 else 'keys'} that GRPOConfig does not take: {', '.join(unknown)}",
            f"{'; '.join(hints)} (the [trl] section is passed to trl.GRPOConfig as written)",
        )
    return dict(cfg.trl)


def _with_section(settings: list[Setting], section: dict[str, Any]) -> list[Setting]:
    """`settings` with the `[trl]` section's values over those of the same name, and its other keys after them."""
    names = {s.name for s in settings}
    out = [
        Setting(s.name, section[s.name], f"[trl], over {s.value!r} from {s.source}", True) if s.name in section else s
        for s in settings
    ]
    return out + [Setting(k, v, "[trl]", True) for k, v in section.items() if k not in names]


def trl_section_notes(cfg: LabConfig) -> list[str]:
    """What the `[trl]` section changes, one line per key (said by export-trl and the trl backend)."""
    mapped = {s.name: s for s in _mapped_settings(cfg, "o")}
    section = trl_section(cfg)
    notes = [
        f"[trl] {k} = {v!r} overrides {mapped[k].value!r} from {mapped[k].source}"
        if k in mapped
        else f"[trl] {k} = {v!r} (not set by the lab config)"
        for k, v in section.items()
    ]
    if section.get("use_vllm"):
        notes.append(
            "[trl] use_vllm = true loads vLLM and syncs the weights to it every step, but the lab's rollout_func "
            "decodes in transformers (tool calls, tool output spliced mid-episode): nothing is generated in vLLM"
        )
    return notes


def lora_settings(cfg: LabConfig) -> list[Setting] | None:
    if not cfg.lora.enabled:
        return None
    sources = {arg: f"lora.{field}" for arg, field in LORA_FIELDS.items()} | {"task_type": "causal language model"}
    return [Setting(arg, value, sources[arg]) for arg, value in peft_lora_args(cfg.lora).items()]


# ---- the fate of every config field on TRL ------------------------------------------------------------------

MAPPED: dict[str, str] = {
    "plugins": "imported by the script before its config is read (their rewards and environments)",
    "rewards": "imported by the script before its config is read (one reward function per weighted one)",
    "env": "the dataset rows and the lab rollout (`prompt_rows`, `LabRollout`)",
    "model": "the model TRL trains",
    "seed": "GRPOConfig.seed and the lab rollout's sampling seeds",
    "task_kinds": "the environment's tasks, hence the dataset rows",
    "prompt_example": "the environment's system prompt in every dataset row",
    "data": "the environment's data files, hence the dataset rows",
    "data_env.tools": "env data's tools, which the lab rollout runs and the reward functions replay",
    "data_env.verifier": "env data's verifier, in the completion reward function",
    "data_env.tolerance": "env data's numeric verifier, in the completion reward function",
    "data_env.pattern": "env data's regex verifier, in the completion reward function",
    "data_env.instructions": "env data's system prompt in every dataset row",
    "data_env.thought_required": "env data's system prompt in every dataset row and the format reward function",
    "data_env.heldout_fraction": "env data's train split, hence the dataset rows",
    "verifiers.env": "env verifiers' environment: the dataset rows, the lab rollout's tools, its reward functions",
    "verifiers.args": "env verifiers' load_environment arguments, hence the dataset rows",
    "verifiers.verifier": "env verifiers' verifier, in the completion reward function",
    "verifiers.pass_score": "env verifiers' verifier, in the completion reward function",
    "verifiers.heldout_fraction": "env verifiers' train split, hence the dataset rows",
    "verifiers.thought_required": "env verifiers' system prompt in every dataset row and the format reward function",
    "verifiers.limit": "env verifiers' tasks, hence the dataset rows",
    "reward.weights": "reward_weights (one TRL reward function per component)",
    "trl": "GRPOConfig, as written (over the mapped arguments)",
    "reward.length_unit": "the length reward function (the lab's scorer)",
    "reward.thought_min_words": "the format reward function (the lab's scorer)",
    "reward.timeout_s": "every reward function's time limit per episode (the lab's scorer)",
    "rollout.group_size": "num_generations",
    "rollout.max_new_tokens": "max_completion_length and the lab rollout's token budget",
    "rollout.max_turns": "the lab rollout (`rollout_func`)",
    "rollout.temperature": "temperature and the lab rollout",
    "rollout.top_p": "top_p and the lab rollout",
    "rollout.format": "the lab rollout and its prompts",
    "rollout.tool_syntax": "the lab rollout",
    "rollout.stop_at_answer": "the lab rollout",
    "grpo.learning_rate": "learning_rate",
    "grpo.beta": "beta",
    "grpo.epsilon": "epsilon",
    "grpo.epsilon_high": "epsilon_high",
    "grpo.loss_type": "loss_type",
    "grpo.scale_rewards": "scale_rewards",
    "grpo.importance_sampling_level": "importance_sampling_level",
    "grpo.mask_truncated_completions": "mask_truncated_completions (and an EOS, mask 0, at the lab rollout's stops)",
    "grpo.multi_objective_aggregation": "multi_objective_aggregation",
    "grpo.top_entropy_quantile": "top_entropy_quantile (TRL: the quantile of a micro-batch; natively of a group)",
    "grpo.mu": "num_iterations (and max_steps)",
    "grpo.max_grad_norm": "max_grad_norm",
    "lora.enabled": "peft_config (None trains all weights)",
    "lora.rank": "LoraConfig.r",
    "lora.alpha": "LoraConfig.lora_alpha",
    "lora.dropout": "LoraConfig.lora_dropout",
    "lora.target_modules": "LoraConfig.target_modules",
    "train.steps": "max_steps",
    "train.prompts_per_step": "per_device_train_batch_size",
    "train.checkpoint_every": "save_steps (and the run loop's checkpoints)",
    "train.trackio": "report_to (and the run loop's progress)",
    "train.report_to": "report_to (the run loop logs to trackio when it is named)",
    "train.trackio_project": "project (and the run loop's trackio project)",
    "train.precision": "bf16",
    "train.sft_precision": "the exported script's SFTConfig(bf16=...) (with TRL in the run loop, its own warm start)",
}
"""Fields whose value reaches TRL, and where."""

_RUN_LOOP = "the run loop does it for both backends (the exported script: see `unsupported`)"
NOT_APPLICABLE: dict[str, str] = {
    "train.backend": "it chooses TRL",
    "train.device": "TRL and accelerate place the model (a GPU where torch sees one); the field is the native engine's",
    "train.sft_steps": f"the SFT warm start runs before TRL starts; {_RUN_LOOP}",
    "train.sft_learning_rate": f"SFT warm start; {_RUN_LOOP}",
    "train.sft_batch_size": f"SFT warm start; {_RUN_LOOP}",
    "train.sft_mix": f"SFT warm start; {_RUN_LOOP}",
    "train.eval_every": f"held-out evaluation; {_RUN_LOOP}",
    "train.eval_limit": f"held-out evaluation; {_RUN_LOOP}",
    "train.episodes_per_step_logged": f"episodes.jsonl; {_RUN_LOOP}",
    "grpo.kl_bound": f"the KL alarm on TRL's logged `kl`; {_RUN_LOOP}",
    "alarms.hack_window": f"alarms; {_RUN_LOOP}",
    "alarms.hack_t": f"alarms; {_RUN_LOOP}",
    "alarms.entropy_collapse": f"alarms; {_RUN_LOOP}",
    "alarms.length_runaway": f"alarms; {_RUN_LOOP}",
    "alarms.mismatch_bound": f"the sampler-mismatch alarm (native int8 rollouts only); {_RUN_LOOP}",
    "alarms.stop_on_alarm": f"alarms; {_RUN_LOOP}",
    "alarms.drift_window": f"drift alarm and reward attribution; {_RUN_LOOP}",
    "alarms.drift_z": f"drift alarm; {_RUN_LOOP}",
    "alarms.drift_rel": f"drift alarm; {_RUN_LOOP}",
    "alarms.drift_share": f"drift alarm; {_RUN_LOOP}",
    "alarms.drift_class_z": f"drift alarm; {_RUN_LOOP}",
    "alarms.probe_tasks": f"the greedy probe; {_RUN_LOOP}",
    "alarms.probe_z": f"the greedy probe's alarm; {_RUN_LOOP}",
    "alarms.attribution_min": f"reward attribution; {_RUN_LOOP}",
    "alarms.shaping_patience": f"reward attribution; {_RUN_LOOP}",
}
"""Fields TRL never sees because the lab honours them around TRL's steps, and why."""


@dataclass(frozen=True)
class Unsupported:
    """A field TRL cannot honour."""

    why: str
    """What happens on TRL instead."""
    changes_result: bool
    """Whether a non-default value trains differently on TRL: `train --backend trl` then refuses it (exit 2)."""
    fix: str = ""
    applies: Callable[[LabConfig], bool] | None = None
    """When the field is in play (default: it is set to a value other than its default)."""


UNSUPPORTED: dict[str, Unsupported] = {
    "rollout.engine": Unsupported(
        "TRL samples rollouts from the policy itself; the int8 sampler is native-only",
        changes_result=True,
        fix="set rollout.engine = 'exact', or train with --backend native",
    ),
    "grpo.dynamic_filter": Unsupported(
        "TRL has no dynamic sampling; every group is kept (zero-variance groups get zero advantage, as with 'off').",
        changes_result=True,
        fix="set grpo.dynamic_filter = 'off', or train with --backend native",
    ),
    "grpo.is_cap": Unsupported(
        "it caps the importance weights of int8 rollouts only; TRL samples from the policy itself, so it has "
        "no effect.",
        changes_result=False,
    ),
    "grpo.kl_metric": Unsupported(
        "TRL measures the KL only when grpo.beta > 0; with beta = 0 no `kl` is logged (and the KL alarm cannot fire).",
        changes_result=False,
        applies=lambda cfg: cfg.grpo.kl_metric and cfg.grpo.beta == 0,
    ),
}
"""Fields TRL cannot honour, with what happens instead."""


def field_value(cfg: LabConfig, dotted: str) -> Any:
    """The value of a config field by its dotted name ("grpo.beta")."""
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def _in_play(cfg: LabConfig, name: str, entry: Unsupported) -> bool:
    if entry.applies is not None:
        return entry.applies(cfg)
    return field_value(cfg, name) != field_value(LabConfig(), name)


def refuse_unsupported(cfg: LabConfig) -> None:
    """UserError (exit 2) for the first setting TRL cannot honour that would change the result of a run."""
    for name, entry in UNSUPPORTED.items():
        if entry.changes_result and _in_play(cfg, name, entry):
            value = field_value(cfg, name)
            raise UserError(f"{name} = {value!r} is not supported by the trl backend: {entry.why}", entry.fix)


def unsupported(cfg: LabConfig, exported: bool = True) -> list[str]:
    """Lab settings TRL cannot express, each with what happens instead (shown in the script and on the terminal).

    `exported=False` is `grpolab train --backend trl`, which keeps the lab's SFT, evaluations and alarms (and has
    refused, by then, the settings that would change its result)."""
    notes = [
        f"grpo.kl_bound = {cfg.grpo.kl_bound} and alarms.*: TRL has no alarms; it logs `kl` each step"
        + (
            " (compare it with the bound yourself, or use `grpolab train --backend trl`, which checks them)."
            if exported
            else "; grpolab checks them on TRL's logs."
        ),
        "train.eval_every / eval_limit: the script does not evaluate on the held-out split; run "
        "`grpolab eval --model OUTPUT_DIR/final` afterwards."
        if exported
        else "",
        "prompt order: TRL's RepeatSampler shuffles the train split with `seed`; the native engine draws its own "
        "order, so the two backends see the same prompts in a different order.",
    ]
    for name, entry in UNSUPPORTED.items():
        if _in_play(cfg, name, entry):
            notes.append(f"{name} = {field_value(cfg, name)!r}: {entry.why}")
    if cfg.train.sft_steps and exported:
        notes.append(
            "train.sft_steps: the warm start runs on TRL's SFTTrainer with the same masked reference "
            "transcripts, but its batches are drawn by TRL's sampler, not the native seed"
            + (", and from the whole train split: train.sft_mix is not applied." if cfg.train.sft_mix else ".")
        )
    return [n for n in notes if n]
