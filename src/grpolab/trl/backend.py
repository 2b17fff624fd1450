"""The `trl` backend: the lab's environment, rollouts and rewards on Hugging Face TRL's GRPOTrainer.

TRL owns the update, the distribution (accelerate: DDP, DeepSpeed ZeRO, FSDP) and its logging. grpolab hands it
three things through TRL's public hooks, so nothing is re-implemented on the TRL side:
- `LabRollout` as `rollout_func`: the lab's own multi-turn rollout (same protocol, tools executed, token ids as
  generated). Tool output comes back with `env_mask` 0, which TRL excludes from the loss, the KL and the entropy.
- `reward_functions`: one TRL reward function per lab reward component, each scoring the exact transcript with the
  lab's scorer, plus `reward_weights` = the lab's weights. TRL's weighted sum is then the lab's episode reward.
- the settings of `grpolab.trl.settings`: the lab config mapped field by field onto GRPOConfig and LoraConfig.
"""

from __future__ import annotations

import json
import os
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from grpolab.config import LabConfig
from grpolab.engine.rollout import run_episodes, sampling_settings
from grpolab.engine.sft import reference_tokens
from grpolab.envs.base import Environment, Task
from grpolab.errors import UserError
from grpolab.formats import checked_format
from grpolab.metrics import success_rate, tool_call_prob
from grpolab.models import left_padded, model_token_counter
from grpolab.rewards.score import Score, score_episodes, score_transcript
from grpolab.trl.settings import grpo_settings, lora_settings
from grpolab.vocabulary import (
    CLIP_FRAC,
    COMPLETION_LEN,
    ENTROPY,
    FRAC_ZERO_STD,
    GRAD_NORM,
    KL,
    LOSS,
    PERF_STEP_S,
    REWARD_MEAN,
    REWARD_STD,
    SUCCESS,
    TOOL_CALL_PROB,
    reward_key,
)

# ---- data --------------------------------------------------------------------------------------------------


def _key(messages: list[dict[str, Any]]) -> str:
    return json.dumps([[m.get("role"), m.get("content")] for m in messages])


def prompt_rows(env: Environment, split: str = "train") -> list[dict[str, Any]]:
    """The GRPO dataset rows: conversational `prompt` (system + user, as the native rollout uses) and `task_id`."""
    return [{"prompt": env.messages(t), "task_id": t.id} for t in env.tasks(split)]  # type: ignore[arg-type]


def sft_rows(env: Environment, tokenizer: Any, cfg: LabConfig | None = None) -> list[dict[str, Any]]:
    """Pre-tokenised SFT rows: loss on the assistant's own tokens only (tool responses masked), as native SFT, in
    the config's episode format."""
    fmt = checked_format(tokenizer, env, cfg.rollout.format, cfg.rollout.tool_syntax) if cfg else None
    rows = []
    for t in env.tasks("train"):
        p, c, m = reference_tokens(tokenizer, env, t, fmt)
        rows.append({"input_ids": p + c, "completion_mask": [0] * len(p) + m})
    return rows


# ---- rollouts ----------------------------------------------------------------------------------------------

LAB_SCORE = "lab_score"
"""The rollout's field (forwarded by TRL to the reward functions) with each episode's `Score`, where the environment
is scored from the traffic its rollout recorded (`Environment.scores_recorded_traffic`)."""


class LabRollout:
    """TRL `rollout_func`: the lab's rollout on the policy being trained, one completion per prompt entry.

    TRL passes each prompt `num_generations` times in a row (possibly split across processes); runs of the same
    prompt are sampled as one group, sharing one prefill.

    With TRL's `mask_truncated_completions` on, every episode that the token budget did not cut (it ended with a
    stop token, the answer-stop rule, the turn limit...) and does not already end with EOS or pad is returned with
    an EOS token appended with mask 0 and log-prob 0: TRL's test (the last token is EOS or pad) then marks as
    truncated exactly the episodes the native engine masks (`Episode.truncated`). The EOS is not trained on (mask 0)
    and, coming last, changes no other token's log-prob; without the mask the ids are returned as generated.
    """

    def __init__(self, env: Environment, cfg: LabConfig, tokenizer: Any):
        self.env, self.cfg, self.tokenizer = env, cfg, tokenizer
        self.tasks = {_key(env.messages(t)): t for t in env.all_tasks().values()}
        self.calls = 0
        self.last_episodes: list[Any] = []
        """The episodes of the latest call (the run loop logs a few of them per step)."""

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
        self.last_episodes = episodes
        eos_ids = getattr(trainer, "eos_token_ids", None) or [self.tokenizer.eos_token_id]  # TRL's
        ends = {*eos_ids, self.tokenizer.pad_token_id}
        masking = bool(getattr(trainer.args, "mask_truncated_completions", False))
        closed = [masking and not e.truncated and e.completion_ids[-1:] not in [[t] for t in ends] for e in episodes]
        eos = eos_ids[0]
        out = {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids + [eos] * c for e, c in zip(episodes, closed)],
            "logprobs": [e.logprobs + [0.0] * c for e, c in zip(episodes, closed)],
            "env_mask": [e.mask + [0] * c for e, c in zip(episodes, closed)],
            "transcript": [e.text for e in episodes],
            "gen_tokens": [e.n_policy_tokens for e in episodes],
        }
        if self.env.scores_recorded_traffic:  # the tools' state lives in this rollout only: score it here, once
            r = self.cfg.reward
            score_episodes(self.env, episodes, r.weights, r.length_unit, r.thought_min_words, r.timeout_s)
            out[LAB_SCORE] = [e.score for e in episodes]
        return out


