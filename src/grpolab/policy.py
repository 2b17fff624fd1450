"""Per-token log-probs, entropy and tool-token mass of episodes under a model, in one batched forward.

Sequences (prompt + completion) are left-padded so every completion ends at the last position; we ask the model
for logits of the last K+1 positions only (K = longest completion), which keeps the (B, K, V) logits small.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grpolab.grpo import token_entropy


@dataclass
class SequenceBatch:
    input_ids: Tensor  # (B, L) left-padded prompt + completion
    attention: Tensor  # (B, L)
    positions: Tensor  # (B, L)
    targets: Tensor  # (B, K) completion ids, right-aligned, pad elsewhere
    mask: Tensor  # (B, K) 1 on policy tokens, 0 on tool output and padding
    first: Tensor  # (B,) window index of each completion's first token


def make_batch(
    prompts: list[list[int]], completions: list[list[int]], masks: list[list[int]], pad: int
) -> SequenceBatch:
    B = len(prompts)
    L = max(len(p) + len(c) for p, c in zip(prompts, completions))
    K = max(max(len(c) for c in completions), 1)
    input_ids = torch.full((B, L), pad, dtype=torch.long)
    attention = torch.zeros((B, L), dtype=torch.long)
    targets = torch.full((B, K), pad, dtype=torch.long)
    mask = torch.zeros((B, K), dtype=torch.float32)
    first = torch.zeros(B, dtype=torch.long)
    for i, (p, c, m) in enumerate(zip(prompts, completions, masks)):
        seq = p + c
        input_ids[i, L - len(seq) :] = torch.tensor(seq)
        attention[i, L - len(seq) :] = 1
        if c:
            targets[i, K - len(c) :] = torch.tensor(c)
            mask[i, K - len(c) :] = torch.tensor(m, dtype=torch.float32)
        first[i] = K - len(c)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return SequenceBatch(input_ids, attention, positions, targets, mask, first)


@dataclass
class TokenStats:
    logp: Tensor  # (B, K) log-prob of each completion token
    entropy: Tensor  # (B, K), detached
    first_token_probs: Tensor  # (B, V) next-token distribution at the first assistant position, detached


def token_stats(model: Any, batch: SequenceBatch, temperature: float = 1.0, with_entropy: bool = True) -> TokenStats:
    """Forward pass; gradients flow through `logp` when enabled by the caller."""
    device = next(model.parameters()).device
    K = batch.targets.shape[1]
    out = model(
        input_ids=batch.input_ids.to(device),
        attention_mask=batch.attention.to(device),
        position_ids=batch.positions.to(device),
        logits_to_keep=K + 1,
        use_cache=False,
    )
    logits = out.logits[:, :-1, :].float() / temperature  # (B, K, V): position k predicts targets[:, k]
    logp_all = torch.log_softmax(logits, dim=-1)
    targets = batch.targets.to(device)
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)  # (B, K)
    entropy = token_entropy(logits.detach()) if with_entropy else torch.zeros_like(logp)
    rows = torch.arange(len(targets), device=device)
    first_probs = logp_all.detach()[rows, batch.first.to(device).clamp(max=K - 1)].exp()  # (B, V)
    return TokenStats(logp=logp, entropy=entropy, first_token_probs=first_probs)
