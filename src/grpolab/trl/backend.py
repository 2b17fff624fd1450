"""The `trl` backend: the lab's environment, rollouts and rewards on Hugging Face TRL's GRPOTrainer.

TRL owns the update, the distribution (accelerate: DDP, DeepSpeed ZeRO, FSDP) and its logging. grpolab hands it
three things through TRL's public hooks, so nothing is re-implemented on the TRL side:
- `LabRollout` as `rollout_func`: the lab's own multi-turn rollout (same protocol, tools executed, token ids as
  generated). Tool output comes back with `env_mask` 0, which TRL excludes from the loss, the KL and the entropy.
- `reward_functions`: one TRL reward function per lab reward component, each scoring the exact transcript with the
  lab's scorer, plus `reward_weights` = the lab's weights. TRL's weighted sum is then the lab's episode reward.
- `grpo_settings` / `lora_settings`: the lab config mapped field by field onto GRPOConfig and peft's LoraConfig,
  each value with the lab field it came from; `unsupported` lists what TRL cannot express.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from grpolab.config import LabConfig
from grpolab.engine.rollout import run_episodes, sampling_settings
from grpolab.engine.sft import reference_tokens
from grpolab.envs.base import Environment, Task
from grpolab.rewards.score import Score, score_transcript

TRL_VERSION = "1.16.0"
"""The TRL release the exported script and the backend are tested against."""

LOSS_TYPES = {"grpo": "grpo", "dr_grpo": "dr_grpo", "dapo": "dapo"}
"""Lab aggregation name -> TRL loss_type (same definitions: per-sequence mean, sum / constant, token mean)."""


@dataclass(frozen=True)
class Setting:
    name: str
    """The TRL / peft argument."""
    value: Any
    source: str
    """The lab config field(s) it comes from, or why it is fixed."""


def bf16_ok() -> bool:
    """bf16 only where it is fast: a CUDA device with bf16 support (on this CPU bf16 matmul is ~400x slower)."""
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def grpo_settings(cfg: LabConfig, output_dir: str, world_size: int = 1) -> list[Setting]:
    """GRPOConfig arguments equal to the lab config (one optimizer step per lab step and epoch, as natively)."""
    g = cfg.grpo
    episodes = cfg.train.prompts_per_step * cfg.rollout.group_size
    if episodes % world_size:
        from grpolab.errors import UserError

        raise UserError(
            f"train.prompts_per_step x rollout.group_size = {episodes} episodes per step does not split over "
            f"{world_size} processes",
            "choose a process count that divides it, or change train.prompts_per_step",
        )
    bf16 = bf16_ok()
    return [
        Setting("output_dir", output_dir, "the script's first argument"),
        Setting("num_generations", cfg.rollout.group_size, "rollout.group_size"),
        Setting(
            "per_device_train_batch_size",
            episodes // world_size,
            "train.prompts_per_step x rollout.group_size / processes",
        ),  # fmt: skip
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
        Setting("loss_type", LOSS_TYPES[g.loss_type], "grpo.loss_type"),
        Setting("scale_rewards", "group" if g.scale_rewards else "none", "grpo.scale_rewards"),
        Setting(
            "max_completion_length", cfg.rollout.max_new_tokens, "rollout.max_new_tokens (also dr_grpo's constant)"
        ),  # fmt: skip
        Setting("temperature", cfg.rollout.temperature, "rollout.temperature (TRL scales logits by it as well)"),
        Setting("top_p", cfg.rollout.top_p, "rollout.top_p"),
        Setting("seed", cfg.seed, "seed"),
        Setting("bf16", bf16, "bf16 only on a CUDA GPU with bf16; TRL's default bf16=True is ~400x slower on CPU"),
        Setting("use_cpu", not torch.cuda.is_available(), "CPU only where there is no GPU"),
        Setting("gradient_checkpointing", False, "TRL defaults to True; off as in the native engine"),
        Setting("save_steps", cfg.train.checkpoint_every, "train.checkpoint_every"),
        Setting("save_total_limit", 2, "the run dir keeps 2 checkpoints"),
        Setting("logging_steps", 1, "one metrics row per step"),
        Setting("report_to", "trackio" if cfg.train.trackio else "none", "train.trackio"),
        Setting("remove_unused_columns", False, "keep task_id for the reward functions"),
    ]


def lora_settings(cfg: LabConfig) -> list[Setting] | None:
    if not cfg.lora.enabled:
        return None
    return [
        Setting("r", cfg.lora.rank, "lora.rank"),
        Setting("lora_alpha", cfg.lora.alpha, "lora.alpha"),
        Setting("lora_dropout", cfg.lora.dropout, "lora.dropout"),
        Setting("target_modules", list(cfg.lora.target_modules), "lora.target_modules"),
        Setting("task_type", "CAUSAL_LM", "causal language model"),
    ]


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
        notes.append(f"grpo.dynamic_filter = {cfg.grpo.dynamic_filter!r}: TRL has no dynamic sampling; every group "
                     "is kept (zero-variance groups get zero advantage, as with 'off').")  # fmt: skip
    if cfg.train.sft_steps and exported:
        notes.append("train.sft_steps: the warm start runs on TRL's SFTTrainer with the same masked reference "
                     "transcripts, but its batches are drawn by TRL's sampler, not the native seed.")  # fmt: skip
    return [n for n in notes if n]


# ---- data --------------------------------------------------------------------------------------------------


def _key(messages: list[dict[str, Any]]) -> str:
    return json.dumps([[m.get("role"), m.get("content")] for m in messages])


def prompt_rows(env: Environment, split: str = "train") -> list[dict[str, Any]]:
    """The GRPO dataset rows: conversational `prompt` (system + user, as the native rollout uses) and `task_id`."""
    return [{"prompt": env.messages(t), "task_id": t.id} for t in env.tasks(split)]  # type: ignore[arg-type]


def sft_rows(env: Environment, tokenizer: Any) -> list[dict[str, Any]]:
    """Pre-tokenised SFT rows: loss on the assistant's own tokens only (tool responses masked), as native SFT."""
    rows = []
    for t in env.tasks("train"):
        p, c, m = reference_tokens(tokenizer, env, t)
        rows.append({"input_ids": p + c, "completion_mask": [0] * len(p) + m})
    return rows