# ---- rewards -----------------------------------------------------------------------------------------------


def _text_of(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content") or "") for m in completion if isinstance(m, dict))


def reward_functions(env: Environment, cfg: LabConfig) -> tuple[list[Any], list[float]]:
    """(reward_funcs, reward_weights) for TRL: one function per lab component, named after it.

    Each scores the transcript from the lab rollout (`transcript`, `gen_tokens` fields) or, without them, the
    completion text (its tokens counted by the config's model). The four functions share one cached score per
    transcript. An environment with state (or tools that answer differently each time) is scored inside the rollout,
    from each episode's recorded tool traffic, and its scores come in the `LAB_SCORE` field: a transcript alone
    would be checked by running its calls again, on a state that is gone.
    """
    tasks = env.all_tasks()

    @lru_cache(maxsize=4096)
    def score(task_id: str, text: str, gen_tokens: int | None) -> Score:
        return score_transcript(
            env,
            tasks[task_id],
            text,
            cfg.reward.weights,
            cfg.reward.length_unit,
            gen_tokens,
            count_tokens=model_token_counter(cfg.model),
            thought_min_words=cfg.reward.thought_min_words,
            timeout_s=cfg.reward.timeout_s,
        )

    def make(name: str) -> Any:
        def reward(prompts: list[Any], completions: list[Any], task_id: list[str], **kwargs: Any) -> list[float]:
            scores = kwargs.get(LAB_SCORE)
            if scores is None:
                if env.scores_recorded_traffic:
                    raise UserError(
                        f"env {env.name!r} has tools with state (or that answer differently each time): its episodes "
                        "are scored in grpolab's rollout, from the traffic it recorded",
                        "pass `rollout_func=LabRollout(env, cfg, tokenizer)` to GRPOTrainer, as the exported script "
                        "does",
                    )
                texts = kwargs.get("transcript") or [_text_of(c) for c in completions]
                tokens = kwargs.get("gen_tokens") or [None] * len(texts)
                scores = [score(t, x, n) for t, x, n in zip(task_id, texts, tokens)]
            log_metric = kwargs.get("log_metric")
            if name == "completion" and log_metric is not None:
                log_metric(TOOL_CALL_PROB, tool_call_prob(scores))
                log_metric(SUCCESS, success_rate(scores))
            return [s.components[name] for s in scores]

        reward.__name__ = name
        return reward

    names = list(cfg.reward.weights)
    return [make(n) for n in names], [cfg.reward.weights[n] for n in names]


# ---- the trainer and its logs ---------------------------------------------------------------------------------

TRL_TO_LAB = {
    "reward": REWARD_MEAN,
    "reward_std": REWARD_STD,
    "frac_reward_zero_std": FRAC_ZERO_STD,
    "kl": KL,
    "entropy": ENTROPY,
    "loss": LOSS,
    "grad_norm": GRAD_NORM,
    "clip_ratio/region_mean": CLIP_FRAC,
    "completions/mean_length": COMPLETION_LEN,
    "step_time": PERF_STEP_S,  # TRL times training_step (generation, rewards, loss, backward), not optimizer.step
    TOOL_CALL_PROB: TOOL_CALL_PROB,  # logged by the completion reward function (`log_metric`) under the lab name
    SUCCESS: SUCCESS,
}
"""TRL log key -> lab metric name (`grpolab.vocabulary`), where TRL has the metric."""


def lab_metrics(logs: dict[str, Any], weights: dict[str, float]) -> dict[str, float]:
    """A TRL log row in lab metric names; reward components weighted like the native `reward/NAME`."""
    out = {lab: float(logs[trl]) for trl, lab in TRL_TO_LAB.items() if trl in logs}
    for name, w in weights.items():
        key = f"rewards/{name}/mean"
        if key in logs:
            out[reward_key(name)] = w * float(logs[key])
    return out


def require_trl() -> Any:
    try:
        import trl  # the trl extra
    except ImportError:
        raise UserError("the trl backend needs TRL", "pip install 'grpolab[trl]' (or: pip install trl==1.16.0)")
    return trl


def build_trl_trainer(
    cfg: LabConfig, env: Environment, model: Any, tokenizer: Any, output_dir: Path, callbacks: list[Any] | None = None
) -> Any:
    """TRL's GRPOTrainer on the lab's rollout, rewards and settings (the backend's and the tests')."""
    require_trl()
    from datasets import Dataset  # the trl extra, as are peft's and trl's classes below
    from peft import LoraConfig as PeftLoraConfig
    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    left_padded(tokenizer)
    lora = lora_settings(cfg)
    funcs, _ = reward_functions(env, cfg)
    with warnings.catch_warnings():  # transformers' deprecation notes about its own argument names
        warnings.simplefilter("ignore")
        settings = grpo_settings(cfg, str(output_dir))
        try:
            args = GRPOConfig(**{s.name: s.value for s in settings})
        except (ValueError, TypeError) as exc:
            if not cfg.trl:
                raise
            raise UserError(f"TRL's GRPOConfig refused the settings: {exc}", "fix the value in the [trl] section")
        return GRPOTrainer(
            model=model,
            reward_funcs=funcs,
            args=args,
            train_dataset=Dataset.from_list(prompt_rows(env)),
            processing_class=tokenizer,
            peft_config=PeftLoraConfig(**{s.name: s.value for s in lora}) if lora else None,
            rollout_func=LabRollout(env, cfg, tokenizer),
            callbacks=callbacks,
        )
