"""Per-token log-probs, entropy and tool-token mass of episodes under a model, without materialising logits.

`group_token_stats`: the G episodes of a group share their prompt, so the prompt is run once and its KV cache is
the prefix of every completion (gradients flow through the shared prefix, so this is exact, not an approximation);
`SharedPrefix` extends that to a group split over several micro-batches.
The completions run sorted by length, one call per distinct length, so none is padded (in the demo, right-padding a
group to its longest episode spent 13-31% of the update's completion positions on padding). The
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
from transformers import DynamicCache

from grpolab.engine.decoder import base_model
from grpolab.engine.precision import compute_dtype
from grpolab.models import cache_keyword, cache_of

CHUNK_TOKENS = 256
"""Tokens per LM-head chunk: (256, 49152) fp32 logits are 50 MB."""


class LinearLogProbs(torch.autograd.Function):
    """log softmax(hidden @ weight.T / temperature)[target] per row, and the entropy (not differentiated).

    The head's matmuls run in the dtype autocast gives them (`precision.compute_dtype`: bf16 in a bf16 update), the
    softmax arithmetic, log-probs and gradients' accumulation in fp32."""

    @staticmethod
    def forward(
        ctx: Any, hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float, with_entropy: bool = True
    ) -> tuple[Tensor, Tensor]:
        dtype = compute_dtype(hidden.device.type, hidden.dtype)
        with torch.autocast(hidden.device.type, enabled=False):
            return LinearLogProbs._forward(ctx, hidden, weight, targets, temperature, with_entropy, dtype)

    @staticmethod
    def _forward(
        ctx: Any,
        hidden: Tensor,
        weight: Tensor,
        targets: Tensor,
        temperature: float,
        with_entropy: bool,
        dtype: torch.dtype,
    ) -> tuple[Tensor, Tensor]:
        logp = hidden.new_empty(len(targets), dtype=torch.float32)
        entropy = torch.zeros_like(logp)
        lse = torch.empty_like(logp)
        h, w = hidden.to(dtype), weight.to(dtype)  # no copy where the dtype is already the one to compute in
        logits_buf, exp_buf = _buffer(len(hidden), len(weight), hidden), _buffer(len(hidden), len(weight), hidden)
        for s in range(0, len(targets), CHUNK_TOKENS):
            e = s + CHUNK_TOKENS
            logits = _chunk_logits(h[s:e], w, temperature, logits_buf)  # (c, V) fp32
            top = logits.amax(-1, keepdim=True)
            shifted = torch.sub(logits, top, out=exp_buf[: len(logits)]).exp_()  # exp(logits - max): one exp pass
            total = shifted.sum(-1)
            lse[s:e] = top.squeeze(-1) + total.log()
            logp[s:e] = logits.gather(-1, targets[s:e, None]).squeeze(-1) - lse[s:e]
            if with_entropy:  # H = lse - sum p * logits, p = shifted / total
                entropy[s:e] = lse[s:e] - shifted.mul_(logits).sum(-1) / total
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.temperature, ctx.dtype = temperature, dtype
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx: Any, grad_logp: Tensor, grad_entropy: Tensor | None) -> tuple[Tensor | None, ...]:
        hidden, weight, targets, lse = ctx.saved_tensors
        T, dtype = ctx.temperature, ctx.dtype
        h, w = hidden.to(dtype), weight.to(dtype)
        grad_hidden = torch.zeros_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        rows = torch.arange(min(CHUNK_TOKENS, len(targets)), device=hidden.device)
        logits_buf = _buffer(len(hidden), len(weight), hidden)
        for s in range(0, len(targets), CHUNK_TOKENS):
            e = s + CHUNK_TOKENS
            # d logp / d logits = onehot - p, with p recomputed in place in the logits' own buffer (not stored)
            g = _chunk_logits(h[s:e], w, T, logits_buf).sub_(lse[s:e, None]).exp_()
            g.mul_(-grad_logp[s:e, None])
            n = len(g)
            g[rows[:n], targets[s:e]] += grad_logp[s:e]
            if T != 1.0:
                g.div_(T)
            g = g.to(dtype)
            if grad_hidden is not None:
                if dtype == hidden.dtype:
                    torch.mm(g, w, out=grad_hidden[s:e])
                else:
                    grad_hidden[s:e] = torch.mm(g, w)
            if grad_weight is not None:
                if dtype == weight.dtype:
                    grad_weight.addmm_(g.T, h[s:e])
                else:
                    grad_weight += torch.mm(g.T, h[s:e])
        return grad_hidden, grad_weight, None, None, None


