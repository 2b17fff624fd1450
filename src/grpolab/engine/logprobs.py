"""Per-token log-probs, entropy and tool-token mass of episodes under a model, without materialising logits.

`group_token_stats`: the G episodes of a group share their prompt, so the prompt is run once and its KV cache is
repeated for the group (gradients flow through the shared prefix, so this is exact, not an approximation). The
model body returns hidden states; the LM head then runs only on the tokens that need a log-prob (the policy's own
tokens: tool output and padding get none), through `linear_logprobs`.

`linear_logprobs` is the fused linear + log-softmax idea of Liger's cross-entropy kernels, written for the CPU: the
head is applied chunk by chunk, each chunk's logits live only long enough to give log p(target), the log-partition
and the entropy, and the backward pass recomputes them (one extra head matmul) instead of keeping (tokens, vocab)
fp32 tensors alive. At the demo's size (about 3,200 tokens, vocabulary 49,152) the full logits and their
log-softmax would be ~600 MB each.

`token_stats` (prompt and completion in one left-padded batch) is the plain version, kept for the SFT warm start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grpolab.engine.decoder import base_model
from grpolab.models import cache_keyword, cache_of

CHUNK_TOKENS = 256
"""Tokens per LM-head chunk: (256, 49152) fp32 logits are 50 MB."""


class LinearLogProbs(torch.autograd.Function):
    """log softmax(hidden @ weight.T / temperature)[target] per row, and the entropy (not differentiated)."""

    @staticmethod
    def forward(
        ctx: Any, hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float, with_entropy: bool = True
    ) -> tuple[Tensor, Tensor]:
        logp = hidden.new_empty(len(targets), dtype=torch.float32)
        entropy = torch.zeros_like(logp)
        lse = torch.empty_like(logp)
        for s in range(0, len(targets), CHUNK_TOKENS):
            e = s + CHUNK_TOKENS
            logits = _chunk_logits(hidden[s:e], weight, temperature)  # (c, V)
            lse[s:e] = torch.logsumexp(logits, dim=-1)
            logp[s:e] = logits.gather(-1, targets[s:e, None]).squeeze(-1) - lse[s:e]
            if with_entropy:  # H = lse - sum p * logits, without a second (c, V) buffer
                probs = torch.exp(logits - lse[s:e, None])
                entropy[s:e] = lse[s:e] - probs.mul_(logits).sum(-1)
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx: Any, grad_logp: Tensor, grad_entropy: Tensor | None) -> tuple[Tensor | None, ...]:
        hidden, weight, targets, lse = ctx.saved_tensors
        T = ctx.temperature
        grad_hidden = torch.zeros_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        rows = torch.arange(min(CHUNK_TOKENS, len(targets)), device=hidden.device)
        for s in range(0, len(targets), CHUNK_TOKENS):
            e = s + CHUNK_TOKENS
            # d logp / d logits = onehot - p, with p recomputed in place in the logits' own buffer (not stored)
            g = _chunk_logits(hidden[s:e], weight, T).sub_(lse[s:e, None]).exp_().mul_(-grad_logp[s:e, None])
            n = len(g)
            g[rows[:n], targets[s:e]] += grad_logp[s:e]
            if T != 1.0:
                g.div_(T)
            g = g.to(hidden.dtype)
            if grad_hidden is not None:
                grad_hidden[s:e] = g @ weight
            if grad_weight is not None:
                grad_weight += g.T @ hidden[s:e]
        return grad_hidden, grad_weight, None, None, None


def _chunk_logits(hidden: Tensor, weight: Tensor, temperature: float) -> Tensor:
    """(c, V) fp32 logits of a chunk at the temperature (divided in place: no second buffer)."""
    logits = (hidden @ weight.T).float()
    return logits if temperature == 1.0 else logits.div_(temperature)


def linear_logprobs(
    hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float = 1.0, with_entropy: bool = True
) -> tuple[Tensor, Tensor]:
    """(N, H) hidden states, (V, H) head, (N,) targets -> log-probs (N,) with gradients, entropy (N,) without
    (zeros when `with_entropy` is off)."""
    return LinearLogProbs.apply(hidden, weight, targets, temperature, with_entropy)


@dataclass
class TokenStats:
    logp: Tensor  # (B, K) log-prob of each completion token (0 where the mask is 0)
    entropy: Tensor  # (B, K), detached (0 where the mask is 0)
    first_token_probs: Tensor  # (B, V) next-token distribution at the first assistant position, detached


def _head(model: Any) -> Tensor:
    return base_model(model).lm_head.weight


def _body(model: Any) -> Any:
    return base_model(model).model


def group_token_stats(
    model: Any,
    prompt: list[int],
    completions: list[list[int]],
    masks: list[list[int]],
    pad: int,
    temperature: float = 1.0,
    with_entropy: bool = True,
) -> tuple[TokenStats, Tensor]:
    """Stats of episodes that share one prompt: (stats, mask), both (G, K) with completions left-aligned.

    Log-probs are computed for mask-1 (policy) tokens only; elsewhere they are 0."""
    device = next(model.parameters()).device
    G, K = len(completions), max(max(len(c) for c in completions), 1)
    body = _body(model)
    out = body(input_ids=torch.tensor([prompt], device=device), use_cache=True)
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
    out2 = body(
        input_ids=ids,
        attention_mask=attention,
        position_ids=positions,
        use_cache=True,
        **{cache_keyword(body): cache},
    )
    # the hidden state before token k predicts it: the prompt's last state, then the completion's own states
    first = out.last_hidden_state[:, -1:, :].expand(G, 1, -1)  # (G, 1, H)
    hidden = torch.cat([first, out2.last_hidden_state[:, :-1, :]], dim=1)  # (G, K, H)
    where = mask.bool()
    logp_flat, entropy_flat = linear_logprobs(hidden[where], _head(model), ids[where], temperature, with_entropy)
    logp = torch.zeros((G, K), dtype=logp_flat.dtype, device=device).index_put((where,), logp_flat)
    entropy = torch.zeros((G, K), dtype=entropy_flat.dtype, device=device)
    if with_entropy:
        entropy = entropy.index_put((where,), entropy_flat.detach())
    with torch.no_grad():
        first_logits = (out.last_hidden_state[0, -1] @ _head(model).T).float() / temperature
        first_probs = torch.softmax(first_logits, dim=-1)[None, :].expand(G, -1)
    return TokenStats(logp=logp, entropy=entropy, first_token_probs=first_probs), mask


@dataclass
class SequenceBatch:
    input_ids: Tensor  # (B, L) left-padded prompt + completion
    attention: Tensor  # (B, L)
    positions: Tensor  # (B, L)
    targets: Tensor  # (B, K) completion ids, right-aligned, pad elsewhere
    mask: Tensor  # (B, K) 1 on policy tokens, 0 on tool output and padding


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
    for i, (p, c, m) in enumerate(zip(prompts, completions, masks)):
        seq = p + c
        input_ids[i, L - len(seq) :] = torch.tensor(seq)
        attention[i, L - len(seq) :] = 1
        if c:
            targets[i, K - len(c) :] = torch.tensor(c)
            mask[i, K - len(c) :] = torch.tensor(m, dtype=torch.float32)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return SequenceBatch(input_ids, attention, positions, targets, mask)


def token_logprobs(model: Any, batch: SequenceBatch, temperature: float = 1.0) -> Tensor:
    """(B, K) log-probs of the batch's completion tokens (0 where the mask is 0); gradients flow when enabled."""
    device = next(model.parameters()).device
    K = batch.targets.shape[1]
    out = _body(model)(
        input_ids=batch.input_ids.to(device),
        attention_mask=batch.attention.to(device),
        position_ids=batch.positions.to(device),
        use_cache=False,
    )
    hidden = out.last_hidden_state[:, -K - 1 : -1, :]  # (B, K, H): position k predicts targets[:, k]
    where = batch.mask.to(device).bool()
    logp_flat, _ = linear_logprobs(hidden[where], _head(model), batch.targets.to(device)[where], temperature)
    return torch.zeros(where.shape, dtype=logp_flat.dtype, device=device).index_put((where,), logp_flat)
