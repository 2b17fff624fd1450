"""Per-token log-probs, entropy and tool-token mass of episodes under a model.

`token_stats`: sequences (prompt + completion) left-padded so every completion ends at the last position; the
model returns logits of the last K+1 positions only (K = longest completion), which keeps (B, K, V) small.

`group_token_stats`: the G episodes of a group share their prompt, so the prompt is run once and its KV cache is
repeated for the group (gradients flow through the shared prefix, so this is exact, not an approximation). With a
370-token prompt and ~250-token completions this halves the cost of an update on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grpolab.engine.grpo import token_entropy
from grpolab.models import cache_keyword, cache_of


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


def group_token_stats(
    model: Any,
    prompt: list[int],
    completions: list[list[int]],
    masks: list[list[int]],
    pad: int,
    temperature: float = 1.0,
    with_entropy: bool = True,
) -> tuple[TokenStats, Tensor]:
    """Stats for episodes that share one prompt. Returns (stats, mask), both (G, K) with completions left-aligned."""
    device = next(model.parameters()).device
    G, K = len(completions), max(max(len(c) for c in completions), 1)
    prompt_ids = torch.tensor([prompt], device=device)  # (1, Lp)
    out = model(input_ids=prompt_ids, use_cache=True, logits_to_keep=1)
    cache = cache_of(out)
    cache.batch_repeat_interleave(G)
    ids = torch.full((G, K), pad, dtype=torch.long, device=device)  # (G, K) right-padded
    mask = torch.zeros((G, K), dtype=torch.float32, device=device)
    attention = torch.zeros((G, len(prompt) + K), dtype=torch.long, device=device)
    attention[:, : len(prompt)] = 1
    for i, (c, m) in enumerate(zip(completions, masks)):
        if c:
            ids[i, : len(c)] = torch.tensor(c, device=device)
            mask[i, : len(c)] = torch.tensor(m, dtype=torch.float32, device=device)
            attention[i, len(prompt) : len(prompt) + len(c)] = 1
    positions = (len(prompt) + torch.arange(K, device=device))[None, :].expand(G, K)
    out2 = model(
        input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True, **{cache_keyword(model): cache}
    )
    first = out.logits[:, -1:, :].expand(G, 1, -1)  # (G, 1, V): predicts each completion's first token
    logits = torch.cat([first, out2.logits[:, :-1, :]], dim=1).float() / temperature  # (G, K, V)
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, ids[..., None]).squeeze(-1)  # (G, K)
    entropy = token_entropy(logits.detach()) if with_entropy else torch.zeros_like(logp)
    return TokenStats(logp=logp, entropy=entropy, first_token_probs=logp_all.detach()[:, 0].exp()), mask
