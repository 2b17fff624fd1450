"""The GRPO objective as pure tensor functions (DeepSeekMath, arXiv 2402.03300; Dr. GRPO, 2503.20783; DAPO, 2503.14476).

    A_i      = (r_i - mean_G(r)) / (std_G(r) + eps)             group-relative advantage (Dr. GRPO: no std;
                                                                   "batch": the std of the whole batch)
    GDPO     A_i = batchnorm(sum_k w_k * groupnorm(r_ik))         each reward component normalised on its own
    ratio_t  = exp(logp_t - logp_old_t)                           token level; GSPO (2507.18071), sequence level:
    ratio    = exp(mean_t(logp_t - logp_old_t))                     one ratio per episode, over its policy tokens
    L_clip_t = -min(ratio_t * A, clip(ratio_t, 1 - eps_lo, 1 + eps_hi) * A)
    L_cispo_t = -sg(min(ratio_t, eps_hi)) * A * logp_t            CISPO (MiniMax-M1, 2506.13585), as TRL caps it
    KL_t     = exp(ref_t - logp_t) - (ref_t - logp_t) - 1        k3 estimator (Schulman, "Approximating KL")
    w_t      = min(exp(logp_old_t - logp_sampler_t), C)           truncated importance sampling (TIS), when the
                                                                   rollout sampled from another copy (int8)
    h_t      = 1 if entropy_t >= quantile(entropy, 1 - rho)       "Beyond the 80/20 rule" (2506.01939): only the
                                                                   top-rho entropy tokens carry policy loss
    loss     = aggregate(h_t * w_t * L_t + beta * KL_t) over policy tokens only (mask 1; an episode cut by the
               token budget is all 0 with truncation masking, DAPO's overlong filtering)

Shapes: B episodes, T completion positions. Everything here is pure: no model, no I/O. TIS follows Yao et al.,
"Your efficient RL framework secretly brings you off-policy RL training" (2025), as TRL, verl and SkyRL apply it:
token-level weights, detached, capped at C. Standard deviations are population ones (TRL's carry Bessel's
correction: sqrt(G / (G - 1)) larger, a constant factor on the advantages).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

REWARD_SCALES = ("group", "batch", "none")
"""How advantages are scaled: by each group's reward std, by the whole batch's, or not at all."""


def group_advantages(rewards: Tensor, scale: bool | str = True, eps: float = 1e-4) -> Tensor:
    """(P, G) rewards -> (P, G) advantages, relative to each prompt's group. A group of equal rewards gives 0.

    `scale`: "group" (or True) divides by each group's std, "batch" by the std of all P x G rewards, "none" (or
    False) only centres."""
    scale = {True: "group", False: "none"}.get(scale, scale)  # type: ignore[call-overload]
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if scale == "none":
        return centred
    if scale == "batch":
        return centred / (rewards.std(unbiased=False) + eps)
    return centred / (rewards.std(dim=1, keepdim=True, unbiased=False) + eps)


def decoupled_advantages(components: Tensor, weights: Tensor, eps: float = 1e-4) -> Tensor:
    """GDPO (normalize_then_sum): (P, G, K) unweighted reward components and (K,) weights -> (P, G) advantages.

    Each component is normalised within its group, the weighted sum is normalised over the batch, so a component
    with a small spread is not drowned by one with a large spread before the group baseline is taken."""
    mean = components.mean(dim=1, keepdim=True)
    std = components.std(dim=1, keepdim=True, unbiased=False)
    summed = ((components - mean) / (std + eps) * weights).sum(-1)  # (P, G)
    return (summed - summed.mean()) / (summed.std(unbiased=False) + eps)


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(pi_theta || pi_ref) from samples of pi_theta; >= 0, unbiased. (B, T) -> (B, T)."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


IMPORTANCE_LEVELS = ("token", "sequence")


def importance_log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor | None = None, level: str = "token") -> Tensor:
    """log(pi_theta / pi_old): (B, T) per token, or (B, 1) for "sequence" (GSPO: the mean over each episode's
    mask-1 tokens, as TRL computes it)."""
    log_ratio = logp - old_logp  # (B, T)
    if level == "token":
        return log_ratio
    if mask is None:
        mask = torch.ones_like(logp)
    return ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1))[:, None]  # (B, 1)


def clipped_surrogate(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    eps_low: float,
    eps_high: float,
    mask: Tensor | None = None,
    level: str = "token",
) -> tuple[Tensor, Tensor]:
    """Per-token clipped policy loss (B, T) and a (B, T) bool mask of tokens where the clip was active. At the
    "sequence" level every token of an episode shares the episode's ratio."""
    ratio = torch.exp(importance_log_ratio(logp, old_logp, mask, level)).expand_as(logp)  # (B, T)
    adv = advantages[:, None]  # (B, 1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv
    loss = -torch.min(unclipped, clipped)
    return loss, (clipped < unclipped)


