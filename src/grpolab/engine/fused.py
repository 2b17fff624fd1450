"""Rollout weights: each decoder layer's projections as three matrices, LoRA merged in, for one decode step.

A decode step at the demo's batch (about 16 rows) reads every weight once: it is bound by memory bandwidth and, on a
135M model, by the Python and dispatch cost of each op. Through peft's modules a layer is 7 base matmuls plus 7
LoRA pairs (A, B, scale, add): 35 ops, about a third of the step's time, none of it bandwidth. Here a layer is
3 matmuls: q, k and v as one (q+k+v, hidden) matrix, gate and up as one (2 x intermediate, hidden) matrix, and down.
o_proj stays alone (its input is the attention output). Every matrix is the layer's effective weight: the base
weight plus each active adapter's `get_delta_weight` (peft's own merge arithmetic), or the base weight alone when
adapters are disabled (the reference) or already merged.

Same function as the modules, summed in another order: log-probs agree to fp32 rounding (tests check 1e-4).
Built for one rollout and dropped after it (the policy changes every step; building costs one pass over the
weights, about 0.1 s for SmolLM2-135M, against 10-20 s of decoding). Models whose projections are not plain or
LoRA linear layers (the int8 rollout copy, DoRA and other variants) return None and decode through their modules.

On a CPU with oneDNN each matrix is also reordered once into oneDNN's blocked layout (`PackedLinear`): a decode
step multiplies 16-odd rows by every weight, and a plain `F.linear` then re-packs the weight on every call. Measured
on this 2-core CPU (benchmarks/decode_step.py, 16 rows x 400 tokens of context): one decode step 161 -> 120 ms,
packing counted. Same products, summed in another order (fp32 rounding, ~1e-6).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class PackedLinear:
    """y = x @ weight.T + bias with the weight reordered once for oneDNN (on CPUs that have it), else `F.linear`."""

    def __init__(self, weight: Tensor, bias: Tensor | None = None, packed: bool = True):
        self.bias = bias
        self.packed = packed and weight.device.type == "cpu" and weight.dtype == torch.float32 and _onednn()
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight, 16) if self.packed else weight

    def __call__(self, x: Tensor) -> Tensor:
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


def _onednn() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


@dataclass
class FusedLayer:
    qkv: PackedLinear  # (q + k + v, hidden)
    splits: tuple[int, int, int]
    o: PackedLinear  # (hidden, q)
    gate_up: PackedLinear  # (2 x intermediate, hidden)
    down: PackedLinear  # (hidden, intermediate)


def effective_weight(module: nn.Module) -> tuple[Tensor, Tensor | None] | None:
    """(weight, bias) a linear layer applies, LoRA adapters merged in; None when it is neither plain nor LoRA."""
    if type(module) is nn.Linear:
        return module.weight.detach(), None if module.bias is None else module.bias.detach()
    base = getattr(module, "base_layer", None)
    if type(base) is not nn.Linear or not hasattr(module, "get_delta_weight"):
        return None
    weight = base.weight.detach()
    bias = None if base.bias is None else base.bias.detach()
    if module.disable_adapters or module.merged:
        return weight, bias
    variants = getattr(module, "lora_variant", {})
    active = [a for a in module.active_adapters if a in module.lora_A.keys()]
    if any(a in variants for a in active) or any(getattr(module, "lora_bias", {}).get(a) for a in active):
        return None
    for adapter in active:
        weight = weight + module.get_delta_weight(adapter).detach()
    return weight.to(base.weight.dtype), bias  # fp32 adapters on bf16 weights: the layer's input is in bf16


@torch.no_grad()
def fuse_layers(layers: Any, packed: bool = True) -> list[FusedLayer] | None:
    """The fused weights of Llama-family decoder layers, or None when any projection cannot be fused."""
    fused = []
    for layer in layers:
        attn, mlp = layer.self_attn, layer.mlp
        parts = [effective_weight(m) for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)]
        mlp_parts = [effective_weight(m) for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj)]
        if any(p is None for p in parts + mlp_parts) or any(p[1] is not None for p in mlp_parts):  # type: ignore[index]
            return None
        (q, qb), (k, kb), (v, vb), (o, ob) = parts  # type: ignore[misc]
        (gate, _), (up, _), (down, _) = mlp_parts  # type: ignore[misc]
        qkv_bias = None
        if any(b is not None for b in (qb, kb, vb)):
            qkv_bias = torch.cat([b if b is not None else w.new_zeros(len(w)) for w, b in ((q, qb), (k, kb), (v, vb))])
        fused.append(
            FusedLayer(
                qkv=PackedLinear(torch.cat([q, k, v]), qkv_bias, packed),
                splits=(len(q), len(k), len(v)),
                o=PackedLinear(o.contiguous(), ob, packed),
                gate_up=PackedLinear(torch.cat([gate, up]), None, packed),
                down=PackedLinear(down.contiguous(), None, packed),
            )
        )
    return fused
