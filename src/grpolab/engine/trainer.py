"""One native GRPO step: prompts -> groups -> rewards -> advantages -> mu update epochs -> metrics.

`GRPOTrainer` is the native step source of the run loop (`grpolab.engine.loop`); evaluation, alarms, checkpoints
and the run directory are the loop's. Prompts and sampling seeds are derived from (seed, step), so a resumed run
redoes a step exactly as the killed run would have. A step whose rewards or loss are not finite is skipped (no
update) and recorded as skipped.
"""

from __future__ import annotations

import math
import random
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from grpolab.config import LabConfig
from grpolab.engine.grpo import group_advantages, grpo_loss
from grpolab.engine.logprobs import group_token_stats
from grpolab.engine.rollout import Episode, run_episodes, sampling_settings
from grpolab.envs.base import Environment, Task
from grpolab.metrics import episode_metrics, group_stats, mean
from grpolab.rewards.score import score_episodes

MICRO_BATCH = 8
"""Most episodes per forward/backward (one shared prompt); gradients accumulate over the step's batch."""


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def step_prompts(tasks: list[Task], cfg: LabConfig, step: int, attempt: int = 0) -> list[Task]:
    rng = random.Random(f"{cfg.seed}-{step}-{attempt}")
    return rng.sample(tasks, min(cfg.train.prompts_per_step, len(tasks)))