def cispo_surrogate(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    eps_low: float,
    eps_high: float,
    mask: Tensor | None = None,
    level: str = "token",
) -> tuple[Tensor, Tensor]:
    """CISPO's per-token loss -sg(min(ratio, eps_high)) * A * logp (B, T): the importance weight is capped and
    detached instead of the update clipped, so every token keeps a gradient. `eps_high` is the cap on the ratio
    itself (TRL's reading of the paper's 1 + eps_max); the mask marks tokens whose weight was capped with A > 0
    (TRL's `cispo_clip_ratio`). `eps_low` is unused, as in TRL."""
    ratio = torch.exp(importance_log_ratio(logp, old_logp, mask, level)).expand_as(logp)  # (B, T)
    adv = advantages[:, None]  # (B, 1)
    weight = ratio.clamp(max=eps_high).detach()
    return -weight * adv * logp, (ratio > eps_high) & (adv > 0)


Surrogate = Callable[[Tensor, Tensor, Tensor, float, float, Tensor | None, str], tuple[Tensor, Tensor]]


def truncated_is_weights(old_logp: Tensor, sampler_logp: Tensor, cap: float) -> Tensor:
    """(B, T) importance weights min(pi_old / pi_sampler, cap), detached: the sampler's mismatch, corrected."""
    return torch.exp(old_logp - sampler_logp).clamp(max=cap).detach()


def without_truncated(mask: Tensor, truncated: Tensor) -> Tensor:
    """(B, T) loss mask with every token of a (B,) truncated episode set to 0 (DAPO's overlong filtering)."""
    return mask * (~truncated).to(mask.dtype)[:, None]


def top_entropy_mask(entropy: Tensor, mask: Tensor, quantile: float) -> Tensor:
    """(B, T) bool: mask-1 tokens whose entropy is at least the (1 - quantile) quantile of the mask-1 tokens'
    entropies (TRL's `get_high_entropy_mask`); quantile 1 keeps every token, 0 only the highest."""
    keep = mask.bool()
    if not keep.any():
        return keep
    threshold = torch.quantile(entropy[keep].float(), 1 - quantile)
    return (entropy >= threshold) & keep


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


# fmt: off
AGGREGATIONS: dict[str, Aggregation] = {
    "grpo": _grpo_agg, "dr_grpo": _dr_grpo_agg, "dapo": _dapo_agg,
    "bnpo": _dapo_agg,   # TRL: token mean of the local batch, which is the step's batch here
    "cispo": _dapo_agg,  # TRL aggregates CISPO as DAPO does
}
SURROGATES: dict[str, Surrogate] = {
    "grpo": clipped_surrogate, "dr_grpo": clipped_surrogate, "dapo": clipped_surrogate, "bnpo": clipped_surrogate,
    "cispo": cispo_surrogate,
}
# fmt: on
TOKEN_MEAN = frozenset(k for k, agg in AGGREGATIONS.items() if agg is _dapo_agg)
"""Loss types whose aggregation is a mean over the batch's tokens (a chunk's share of the step is its tokens')."""


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
    level: str = "token",
    policy_mask: Tensor | None = None,
) -> tuple[Tensor, LossStats]:
    """The full objective. `mask` (B, T) is 1 on policy tokens: tool output and padding contribute nothing.
    `policy_mask` (B, T), when given, further limits the policy term (not the KL) to its 1 tokens (entropy
    quantile); `level` is the importance ratio's ("token" or GSPO's "sequence")."""
    mask = mask.to(logp.dtype)
    aggregate = AGGREGATIONS[loss_type]
    policy, clipped = SURROGATES[loss_type](logp, old_logp, advantages, eps_low, eps_high, mask, level)
    if policy_mask is not None:
        policy = policy * policy_mask.to(policy.dtype)
    if is_weights is not None:
        policy = policy * is_weights
    per_token = policy
    kl_mean = torch.zeros((), device=logp.device)
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
