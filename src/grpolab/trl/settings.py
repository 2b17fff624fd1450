"""The lab config mapped field by field onto TRL's GRPOConfig and peft's LoraConfig, and what TRL cannot express.

Each value carries the lab field it came from; `train --backend trl` and the exported script both use this mapping,
so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from grpolab.config import LabConfig
from grpolab.models import LORA_FIELDS, default_dtype, peft_lora_args
from grpolab.rundir import KEEP_CHECKPOINTS

TRL_VERSION = "1.16.0"
"""The TRL release the exported script and the backend are tested against."""


def bf16_here() -> bool:
    """Whether TRL should train in bf16 on this machine: the lab's dtype rule (`grpolab.models.default_dtype`)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return default_dtype(device) == torch.bfloat16


@dataclass(frozen=True)
class Setting:
    name: str
    """The TRL / peft argument."""
    value: Any
    source: str
    """The lab config field(s) it comes from, or why it is fixed."""


def grpo_settings(cfg: LabConfig, output_dir: str) -> list[Setting]:
    """GRPOConfig arguments equal to the lab config (one optimizer step per lab step and epoch, as natively)."""
    g = cfg.grpo
    episodes = cfg.train.prompts_per_step * cfg.rollout.group_size
    bf16 = bf16_here()
    return [
        Setting("output_dir", output_dir, "the script's first argument"),
        Setting("num_generations", cfg.rollout.group_size, "rollout.group_size"),
        Setting(
            "per_device_train_batch_size",
            episodes,
            "train.prompts_per_step x rollout.group_size / processes",
        ),
        Setting("gradient_accumulation_steps", 1, "one optimizer step per batch of rollouts, as the native engine"),
        Setting("num_iterations", g.mu, "grpo.mu"),
        Setting("max_steps", cfg.train.steps * g.mu, "train.steps x grpo.mu (TRL counts optimizer steps)"),
        Setting("learning_rate", g.learning_rate, "grpo.learning_rate"),
        Setting("lr_scheduler_type", "constant", "the native engine keeps the learning rate constant"),
        Setting("weight_decay", 0.0, "the native engine uses AdamW without weight decay"),
        Setting("max_grad_norm", g.max_grad_norm, "grpo.max_grad_norm"),
        Setting("beta", g.beta, "grpo.beta"),
        Setting("epsilon", g.epsilon, "grpo.epsilon"),
        Setting("epsilon_high", g.epsilon_high if g.epsilon_high is not None else g.epsilon, "grpo.epsilon_high"),
        Setting("loss_type", g.loss_type, "grpo.loss_type (the same three aggregations under the same names)"),
        Setting("scale_rewards", "group" if g.scale_rewards else "none", "grpo.scale_rewards"),
        Setting(
            "max_completion_length", cfg.rollout.max_new_tokens, "rollout.max_new_tokens (also dr_grpo's constant)"
        ),
        Setting("temperature", cfg.rollout.temperature, "rollout.temperature (TRL scales logits by it as well)"),
        Setting("top_p", cfg.rollout.top_p, "rollout.top_p"),
        Setting("seed", cfg.seed, "seed"),
        Setting("bf16", bf16, "bf16 only on a CUDA GPU with bf16; TRL's default bf16=True is ~400x slower on CPU"),
        Setting("use_cpu", not torch.cuda.is_available(), "CPU only where there is no GPU"),
        Setting("gradient_checkpointing", False, "TRL defaults to True; off as in the native engine"),
        Setting("save_steps", cfg.train.checkpoint_every, "train.checkpoint_every"),
        Setting("save_total_limit", KEEP_CHECKPOINTS, f"the run dir keeps {KEEP_CHECKPOINTS} checkpoints"),
        Setting("logging_steps", 1, "one metrics row per step"),
        Setting("report_to", "trackio" if cfg.train.trackio else "none", "train.trackio"),
        Setting("remove_unused_columns", False, "keep task_id for the reward functions"),
    ]


def lora_settings(cfg: LabConfig) -> list[Setting] | None:
    if not cfg.lora.enabled:
        return None
    sources = {arg: f"lora.{field}" for arg, field in LORA_FIELDS.items()} | {"task_type": "causal language model"}
    return [Setting(arg, value, sources[arg]) for arg, value in peft_lora_args(cfg.lora).items()]


def unsupported(cfg: LabConfig, exported: bool = True) -> list[str]:
    """Lab settings TRL cannot express, each with what happens instead (shown in the script and on the terminal).

    `exported=False` is `grpolab train --backend trl`, which keeps the lab's SFT, evaluations and alarms."""
    notes = [
        f"grpo.kl_bound = {cfg.grpo.kl_bound} and watch.*: TRL has no alarms; it logs `kl` each step"
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
    if cfg.grpo.dynamic_filter != "off":
        notes.append(
            f"grpo.dynamic_filter = {cfg.grpo.dynamic_filter!r}: TRL has no dynamic sampling; every group "
            "is kept (zero-variance groups get zero advantage, as with 'off')."
        )
    if cfg.train.sft_steps and exported:
        notes.append(
            "train.sft_steps: the warm start runs on TRL's SFTTrainer with the same masked reference "
            "transcripts, but its batches are drawn by TRL's sampler, not the native seed."
        )
    return [n for n in notes if n]