# ---- rollouts ----------------------------------------------------------------------------------------------


class LabRollout:
    """TRL `rollout_func`: the lab's rollout on the policy being trained, one completion per prompt entry.

    TRL passes each prompt `num_generations` times in a row (possibly split across processes); runs of the same
    prompt are sampled as one group, sharing one prefill.
    """

    def __init__(self, env: Environment, cfg: LabConfig, tokenizer: Any):
        self.env, self.cfg, self.tokenizer = env, cfg, tokenizer
        self.tasks = {_key(env.messages(t)): t for t in env.all_tasks().values()}
        self.calls = 0

    def task_for(self, prompt: list[dict[str, Any]]) -> Task:
        return self.tasks[_key(prompt)]

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        tasks = [self.task_for(p) for p in prompts]
        runs: list[list[Task]] = []
        for t in tasks:
            if runs and runs[-1][0].id == t.id:
                runs[-1].append(t)
            else:
                runs.append([t])
        sizes = {len(r) for r in runs}
        firsts, group = ([r[0] for r in runs], sizes.pop()) if len(sizes) == 1 else (tasks, 1)
        model = trainer.accelerator.unwrap_model(trainer.model)
        device = next(model.parameters()).device
        gen = torch.Generator(device=device)
        step, rank = int(trainer.state.global_step), int(trainer.accelerator.process_index)
        gen.manual_seed(self.cfg.seed * 1_000_003 + step * 7919 + self.calls * 101 + rank)
        self.calls += 1
        was_training = model.training
        model.eval()
        try:
            episodes = run_episodes(model, self.tokenizer, self.env, firsts, group, sampling_settings(self.cfg), gen)
        finally:
            model.train(was_training)
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "logprobs": [e.logprobs for e in episodes],
            "env_mask": [e.mask for e in episodes],
            "transcript": [e.text for e in episodes],
            "gen_tokens": [e.n_policy_tokens for e in episodes],
        }


# ---- rewards -----------------------------------------------------------------------------------------------


def _text_of(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content") or "") for m in completion if isinstance(m, dict))


def reward_functions(env: Environment, cfg: LabConfig) -> tuple[list[Any], list[float]]:
    """(reward_funcs, reward_weights) for TRL: one function per lab component, named after it.

    Each scores the transcript from the lab rollout (`transcript`, `gen_tokens` fields) or, without them, the
    completion text. The four functions share one cached score per transcript.
    """
    tasks = env.all_tasks()

    @lru_cache(maxsize=4096)
    def score(task_id: str, text: str, gen_tokens: int | None) -> Score:
        return score_transcript(env, tasks[task_id], text, cfg.reward.weights, cfg.reward.length_unit, gen_tokens)

    def make(name: str) -> Any:
        def reward(prompts: list[Any], completions: list[Any], task_id: list[str], **kwargs: Any) -> list[float]:
            texts = kwargs.get("transcript") or [_text_of(c) for c in completions]
            tokens = kwargs.get("gen_tokens") or [None] * len(texts)
            scores = [score(t, x, n) for t, x, n in zip(task_id, texts, tokens)]
            log_metric = kwargs.get("log_metric")
            if name == "completion" and log_metric is not None:
                log_metric("tool_call_prob", sum(s.valid_calls > 0 for s in scores) / len(scores))
                log_metric("success", sum(s.solved for s in scores) / len(scores))
            return [s.components[name] for s in scores]

        reward.__name__ = name
        return reward

    names = list(cfg.reward.weights)
    return [make(n) for n in names], [cfg.reward.weights[n] for n in names]


# ---- in-process TRL training (`grpolab train --backend trl`) -----------------------------------------------

TRL_TO_LAB = {
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "frac_reward_zero_std": "frac_zero_std",
    "kl": "kl",
    "entropy": "entropy",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "clip_ratio/region_mean": "clip_frac",
    "completions/mean_length": "completion_len",
    "tool_call_prob": "tool_call_prob",
    "success": "success",
}
"""TRL log key -> lab metric name, where TRL has the metric (DESIGN.md names)."""


def lab_metrics(logs: dict[str, Any], weights: dict[str, float]) -> dict[str, float]:
    """A TRL log row in lab metric names; reward components weighted like the native `reward/NAME`."""
    out = {lab: float(logs[trl]) for trl, lab in TRL_TO_LAB.items() if trl in logs}
    for name, w in weights.items():
        key = f"rewards/{name}/mean"
        if key in logs:
            out[f"reward/{name}"] = w * float(logs[key])
    return out


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))
