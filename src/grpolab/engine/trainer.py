"""One native GRPO step: prompts -> groups -> rewards -> advantages -> mu update epochs -> metrics.

`GRPOTrainer` is the native step source of the run loop (`grpolab.run.loop`); evaluation, alarms, checkpoints
and the run directory are the loop's. Prompts and sampling seeds are derived from (seed, step), so a resumed run
redoes a step exactly as the killed run would have. A step whose rewards or loss are not finite is skipped (no
update) and recorded as skipped.

No pass runs whose result is unused: the reference forward only when beta > 0 or the KL is asked for
(`grpo.kl_metric`); no old-log-prob forward with an exact sampler (the rollout recorded them, and with mu = 1 the
ratio is 1 by construction). With `rollout.engine = "int8"` the rollout comes from a lighter copy: its log-probs
are the behaviour policy's, the loss weights each token by the truncated importance ratio, and the mismatch is
logged as `mismatch/kl` and `mismatch/ratio_out`. With `grpo.mask_truncated_completions` an episode cut by the
token budget carries no loss, so it is left out of the reference, old-log-prob and update passes.
"""

from __future__ import annotations

import math
import random
import resource
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from grpolab.config import LabConfig
from grpolab.engine import heap
from grpolab.engine.grpo import (
    TOKEN_MEAN,
    decoupled_advantages,
    group_advantages,
    grpo_loss,
    sampler_mismatch,
    top_entropy_mask,
    truncated_is_weights,
)
from grpolab.engine.logprobs import SharedPrefix, TokenStats, group_token_stats
from grpolab.engine.phases import Phases
from grpolab.engine.policy import resolve_precision
from grpolab.engine.precision import update_autocast
from grpolab.engine.rollout import Episode, run_episodes, sampling_settings
from grpolab.engine.sampler import make_sampler
from grpolab.envs.base import Environment, Task
from grpolab.metrics import episode_metrics, group_stats
from grpolab.rewards.score import score_episodes
from grpolab.vocabulary import (
    ADV_MEAN_ABS,
    CLIP_FRAC,
    ENTROPY,
    GENERATION_PHASES,
    GRAD_NORM,
    GROUPS_DROPPED,
    GROUPS_RESAMPLED,
    KL,
    KL_BOUND,
    LOSS,
    MISMATCH_KL,
    MISMATCH_RATIO_OUT,
    PERF_GEN_TOK_S,
    PERF_PEAK_RSS_MB,
    PERF_STEP_S,
    PERF_TRAIN_TOK_S,
    PHASE_FORWARD_BACKWARD,
    PHASE_OLD_LOGPROBS,
    PHASE_OPTIMIZER,
    PHASE_REFERENCE,
    PHASE_SAMPLER_REFRESH,
    PHASE_SCORE,
    PHASE_STEP,
    POLICY_LOSS,
    REWARD_ERRORS,
    SKIP_REASON,
    SKIPPED,
    TOOL_TOKEN_MASS,
    TRAIN_TOKENS,
    TRAINING_PHASES,
)

MICRO_BATCH_TOKENS = 1600
"""Most tokens (shared prompt + completions) per forward/backward; gradients accumulate over the step's batch.
Activations cost about 1.9 MB per token for SmolLM2-135M in fp32 with LoRA (measured), so a micro-batch holds
about 3 GB at most; a group whose episodes do not fit is split, and its parts share one prompt pass
(`SharedPrefix`)."""


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sampler_logp(episodes: list[Episode], like: Tensor) -> Tensor:
    """(B, K) log-probs the rollout recorded, aligned with the trainer's `like` (0 on tool output and padding)."""
    out = torch.zeros_like(like)
    for i, e in enumerate(episodes):
        out[i, : len(e.logprobs)] = torch.tensor(e.logprobs, dtype=like.dtype, device=like.device)
    return out


def step_prompts(tasks: list[Task], cfg: LabConfig, step: int, attempt: int = 0) -> list[Task]:
    rng = random.Random(f"{cfg.seed}-{step}-{attempt}")
    return rng.sample(tasks, min(cfg.train.prompts_per_step, len(tasks)))


def step_generator(cfg: LabConfig, step: int, attempt: int = 0) -> torch.Generator:
    """The rollout's random stream of a step: a CPU generator on any device (`rollout.sample_next`)."""
    return torch.Generator(device="cpu").manual_seed(cfg.seed * 1_000_003 + step * 101 + attempt)


@dataclass
class StepResult:
    metrics: dict[str, Any]
    episodes: list[Episode] = field(default_factory=list)
    phases: Phases | None = None


