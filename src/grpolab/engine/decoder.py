"""A decoder for rollouts: the model's own layers driven over a ragged KV cache, for Llama-family models.

Departure from `model.forward` + transformers' DynamicCache, measured on this CPU (benchmarks/step_cost.py):
- DynamicCache appends with `torch.cat`, copying every layer's keys and values at every decoded token, and the SDPA
  path repeats grouped K/V heads (`repeat_kv`, 3x for SmolLM2) before a masked attention call. At 16 episodes and a
  500-token context that doubled the cost of a decode step. Here each layer's K/V live in a preallocated buffer
  (rows, kv_heads, capacity, head_dim) written in place, and the query heads that share a K/V head are folded onto
  the query axis, so attention reads each key once and copies nothing.
- Rows are ragged: row i holds its tokens in columns [0, length_i) and position ids equal column indices. A forward
  call feeds a rectangular chunk to some rows (one token per row while decoding; a tool response to the rows that
  just made a call); rows that finish leave the buffer (`keep`), so no compute is spent on padding.
- Only the hidden state of each row's last fed token reaches the LM head: a chunk never materialises (n, vocab)
  logits.

The layers are the model's own: norms and rotary embedding are its modules; the projections are its effective
weights fused per layer (`grpolab.engine.fused`: LoRA merged, q/k/v as one matmul, gate/up as one), taken when the
decoder is built, so `disable_adapter()` around the build gives the reference. A model whose projections cannot be
fused (the int8 rollout copy) runs them through its modules, adapters applied unmerged as in training. Supported:
llama, mistral, qwen2, qwen3 (q/k norms) and smollm3 (layers without RoPE); `supports(model)` says whether a model
can use it, else the rollout falls back to decoding one episode at a time through `model.forward`.

The decoder calls its modules' `forward` directly, so no module hook runs. A sharded model's hooks (an FSDP unit's,
ZeRO-3's) would gather and free weights at every call: a collective per token, which processes decoding different
numbers of tokens never match, and FSDP2 takes the first unit called as its root. The weights are instead made
whole once per rollout (`grpolab.engine.gather.full_parameters`, which `run_episodes` enters), and a decoder built
on shards refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import inf
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from grpolab.engine.fused import FusedLayer, PackedLinear, effective_weight, fuse_layers
from grpolab.engine.gather import sharded_parameter
from grpolab.errors import UserError

SUPPORTED = {"llama", "mistral", "qwen2", "qwen3", "smollm3"}


def base_model(model: Any) -> Any:
    """The causal LM under a peft wrapper (its modules carry the adapters)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def supports(model: Any) -> bool:
    """Whether the fast decoder can drive this model (a Llama-family architecture without sliding windows)."""
    lm = base_model(model)
    cfg = getattr(lm, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in SUPPORTED:
        return False
    if getattr(cfg, "sliding_window", None) is not None and getattr(cfg, "use_sliding_window", True):
        return False  # a window in force (mistral's, unless null): attention here sees every earlier token
    if getattr(cfg, "use_sliding_window", False) or getattr(cfg, "layer_types", None) not in (None, []):
        types = set(getattr(cfg, "layer_types", None) or [])
        if types - {"full_attention"}:
            return False
    inner = getattr(lm, "model", None)
    return inner is not None and hasattr(inner, "layers") and hasattr(lm, "lm_head")


class RaggedKV:
    """Per-layer key/value buffers (rows, kv_heads, capacity, head_dim) and each row's filled length."""

    def __init__(self, layers: int, rows: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: Any):
        self.shape = (kv_heads, head_dim)
        self.dtype, self.device = dtype, device
        self.capacity = 0
        self.keys: list[Tensor] = [torch.empty(rows, kv_heads, 0, head_dim, dtype=dtype, device=device)] * layers
        self.values: list[Tensor] = list(self.keys)
        self.lengths = torch.zeros(rows, dtype=torch.long, device=device)

    @property
    def rows(self) -> int:
        return int(self.lengths.shape[0])

    def reserve(self, needed: int) -> None:
        """Make room for `needed` columns (capacity grows by doubling, so appends are amortised)."""
        if needed <= self.capacity:
            return
        capacity = max(needed, 2 * self.capacity, 64)
        heads, dim = self.shape
        for i, (k, v) in enumerate(zip(self.keys, self.values)):
            # zeros, not empty: masked columns get weight 0 in attention, and 0 * NaN from stale memory is NaN
            grown_k = torch.zeros(self.rows, heads, capacity, dim, dtype=self.dtype, device=self.device)
            grown_v = torch.zeros_like(grown_k)
            grown_k[:, :, : self.capacity] = k
            grown_v[:, :, : self.capacity] = v
            self.keys[i], self.values[i] = grown_k, grown_v
        self.capacity = capacity

    def keep(self, rows: Tensor) -> None:
        """Keep these rows, in this order (rows that finished leave; a row may be repeated to fork a group)."""
        rows = rows.to(dtype=torch.long, device=self.lengths.device)
        used = int(self.lengths[rows].max()) if len(rows) else 0
        self.keys = [k.index_select(0, rows)[:, :, : max(used, 1)].contiguous() for k in self.keys]
        self.values = [v.index_select(0, rows)[:, :, : max(used, 1)].contiguous() for v in self.values]
        self.capacity = max(used, 1)
        self.lengths = self.lengths.index_select(0, rows)


@dataclass
class _Chunk:
    rows: Tensor | None
    """Buffer rows fed in this call (None: every row, in buffer order)."""
    cols: Tensor
    """(R, n) the column (= position id) of each fed token."""
    mask: Tensor | None
    """(R, 1, groups * n, T) which columns each query may attend to (chunks of several tokens per row)."""
    bias: Tensor | None
    """(R, 1, 1, T) 0 on each row's filled columns, -inf past them (one token per row: `direct` attention)."""
    used: int
    """T: columns attention looks at."""


class FastDecoder:
    """Feeds token chunks to ragged rows of a `RaggedKV` through the model's own layers.

    The weights are read when the decoder is built (`fused`): build one per rollout, after the update."""

    def __init__(self, model: Any, fused: bool = True, packed: bool = True, direct: bool = True):
        if (name := sharded_parameter(model)) is not None:
            raise UserError(
                f"the fast decoder got a sharded model (ZeRO-3 or FSDP): parameter {name!r} is only this process's "
                "shard",
                "build the decoder inside `with grpolab.engine.gather.full_parameters(model):`, as run_episodes does",
            )
        self.model = model
        self.direct = direct
        """Attention for one token per row as two batched matmuls instead of SDPA (see `_attention`)."""
        lm = base_model(model)
        self.lm, self.inner, self.cfg = lm, lm.model, lm.config
        self.heads = self.cfg.num_attention_heads
        self.kv_heads = getattr(self.cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(self.cfg, "head_dim", None) or self.cfg.hidden_size // self.heads
        self.groups = self.heads // self.kv_heads
        self.scaling = self.head_dim**-0.5
        no_rope = getattr(self.cfg, "no_rope_layers", None)  # smollm3: 1 = this layer uses RoPE
        self.rope = [bool(no_rope[i]) if no_rope else True for i in range(len(self.inner.layers))]
        self.fused: list[FusedLayer] | None = fuse_layers(self.inner.layers, packed) if fused else None
        head = effective_weight(lm.lm_head) if self.fused is not None else None
        self.head: Any = lm.lm_head.forward if head is None else PackedLinear(head[0], head[1], packed)

    @property
    def param(self) -> Tensor:
        return self.inner.embed_tokens.weight

    def new_cache(self, rows: int) -> RaggedKV:
        p = self.param
        return RaggedKV(len(self.inner.layers), rows, self.kv_heads, self.head_dim, p.dtype, p.device)

    def _chunk(self, kv: RaggedKV, rows: Tensor | None, n: int) -> _Chunk:
        start = kv.lengths if rows is None else kv.lengths[rows]  # (R,)
        cols = start[:, None] + torch.arange(n, device=start.device)[None, :]  # (R, n)
        used = int(cols.max()) + 1
        kv.reserve(used)
        allowed = torch.arange(used, device=start.device)[None, None, :] <= cols[:, :, None]  # (R, n, T)
        if n == 1 and self.direct:
            bias = torch.zeros(allowed.shape, dtype=self.param.dtype, device=start.device).masked_fill_(~allowed, -inf)
            return _Chunk(rows, cols, None, bias[:, None], used)
        mask = allowed[:, None, None].expand(-1, 1, self.groups, n, used).reshape(len(cols), 1, self.groups * n, used)
        return _Chunk(rows, cols, mask, None, used)

    @torch.no_grad()
    def feed(self, kv: RaggedKV, ids: Tensor, n_valid: Tensor, rows: Tensor | None = None) -> Tensor:
        """Feed `ids` (R, n) to `rows` (default: all rows); row r's first `n_valid[r]` tokens count.

        Returns the final hidden state at each row's last valid token, (R, hidden)."""
        R, n = ids.shape
        chunk = self._chunk(kv, rows, n)
        x = self.inner.embed_tokens.forward(ids)  # (R, n, hidden)
        cos, sin = self.inner.rotary_emb.forward(x, chunk.cols)
        for i, layer in enumerate(self.inner.layers):
            h = layer.input_layernorm.forward(x)
            w = self.fused[i] if self.fused is not None else None
            x = x + self._attention(layer.self_attn, i, h, kv, chunk, cos, sin, w)
            h = layer.post_attention_layernorm.forward(x)
            if w is None:
                x = x + layer.mlp.forward(h)
            else:
                gate, up = w.gate_up(h).chunk(2, dim=-1)
                x = x + w.down(layer.mlp.act_fn(gate) * up)
        last = x[torch.arange(R, device=x.device), n_valid - 1]  # (R, hidden)
        if rows is None:
            kv.lengths += n_valid
        else:
            kv.lengths[rows] += n_valid
        return self.inner.norm.forward(last)

    def logits(self, hidden: Tensor) -> Tensor:
        """(R, hidden) -> (R, vocab) in fp32."""
        return self.head(hidden).float()

    def _attention(
        self,
        attn: Any,
        layer: int,
        h: Tensor,
        kv: RaggedKV,
        chunk: _Chunk,
        cos: Tensor,
        sin: Tensor,
        w: FusedLayer | None,
    ) -> Tensor:
        R, n, _ = h.shape
        if w is None:
            q, k, v = attn.q_proj.forward(h), attn.k_proj.forward(h), attn.v_proj.forward(h)
        else:
            q, k, v = w.qkv(h).split(w.splits, dim=-1)
        q = q.reshape(R, n, self.heads, self.head_dim)
        k = k.reshape(R, n, self.kv_heads, self.head_dim)
        v = v.reshape(R, n, self.kv_heads, self.head_dim)
        if hasattr(attn, "q_norm"):  # qwen3
            q, k = attn.q_norm.forward(q), attn.k_norm.forward(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (R, heads, n, d)
        if self.rope[layer]:
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        keys, values = kv.keys[layer], kv.values[layer]
        select = torch.arange(R, device=h.device) if chunk.rows is None else chunk.rows
        keys[select[:, None], :, chunk.cols] = k.transpose(1, 2)  # (R, n, kv_heads, d) into (R, n) columns
        values[select[:, None], :, chunk.cols] = v.transpose(1, 2)
        if chunk.rows is None:
            K, V = keys[:, :, : chunk.used], values[:, :, : chunk.used]  # views: no copy
        else:
            K, V = keys[chunk.rows, :, : chunk.used], values[chunk.rows, :, : chunk.used]
        # the query heads sharing a K/V head become extra query rows of that head: (R, kv_heads, groups * n, d)
        qf = q.reshape(R, self.kv_heads, self.groups * n, self.head_dim)
        if chunk.bias is not None:
            # one query per row and head: the work is reading each key and value once, which two batched matmuls
            # do without flash attention's tiling (benchmarks/decode_step.py times both: 1.02x on an AVX2 EPYC)
            scores = torch.matmul(qf, K.transpose(-1, -2)).mul_(self.scaling).add_(chunk.bias)  # (R, kv, groups, T)
            out = torch.matmul(torch.softmax(scores, dim=-1), V)
        else:
            out = F.scaled_dot_product_attention(qf, K, V, attn_mask=chunk.mask, scale=self.scaling)
        out = out.view(R, self.heads, n, self.head_dim).transpose(1, 2).reshape(R, n, -1)
        return attn.o_proj.forward(out) if w is None else w.o(out)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE as transformers applies it (rotate_half convention); cos/sin (R, n, d) broadcast over heads."""
    cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
