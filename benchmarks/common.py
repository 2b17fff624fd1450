"""What the benchmarks share: this machine's roofs (matmul peak per precision with the best kernel it has, read
bandwidth), measured once per process.

The FLOP roof is the best rate any kernel reaches here, so "% of peak" means what it says: square `torch.mm`, the
model's own layer shapes through `torch.mm`, and the same shapes through oneDNN's packed linear (the layout the
rollout decodes with, `grpolab.engine.fused.PackedLinear`), at a decode's 16 rows and at training's thousands. bf16
is timed only on a CPU with native bf16 dot products (`grpolab.engine.precision.native_bf16`): elsewhere it is
emulated and no roof of it is worth measuring.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch

from grpolab.engine.precision import native_bf16

SMOLLM2_SHAPES = {"qkv": (576, 960), "o": (576, 576), "gate_up": (576, 3072), "down": (1536, 576)}
"""(in, out) of SmolLM2-135M's fused projections: the shapes its decode and update multiply by."""


def best_seconds(fn: Callable[[], Any], repeats: int = 5) -> float:
    fn()  # warm-up: oneDNN picks and caches its kernel on the first call
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bandwidth(megabytes: int = 512, repeats: int = 5) -> float:
    """Best GB/s reading a large tensor once (a decode step reads every weight once: the bandwidth roof)."""
    x = torch.empty(megabytes * 1024 * 1024 // 4)
    x.uniform_()
    return x.numel() * 4 / best_seconds(lambda: x.sum(), repeats) / 1e9


def _packed(x: torch.Tensor, w: torch.Tensor) -> Callable[[], Any]:
    packed = torch.ops.mkldnn._reorder_linear_weight(w, len(x))
    return lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


def kernel_rates(dtype: torch.dtype, rows: tuple[int, ...] = (16, 256, 4096)) -> dict[str, float]:
    """GFLOP/s of every kernel at every shape in `dtype`: `mm 2048`, `mm ROWSxIN->OUT`, `packed ROWSxIN->OUT`."""
    gen = torch.Generator().manual_seed(0)
    rates: dict[str, float] = {}
    a, b = torch.randn(2048, 2048, generator=gen).to(dtype), torch.randn(2048, 2048, generator=gen).to(dtype)
    rates["mm 2048"] = 2 * 2048**3 / best_seconds(lambda: a @ b) / 1e9
    onednn = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    for m in rows:
        for fan_in, fan_out in SMOLLM2_SHAPES.values():
            x = torch.randn(m, fan_in, generator=gen).to(dtype)
            w = torch.randn(fan_out, fan_in, generator=gen).to(dtype)
            flops = 2 * m * fan_in * fan_out
            shape = f"{m}x{fan_in}->{fan_out}"
            rates[f"mm {shape}"] = flops / best_seconds(lambda x=x, w=w: x @ w.T) / 1e9
            if onednn:
                rates[f"packed {shape}"] = flops / best_seconds(_packed(x, w)) / 1e9
    return {k: round(v, 1) for k, v in rates.items()}


@functools.cache
def matmul_peaks() -> dict[str, Any]:
    """{"fp32": roof, "bf16": roof or None, "fp32_best": kernel, ..., "kernels": {precision: {kernel: GFLOP/s}}}."""
    out: dict[str, Any] = {"kernels": {}}
    precisions = {"fp32": torch.float32}
    if native_bf16() is not None:
        precisions["bf16"] = torch.bfloat16
    for name, dtype in precisions.items():
        rates = kernel_rates(dtype)
        best = max(rates, key=rates.__getitem__)
        out[name], out[f"{name}_best"], out["kernels"][name] = rates[best], best, rates
    out.setdefault("bf16", None)
    return out