def step_generator(cfg: LabConfig, step: int, attempt: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(cfg.seed * 1_000_003 + step * 101 + attempt)


@dataclass
class StepResult:
    metrics: dict[str, Any]
    episodes: list[Episode] = field(default_factory=list)


class GRPOTrainer:
    """Owns the policy, its optimizer and the reference; `step(n)` does one full GRPO iteration."""

    def __init__(self, model: Any, tokenizer: Any, env: Environment, cfg: LabConfig, reference: Any = None):
        self.model, self.tokenizer, self.env, self.cfg = model, tokenizer, env, cfg
        self.reference = reference  # None with LoRA: the base with adapters disabled is the reference
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.grpo.learning_rate, weight_decay=0.0)
        self.train_tasks = env.tasks("train")
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.tool_token = tokenizer("<tool_call>", add_special_tokens=False).input_ids[0]

    # ---- rollouts ----

    def collect(self, step: int) -> tuple[list[Episode], int, int]:
        """Sample groups; with dynamic filtering, drop or resample groups whose rewards are all equal."""
        cfg, G = self.cfg, self.cfg.rollout.group_size
        kept: list[Episode] = []
        dropped = resampled = 0
        for attempt in range(3 if cfg.grpo.dynamic_filter == "resample" else 1):
            tasks = step_prompts(self.train_tasks, cfg, step, attempt)
            gen = step_generator(cfg, step, attempt)
            eps = run_episodes(self.model, self.tokenizer, self.env, tasks, G, sampling_settings(cfg), gen)
            score_episodes(self.env, eps, cfg.reward.weights, cfg.reward.length_unit)
            for g in range(len(tasks)):
                group = eps[g * G : (g + 1) * G]
                if cfg.grpo.dynamic_filter != "off" and len({e.score.total for e in group}) == 1:
                    dropped += 1
                    continue
                for e in group:
                    e.group = len(kept) // G
                kept += group
            if cfg.grpo.dynamic_filter != "resample" or len(kept) >= cfg.train.prompts_per_step * G:
                break
            resampled += 1
        return kept, dropped, resampled

    # ---- the update ----

    def _chunks(self, episodes: list[Episode]) -> list[list[int]]:
        """Indices of episodes sharing a prompt (a group), at most MICRO_BATCH per chunk."""
        chunks: list[list[int]] = []
        for i, e in enumerate(episodes):
            prev = episodes[chunks[-1][-1]] if chunks else None
            if prev is not None and prev.group == e.group and len(chunks[-1]) < MICRO_BATCH:
                chunks[-1].append(i)
            else:
                chunks.append([i])
        return chunks

    def _stats(self, model: Any, episodes: list[Episode], with_entropy: bool = True):
        e0 = episodes[0]
        return group_token_stats(
            model,
            e0.prompt_ids,
            [e.completion_ids for e in episodes],
            [e.mask for e in episodes],
            self.pad,
            self.cfg.rollout.temperature,
            with_entropy,
        )

    def _reference_logp(self, episodes: list[Episode]) -> torch.Tensor:
        with torch.no_grad():
            if self.reference is not None:
                return self._stats(self.reference, episodes, False)[0].logp
            with self.model.disable_adapter():
                return self._stats(self.model, episodes, False)[0].logp

    def update(self, episodes: list[Episode], advantages: torch.Tensor) -> dict[str, float]:
        cfg = self.cfg.grpo
        eps_high = cfg.epsilon_high if cfg.epsilon_high is not None else cfg.epsilon
        index = self._chunks(episodes)
        chunks = [[episodes[i] for i in c] for c in index]
        total_tokens = float(sum(e.n_policy_tokens for e in episodes))
        refs = [self._reference_logp(c) for c in chunks]  # also when beta = 0: kl is always reported
        olds: list[torch.Tensor | None] = [None] * len(chunks)
        if cfg.mu > 1:
            with torch.no_grad():
                olds = [self._stats(self.model, c, False)[0].logp for c in chunks]
        acc: dict[str, list[float]] = {k: [] for k in ("policy_loss", "kl", "clip_frac", "entropy", "mass", "loss")}
        grad_norm = 0.0
        self.model.train()
        for _ in range(cfg.mu):
            self.optimizer.zero_grad(set_to_none=True)
            for idx, chunk, ref, old in zip(index, chunks, refs, olds):
                stats, mask = self._stats(self.model, chunk)
                old_logp = stats.logp.detach() if old is None else old
                loss, ls = grpo_loss(
                    stats.logp,
                    old_logp,
                    ref,
                    advantages[idx],
                    mask,
                    cfg.beta,
                    cfg.epsilon,
                    eps_high,
                    cfg.loss_type,
                    self.cfg.rollout.max_new_tokens,
                )
                n_tok = float(mask.sum())
                share = n_tok / max(total_tokens, 1) if cfg.loss_type == "dapo" else len(chunk) / len(episodes)
                if not torch.isfinite(loss):
                    self.optimizer.zero_grad(set_to_none=True)
                    return {"skipped": 1.0, "skip_reason": "non-finite loss"}  # type: ignore[dict-item]
                (loss * share).backward()
                acc["loss"].append(loss.item() * share)
                acc["policy_loss"].append(ls.policy_loss * share)
                acc["kl"].append(ls.kl * n_tok / max(total_tokens, 1))
                acc["clip_frac"].append(ls.clip_frac * n_tok / max(total_tokens, 1))
                acc["entropy"].append(float((stats.entropy * mask).sum()) / max(total_tokens, 1))
                acc["mass"] += stats.first_token_probs[:, self.tool_token].tolist()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grpo.max_grad_norm))
            if not math.isfinite(grad_norm):
                self.optimizer.zero_grad(set_to_none=True)
                return {"skipped": 1.0, "skip_reason": "non-finite gradient"}  # type: ignore[dict-item]
            self.optimizer.step()
        self.model.eval()
        n_epochs = cfg.mu
        return {
            "loss": sum(acc["loss"]) / n_epochs,
            "policy_loss": sum(acc["policy_loss"]) / n_epochs,
            "kl": sum(acc["kl"]) / n_epochs,
            "clip_frac": sum(acc["clip_frac"]) / n_epochs,
            "entropy": sum(acc["entropy"]) / n_epochs,
            "tool_token_mass": mean(acc["mass"][: len(episodes)]),
            "grad_norm": grad_norm,
            "train_tokens": total_tokens,
        }

    def step(self, step: int) -> StepResult:
        t0 = time.perf_counter()
        episodes, dropped, resampled = self.collect(step)
        t_gen = time.perf_counter() - t0
        G = self.cfg.rollout.group_size
        m: dict[str, Any] = {"step": step, "groups_dropped": dropped, "groups_resampled": resampled}
        if not episodes:
            return StepResult({**m, "skipped": 1.0, "skip_reason": "every group had equal rewards"})
        rewards = torch.tensor([e.score.total for e in episodes], dtype=torch.float32).view(-1, G)  # (P, G)
        m.update(episode_metrics(episodes))
        m.update(group_stats(rewards.tolist()))
        if not torch.isfinite(rewards).all():
            m.update({"skipped": 1.0, "skip_reason": "non-finite reward (see reward_errors)"})
            return StepResult(m, episodes)
        advantages = group_advantages(rewards, scale=self.cfg.grpo.scale_rewards).flatten()  # (P*G,)
        m["adv/mean_abs"] = float(advantages.abs().mean())
        t1 = time.perf_counter()
        m.update(self.update(episodes, advantages))
        t_train = time.perf_counter() - t1
        m["skipped"] = m.get("skipped", 0.0)
        m["kl_bound"] = self.cfg.grpo.kl_bound
        gen_tokens = sum(e.n_policy_tokens for e in episodes)
        m["perf/step_s"] = time.perf_counter() - t0
        m["perf/gen_tok_s"] = gen_tokens / max(t_gen, 1e-9)
        m["perf/train_tok_s"] = float(m.get("train_tokens", 0.0)) / max(t_train, 1e-9)
        m["perf/peak_rss_mb"] = peak_rss_mb()
        return StepResult(m, episodes)

    def run(self, first: int, last: int, on_step: Callable[[StepResult], bool]) -> None:
        """Steps `first`..`last`; `on_step` records each one and returns True to stop early."""
        for step in range(first, last + 1):
            if on_step(self.step(step)):
                return

    def state(self) -> dict[str, Any]:
        return {"torch_rng": torch.get_rng_state().tolist()}

    def restore(self, state: dict[str, Any]) -> None:
        if "torch_rng" in state:
            torch.set_rng_state(torch.tensor(state["torch_rng"], dtype=torch.uint8))