def _buffer(rows: int, vocab: int, like: Tensor) -> Tensor:
    """One chunk's (CHUNK_TOKENS, V) fp32 logits buffer, reused by every chunk of a call.

    A (256, 49152) fp32 chunk is 50 MB, above glibc's largest mmap threshold (32 MB): allocated afresh per chunk it
    is a new mapping each time, and every one of its pages faults in on first touch."""
    return like.new_empty(min(CHUNK_TOKENS, rows), vocab, dtype=torch.float32)


def _chunk_logits(hidden: Tensor, weight: Tensor, temperature: float, out: Tensor) -> Tensor:
    """(c, V) fp32 logits of a chunk at the temperature, written into `out` (a matmul in another dtype is copied
    into it); divided in place."""
    target = out[: len(hidden)]
    if hidden.dtype == torch.float32:
        logits = torch.mm(hidden, weight.T, out=target)
    else:
        logits = target.copy_(torch.mm(hidden, weight.T))
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


def length_segments(lengths: list[int]) -> list[list[int]]:
    """The episodes of a group (indices into `lengths`) cut into forward calls, longest first: one call per distinct
    length, so no call pads. Measured on the demo's model (a group of 8, lengths 90-260, sharing a 390-token prompt,
    forward + backward): 8 calls 18 s, 4 calls trading padding against calls 19-21 s, one padded call 25 s; at
    these sizes a call's fixed cost is below what one more padded position costs."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    segments: list[list[int]] = []
    for i in order:
        if segments and lengths[segments[-1][0]] == lengths[i]:
            segments[-1].append(i)
        else:
            segments.append([i])
    return segments


@dataclass
class Prefix:
    """A prompt's forward: its last hidden state (it predicts each completion's first token) and every layer's keys
    and values, the prefix of every completion of the group."""

    first: Tensor  # (H,)
    kv: list[tuple[Tensor, Tensor]]  # per layer (1, kv_heads, P, head_dim)


def prompt_prefix(model: Any, prompt: list[int]) -> Prefix:
    device = next(model.parameters()).device
    out = _body(model)(input_ids=torch.tensor([prompt], device=device), use_cache=True)
    return Prefix(out.last_hidden_state[0, -1], [(layer.keys, layer.values) for layer in cache_of(out).layers])


class SharedPrefix:
    """One prompt forward, and one prompt backward, for every micro-batch of a group.

    A group too long for one micro-batch (the trainer's MICRO_BATCH_TOKENS) is split; run alone, each part would
    pass the prompt again, forward and backward (in the demo 4 prompt passes of ~390 tokens for 2 groups, 16% of the
    update's positions). Here the parts of a group read one prompt forward. With gradients on, they read its
    outputs as leaf tensors, so each part's backward stops at the leaves and accumulates into them; `flush` (when
    the prompt changes, and before the optimizer step) sends the summed gradient through the prompt's graph once.
    The gradient is the same sum, taken in another order. Keyed on the prompt's tokens: consecutive groups that drew
    the same prompt share it too. Without gradients it is a cache of the prompt's forward."""

    def __init__(self, model: Any):
        self.model = model
        self.prompt: list[int] = []
        self.prefix: Prefix | None = None
        self.outputs: list[Tensor] = []
        self.leaves: list[Tensor] = []

    def get(self, prompt: list[int]) -> Prefix:
        """The prefix of `prompt`, run when the prompt changes (the previous prompt's gradient is flushed first)."""
        if self.prefix is None or prompt != self.prompt:
            self.flush()
            prefix = prompt_prefix(self.model, prompt)
            if torch.is_grad_enabled():
                self.outputs = [prefix.first, *[t for kv in prefix.kv for t in kv]]
                self.leaves = [t.detach().requires_grad_() for t in self.outputs]
                first, *flat = self.leaves
                prefix = Prefix(first, list(zip(flat[0::2], flat[1::2])))
            self.prompt, self.prefix = list(prompt), prefix
        return self.prefix

    def flush(self) -> None:
        """Backpropagate what the group's parts accumulated at the prefix through the prompt's forward."""
        pairs = [(o, x.grad) for o, x in zip(self.outputs, self.leaves) if x.grad is not None and o.requires_grad]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        self.prompt, self.prefix, self.outputs, self.leaves = [], None, [], []


def group_token_stats(
    model: Any,
    prompt: list[int],
    completions: list[list[int]],
    masks: list[list[int]],
    pad: int,
    temperature: float = 1.0,
    with_entropy: bool = True,
    prefix: Prefix | None = None,
) -> tuple[TokenStats, Tensor]:
    """Stats of episodes that share one prompt: (stats, mask), both (G, K) with completions left-aligned.

    The prompt runs once; its keys and values are the prefix of every completion, and the completions run in
    length-sorted calls (`length_segments`) that need no padding. `prefix`: the prompt's forward when the caller
    shares it between calls (`SharedPrefix`), else it is run here. Log-probs are computed for mask-1 (policy) tokens
    only; elsewhere they are 0."""
    device = next(model.parameters()).device
    G, K = len(completions), max(max(len(c) for c in completions), 1)
    P = len(prompt)
    body = _body(model)
    if prefix is None:
        prefix = prompt_prefix(model, prompt)
    ids = torch.full((G, K), pad, dtype=torch.long, device=device)  # (G, K) right-padded
    mask = torch.zeros((G, K), dtype=torch.float32, device=device)
    for i, (c, m) in enumerate(zip(completions, masks)):
        if c:
            ids[i, : len(c)] = torch.tensor(c, device=device)
            mask[i, : len(c)] = torch.tensor(m, dtype=torch.float32, device=device)
    first = prefix.first  # (H,): the prompt's last state predicts each completion's first token
    pieces, rows, cols = [first.new_zeros(0, len(first))], [ids.new_zeros(0)], [ids.new_zeros(0)]
    for segment in length_segments([len(c) for c in completions]):
        n, k = len(segment), len(completions[segment[0]])
        index = torch.tensor(segment, device=device)
        where = mask[index, :k].bool()  # (n, k)
        if not where.any():
            continue
        cache = DynamicCache()
        for layer, (keys, values) in enumerate(prefix.kv):  # expanded views; the forward copies them once, as a cat
            cache.update(keys.expand(n, -1, -1, -1), values.expand(n, -1, -1, -1), layer)
        lengths = torch.tensor([len(completions[i]) for i in segment], device=device)
        attention = torch.ones((n, P + k), dtype=torch.long, device=device)
        attention[:, P:] = (torch.arange(k, device=device)[None, :] < lengths[:, None]).long()
        out2 = body(
            input_ids=ids[index, :k],
            attention_mask=attention,
            position_ids=(P + torch.arange(k, device=device))[None, :].expand(n, k),
            use_cache=True,
            **{cache_keyword(body): cache},
        )
        # the hidden state before token j predicts it: the prompt's last state, then the completion's own states
        hidden = torch.cat([first.expand(n, 1, -1), out2.last_hidden_state[:, :-1, :]], dim=1)  # (n, k, H)
        r, c = where.nonzero(as_tuple=True)  # row-major, the order of hidden[where]
        pieces.append(hidden[where])
        rows.append(index[r])
        cols.append(c)
    at = (torch.cat(rows), torch.cat(cols))
    logp_flat, entropy_flat = linear_logprobs(torch.cat(pieces), _head(model), ids[at], temperature, with_entropy)
    logp = torch.zeros((G, K), dtype=logp_flat.dtype, device=device).index_put(at, logp_flat)
    entropy = torch.zeros((G, K), dtype=entropy_flat.dtype, device=device)
    if with_entropy:
        entropy = entropy.index_put(at, entropy_flat.detach())
    with torch.no_grad():
        first_logits = (first @ _head(model).T).float() / temperature
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
    cpu = "cpu"  # built here, moved to the model's device by the pass that runs it (`token_logprobs`)
    input_ids = torch.full((B, L), pad, dtype=torch.long, device=cpu)
    attention = torch.zeros((B, L), dtype=torch.long, device=cpu)
    targets = torch.full((B, K), pad, dtype=torch.long, device=cpu)
    mask = torch.zeros((B, K), dtype=torch.float32, device=cpu)
    for i, (p, c, m) in enumerate(zip(prompts, completions, masks)):
        seq = p + c
        input_ids[i, L - len(seq) :] = torch.tensor(seq, device=cpu)
        attention[i, L - len(seq) :] = 1
        if c:
            targets[i, K - len(c) :] = torch.tensor(c, device=cpu)
            mask[i, K - len(c) :] = torch.tensor(m, dtype=torch.float32, device=cpu)
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
