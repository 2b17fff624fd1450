"""The GRPO objective as pure tensor functions (DeepSeekMath, arXiv 2402.03300; Dr. GRPO, 2503.20783; DAPO, 2503.14476).

    A_i      = (r_i - mean_G(r)) / (std_G(r) + eps)             group-relative advantage (Dr. GRPO: no std)
    ratio_t  = exp(logp_t - logp_old_t)
    L_clip_t = -min(ratio_t * A, clip(ratio_t, 1 - eps_lo, 1 + eps_hi) * A)
    KL_t     = exp(ref_t - logp_t) - (ref_t - logp_t) - 1        k3 estimator (Schulman, "Approximating KL")
    w_t      = min(exp(logp_old_t - logp_sampler_t), C)           truncated importance sampling (TIS), when the
                                                                   rollout sampled from another copy (int8)
    loss     = aggregate(w_t * L_clip_t + beta * KL_t) over policy tokens only (mask 1)

Shapes: B episodes, T completion positions. Everything here is pure: no model, no I/O. TIS follows Yao et al.,
"Your efficient RL framework secretly brings you off-policy RL training" (2025), as TRL, verl and SkyRL apply it:
token-level weights, detached, capped at C.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


def group_advantages(rewards: Tensor, scale: bool = True, eps: float = 1e-4) -> Tensor:
    """(P, G) rewards -> (P, G) advantages, relative to each prompt's group. A group of equal rewards gives 0."""
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not scale:
        return centred
    return centred / (rewards.std(dim=1, keepdim=True, unbiased=False) + eps)


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(pi_theta || pi_ref) from samples of pi_theta; >= 0, unbiased. (B, T) -> (B, T)."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


def clipped_surrogate(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, eps_low: float, eps_high: float
) -> tuple[Tensor, Tensor]:
    """Per-token clipped policy loss (B, T) and a (B, T) bool mask of tokens where the clip was active."""
    ratio = torch.exp(logp - old_logp)  # (B, T)
    adv = advantages[:, None]  # (B, 1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv
    loss = -torch.min(unclipped, clipped)
    return loss, (clipped < unclipped)


def truncated_is_weights(old_logp: Tensor, sampler_logp: Tensor, cap: float) -> Tensor:
    """(B, T) importance weights min(pi_old / pi_sampler, cap), detached: the sampler's mismatch, corrected."""
    return torch.exp(old_logp - sampler_logp).clamp(max=cap).detach()


def sampler_mismatch(trainer_logp: Tensor, sampler_logp: Tensor, mask: Tensor) -> tuple[float, float]:
    """(k3 estimate of KL(sampler || trainer), fraction of tokens whose ratio pi_trainer / pi_sampler leaves
    [0.9, 1.1]) over mask-1 tokens; tokens were sampled from the sampler."""
    log_ratio = (trainer_logp - sampler_logp).detach()
    n = mask.sum().clamp(min=1)
    kl = ((torch.exp(log_ratio) - log_ratio - 1) * mask).sum() / n
    ratio = torch.exp(log_ratio)
    outside = (((ratio < 0.9) | (ratio > 1.1)).to(mask.dtype) * mask).sum() / n
    return float(kl), float(outside)


Aggregation = Callable[[Tensor, Tensor, int], Tensor]


def _grpo_agg(per_token: Tensor, mask: Tensor, max_tokens: int) -> Tensor:
    """Mean over each sequence's tokens, then over sequences (the original GRPO; biased toward short answers)."""
    per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return per_seq.mean()


def _dr_grpo_agg(per_token: Tensor, mask: Tensor, max_tokens: int) -> Tensor:
    """Sum over tokens divided by a constant (B * max_tokens): no length bias (Dr. GRPO)."""
    return (per_token * mask).sum() / (mask.shape[0] * max_tokens)


def _dapo_agg(per_token: Tensor, mask: Tensor, max_tokens: int) -> Tensor:
    """Mean over all policy tokens of the batch (DAPO's token-level loss)."""
    return (per_token * mask).sum() / mask.sum().clamp(min=1)


AGGREGATIONS: dict[str, Aggregation] = {"grpo": _grpo_agg, "dr_grpo": _dr_grpo_agg, "dapo": _dapo_agg}


@dataclass
class LossStats:
    policy_loss: float
    kl: float
    clip_frac: float


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    beta: float,
    eps_low: float,
    eps_high: float,
    loss_type: str = "grpo",
    max_tokens: int = 1,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, LossStats]:
    """The full objective. `mask` (B, T) is 1 on policy tokens: tool output and padding contribute nothing."""
    mask = mask.to(logp.dtype)
    aggregate = AGGREGATIONS[loss_type]
    policy, clipped = clipped_surrogate(logp, old_logp, advantages, eps_low, eps_high)
    if is_weights is not None:
        policy = policy * is_weights
    per_token = policy
    kl_mean = torch.zeros(())
    if ref_logp is not None and beta > 0:
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + beta * kl
        kl_mean = (kl * mask).sum() / mask.sum().clamp(min=1)
    elif ref_logp is not None:
        kl_mean = (k3_kl(logp, ref_logp) * mask).sum() / mask.sum().clamp(min=1)
    loss = aggregate(per_token, mask, max_tokens)
    n = mask.sum().clamp(min=1)
    stats = LossStats(
        policy_loss=float(aggregate(policy, mask, max_tokens).detach()),
        kl=float(kl_mean.detach()),
        clip_frac=float((clipped.to(mask.dtype) * mask).sum() / n),
    )
    return loss, stats