@dataclass
class _Chunk:
    """The episodes of one forward/backward, with everything the loss needs that does not change across epochs."""

    index: list[int]
    episodes: list[Episode]
    ref: Tensor | None = None
    old: Tensor | None = None
    sampler: Tensor | None = None
    tokens: float = 0.0


@dataclass
class _Totals:
    """Update diagnostics, accumulated beside the loss they describe (token-weighted over a step's chunks)."""

    loss: float = 0.0
    policy_loss: float = 0.0
    kl: float = 0.0
    clip_frac: float = 0.0
    entropy: float = 0.0
    mismatch_kl: float = 0.0
    mismatch_out: float = 0.0
    mass: list[float] = field(default_factory=list)


class GRPOTrainer:
    """Owns the policy, its optimizer and the reference; `step(n)` does one full GRPO iteration.

    The native step source of the run loop: `run`, `state`, `restore`, `model`, `tokenizer`, `optimizer`."""

    def __init__(self, model: Any, tokenizer: Any, env: Environment, cfg: LabConfig, reference: Any = None):
        self.model, self.tokenizer, self.env, self.cfg = model, tokenizer, env, cfg
        self.reference = reference  # None with LoRA: the base with adapters disabled is the reference
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.grpo.learning_rate, weight_decay=0.0)
        self.train_tasks = env.tasks("train")
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.tool_token = tokenizer("<tool_call>", add_special_tokens=False).input_ids[0]
        self.sampler = make_sampler(model, cfg.rollout.engine)
        self.sampling = sampling_settings(cfg)
        """How rollouts sample (from `rollout.*`; benchmarks set `min_new_tokens` for equal-length steps)."""
        requested = cfg.train.precision
        self.precision = requested if requested != "auto" else resolve_precision(cfg, env, model, tokenizer).chosen
        """dtype of the update's passes (`engine.precision`): the run loop records a resolved choice in the config."""

    # ---- rollouts ----

    def collect(self, step: int, phases: Phases) -> tuple[list[Episode], int, int]:
        """Sample groups; with dynamic filtering, drop or resample groups whose rewards are all equal."""
        cfg, G = self.cfg, self.cfg.rollout.group_size
        kept: list[Episode] = []
        dropped = resampled = 0
        with phases(PHASE_SAMPLER_REFRESH):
            self.sampler.refresh()
        for attempt in range(3 if cfg.grpo.dynamic_filter == "resample" else 1):
            tasks = step_prompts(self.train_tasks, cfg, step, attempt)
            gen = step_generator(cfg, step, attempt)
            eps = run_episodes(self.sampler.model, self.tokenizer, self.env, tasks, G, self.sampling, gen, phases)
            with phases(PHASE_SCORE, episodes=len(eps)):
                score_episodes(
                    self.env,
                    eps,
                    cfg.reward.weights,
                    cfg.reward.length_unit,
                    cfg.reward.thought_min_words,
                    cfg.reward.timeout_s,
                )
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

    def _chunks(self, episodes: list[Episode], skip: bool = False) -> list[_Chunk]:
        """Episodes sharing a prompt (a group), at most MICRO_BATCH_TOKENS positions per chunk: the prompt once and
        the completions, which `group_token_stats` runs without padding. With `skip`, truncated episodes are left
        out: they carry no loss (`grpo.mask_truncated_completions`), so they need no pass."""
        chunks: list[_Chunk] = []
        for i, e in enumerate(episodes):
            if skip and e.truncated:
                continue
            last = chunks[-1] if chunks else None
            if last is not None and last.episodes[-1].group == e.group:
                if len(e.prompt_ids) + sum(len(x.completion_ids) for x in [*last.episodes, e]) <= MICRO_BATCH_TOKENS:
                    last.index.append(i)
                    last.episodes.append(e)
                    continue
            chunks.append(_Chunk([i], [e]))
        for c in chunks:
            c.tokens = float(sum(e.n_policy_tokens for e in c.episodes))
        return chunks

    def _stats(
        self, shared: SharedPrefix, episodes: list[Episode], with_entropy: bool = True
    ) -> tuple[TokenStats, Tensor]:
        """Stats of one chunk (episodes of one group) under `shared.model`, the group's prompt run once per pass."""
        e0 = episodes[0]
        completions, masks = [e.completion_ids for e in episodes], [e.mask for e in episodes]
        temperature = self.cfg.rollout.temperature
        with update_autocast(self.precision, next(shared.model.parameters()).device.type):
            prefix = shared.get(e0.prompt_ids)
            return group_token_stats(
                shared.model, e0.prompt_ids, completions, masks, self.pad, temperature, with_entropy, prefix=prefix
            )

    @torch.no_grad()
    def _logps(self, model: Any, chunks: list[_Chunk]) -> list[Tensor]:
        """Each chunk's log-probs under `model`, without gradients; a prompt shared by consecutive chunks runs once."""
        shared = SharedPrefix(model)
        return [self._stats(shared, c.episodes, False)[0].logp for c in chunks]

    def _reference_logps(self, chunks: list[_Chunk]) -> None:
        """Each chunk's log-probs under the reference: its own model, or the base with adapters disabled (LoRA)."""
        separate = self.reference is not None
        with nullcontext() if separate else self.model.disable_adapter():
            for c, logp in zip(chunks, self._logps(self.reference if separate else self.model, chunks)):
                c.ref = logp

    def update(self, episodes: list[Episode], advantages: Tensor, phases: Phases) -> dict[str, float]:
        cfg = self.cfg.grpo
        eps_high = cfg.epsilon_high if cfg.epsilon_high is not None else cfg.epsilon
        chunks = self._chunks(episodes, skip=cfg.mask_truncated_completions)
        if not chunks:
            return {SKIPPED: 1.0, SKIP_REASON: "every episode was truncated (grpo.mask_truncated_completions)"}  # type: ignore[dict-item]
        total = max(sum(c.tokens for c in chunks), 1.0)
        if cfg.beta > 0 or cfg.kl_metric:
            with phases(PHASE_REFERENCE, tokens=total):
                self._reference_logps(chunks)
        exact = self.sampler.exact
        # the policy before the update, which an int8 sampler only approximates and a bf16 update does not compute
        # as the fp32 rollout recorded it
        if cfg.mu > 1 and (not exact or self.precision != "fp32"):
            with phases(PHASE_OLD_LOGPROBS, tokens=total):
                for c, logp in zip(chunks, self._logps(self.model, chunks)):
                    c.old = logp
        t = _Totals()
        grad_norm = 0.0
        self.model.train()
        for epoch in range(cfg.mu):
            self.optimizer.zero_grad(set_to_none=True)
            shared = SharedPrefix(self.model)  # the policy changes every epoch: its prompt passes are redone
            for c in chunks:
                with phases(PHASE_FORWARD_BACKWARD, tokens=c.tokens):
                    stats, mask = self._stats(shared, c.episodes)
                    if c.sampler is None:
                        c.sampler = sampler_logp(c.episodes, stats.logp.detach())
                    # the policy before this step's update: with mu = 1 the current one (ratio 1 by construction);
                    # later epochs of an exact sampler: the log-probs it recorded; of int8: the extra pass above
                    old = c.old if c.old is not None else (c.sampler if exact and cfg.mu > 1 else stats.logp.detach())
                    weights = None if exact else truncated_is_weights(old, c.sampler, cfg.is_cap)
                    q = cfg.top_entropy_quantile
                    high_entropy = top_entropy_mask(stats.entropy, mask, q) if q < 1 else None
                    loss, ls = grpo_loss(
                        stats.logp,
                        old,
                        c.ref,
                        advantages[c.index].to(stats.logp.device),
                        mask,
                        cfg.beta,
                        cfg.epsilon,
                        eps_high,
                        cfg.loss_type,
                        self.cfg.rollout.max_new_tokens,
                        weights,
                        cfg.importance_sampling_level,
                        high_entropy,
                    )
                    if not torch.isfinite(loss):
                        self.optimizer.zero_grad(set_to_none=True)
                        return {SKIPPED: 1.0, SKIP_REASON: "non-finite loss"}  # type: ignore[dict-item]
                    token_share = c.tokens / total
                    # a truncated episode left out still counts in a per-episode mean (as 0), as in TRL
                    share = token_share if cfg.loss_type in TOKEN_MEAN else len(c.index) / len(episodes)
                    (loss * share).backward()
                t.loss += loss.item() * share
                t.policy_loss += ls.policy_loss * share
                t.kl += ls.kl * token_share
                t.clip_frac += ls.clip_frac * token_share
                if epoch == 0:
                    t.entropy += float((stats.entropy * mask).sum()) / total
                    t.mass += stats.first_token_probs[:, self.tool_token].tolist()
                    kl, out = sampler_mismatch(stats.logp, c.sampler, mask)
                    t.mismatch_kl += kl * token_share
                    t.mismatch_out += out * token_share
            with phases(PHASE_FORWARD_BACKWARD):
                shared.flush()  # the last group's prompt backward
            with phases(PHASE_OPTIMIZER):
                grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm))
                if not math.isfinite(grad_norm):
                    self.optimizer.zero_grad(set_to_none=True)
                    return {SKIPPED: 1.0, SKIP_REASON: "non-finite gradient"}  # type: ignore[dict-item]
                self.optimizer.step()
        self.model.eval()
        out: dict[str, float] = {
            LOSS: t.loss / cfg.mu,
            POLICY_LOSS: t.policy_loss / cfg.mu,
            CLIP_FRAC: t.clip_frac / cfg.mu,
            ENTROPY: t.entropy,
            TOOL_TOKEN_MASS: sum(t.mass) / len(t.mass),
            GRAD_NORM: grad_norm,
            TRAIN_TOKENS: total,
            MISMATCH_KL: t.mismatch_kl,
            MISMATCH_RATIO_OUT: t.mismatch_out,
        }
        if chunks[0].ref is not None:
            out[KL] = t.kl / cfg.mu
        return out

    def step(self, step: int) -> StepResult:
        phases = Phases()
        with phases(PHASE_STEP):
            result = self._step(step, phases)
        m = result.metrics
        m.update(phases.metrics())
        gen_s = sum(phases.seconds[k] for k in GENERATION_PHASES)
        train_s = sum(phases.seconds[k] for k in TRAINING_PHASES)
        m[PERF_STEP_S] = phases.seconds[PHASE_STEP]
        m[PERF_GEN_TOK_S] = sum(e.n_policy_tokens for e in result.episodes) / max(gen_s, 1e-9)
        m[PERF_TRAIN_TOK_S] = float(m.get(TRAIN_TOKENS, 0.0)) / max(train_s, 1e-9)
        m[PERF_PEAK_RSS_MB] = peak_rss_mb()
        heap.trim()  # the update's activations are freed: the next rollout or an evaluation starts clean
        result.phases = phases
        return result

    def _step(self, step: int, phases: Phases) -> StepResult:
        episodes, dropped, resampled = self.collect(step, phases)
        heap.trim()  # the rollout's KV cache and packed weights are freed: the update's activations start clean
        G = self.cfg.rollout.group_size
        m: dict[str, Any] = {"step": step, GROUPS_DROPPED: dropped, GROUPS_RESAMPLED: resampled, SKIPPED: 0.0}
        if not episodes:
            return StepResult({**m, SKIPPED: 1.0, SKIP_REASON: "every group had equal rewards"})
        # rewards and advantages are a few numbers: kept on the CPU, each chunk's moved to the model's device
        rewards = torch.tensor([e.score.total for e in episodes], dtype=torch.float32, device="cpu").view(-1, G)
        m.update(episode_metrics(episodes))
        m.update(group_stats(rewards.tolist()))
        if not torch.isfinite(rewards).all():
            m.update({SKIPPED: 1.0, SKIP_REASON: f"non-finite reward (see {REWARD_ERRORS})"})
            return StepResult(m, episodes)
        advantages = self.advantages(episodes, rewards).flatten()  # (P*G,)
        m[ADV_MEAN_ABS] = float(advantages.abs().mean())
        m.update(self.update(episodes, advantages, phases))
        m[KL_BOUND] = self.cfg.grpo.kl_bound
        return StepResult(m, episodes)

    def advantages(self, episodes: list[Episode], rewards: Tensor) -> Tensor:
        """(P, G) advantages of the step's episodes from their (P, G) rewards, or from each reward component
        normalised on its own (`grpo.multi_objective_aggregation = "normalize_then_sum"`)."""
        g = self.cfg.grpo
        if g.multi_objective_aggregation == "sum_then_normalize":
            return group_advantages(rewards, scale=g.scale_rewards)
        names = list(self.cfg.reward.weights)
        components = [[e.score.components.get(n, 0.0) if e.score else 0.0 for n in names] for e in episodes]
        weights = torch.tensor([self.cfg.reward.weights[n] for n in names], device="cpu")
        by_component = torch.tensor(components, device="cpu").view(*rewards.shape, len(names))
        return decoupled_advantages(by_component, weights)

    def run(self, first: int, last: int, on_step: Callable[[StepResult], bool]) -> None:
        """Steps `first`..`last`; `on_step` records each one and returns True to stop early."""
        for step in range(first, last + 1):
            if on_step(self.step(step)):
                return

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps besides weights and optimizer: the torch RNG (prompts and seeds come from the
        step number)."""
        return {"torch_rng": torch.get_rng_state().tolist()}

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint's `state()`."""
        if "torch_rng" in state:
            torch.set_rng_state(torch.tensor(state["torch_rng"], dtype=torch.uint8, device="cpu"))
