"""One decode step of the demo's rollout, alone: each decoder variant against the bandwidth bound, and its op profile.

    .venv/bin/python benchmarks/decode_step.py [--rows 16] [--context 400] [--steps 30] [--model smollm2]

The demo decodes about 16 rows at a time over a 300-500 token context (benchmarks/step_cost.py). A step reads every
weight once and every live row's keys and values once; the bound is those bytes over this machine's read bandwidth
(measured here, as in step_cost.py). Variants, timed in one process and interleaved (round-robin, best of rounds),
so their ratio is measured on the same machine state:
- `modules`: the decoder driving peft's modules (7 base matmuls + 7 LoRA pairs per layer);
- `fused`: LoRA merged into q/k/v, gate/up and down matrices for the rollout (`grpolab.engine.fused`),
  including the time to build the fused weights once per rollout, spread over a rollout's decode steps;
- `packed_sdpa`: the fused matrices and the LM head reordered once into oneDNN's layout (`PackedLinear`, the
  rollout's default on CPUs with oneDNN), its build time counted the same way, attention through SDPA;
- `packed`: the same with the one-token attention as two batched matmuls (`FastDecoder.direct`, the default).
Results: benchmarks/results/decode_step.json.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch
from common import bandwidth, command_line, write_results

from grpolab.config import load_config
from grpolab.engine.decoder import FastDecoder
from grpolab.engine.policy import build_policy

ROLLOUT_STEPS = 160
"""Decode steps of one demo rollout (max_new_tokens): the fused weights are built once per rollout."""


def step_bytes(model: Any, rows: int, context: int) -> float:
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = lm.config
    weights = sum(p.numel() for n, p in lm.named_parameters() if "lora_" not in n) * 4
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return weights + rows * context * cfg.num_hidden_layers * 2 * kv_heads * head_dim * 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--context", type=int, default=400)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default="smollm2")
    args = ap.parse_args()
    cfg = load_config(None, {"model": args.model})
    model, _, _ = build_policy(cfg)
    model.eval()
    bw = bandwidth()
    bound_s = step_bytes(model, args.rows, args.context) / (bw * 1e9)
    R = args.rows
    ids = torch.randint(0, 1000, (R, args.context))
    one = torch.randint(0, 1000, (R, 1))
    ones = torch.ones(R, dtype=torch.long)

    def build(variant: str) -> FastDecoder:
        packed = variant.startswith("packed")
        return FastDecoder(model, fused=variant != "modules", packed=packed, direct=variant != "packed_sdpa")

    names = ("modules", "fused", "packed_sdpa", "packed")
    build_s = {v: 0.0 if v == "modules" else float("inf") for v in names}
    for _ in range(3):
        for v in names[1:]:
            start = time.perf_counter()
            build(v)
            build_s[v] = min(build_s[v], time.perf_counter() - start)
    decoders = {v: build(v) for v in names}
    caches = {}
    with torch.no_grad():
        for v, dec in decoders.items():
            kv = dec.new_cache(R)
            dec.feed(kv, ids, torch.full((R,), args.context))
            kv.reserve(args.context + (args.rounds + 1) * (args.steps + 2))
            caches[v] = kv
        best = {v: float("inf") for v in decoders}
        for _ in range(args.rounds):
            for v, dec in decoders.items():
                dec.logits(dec.feed(caches[v], one, ones))  # warm
                start = time.perf_counter()
                for _ in range(args.steps):
                    dec.logits(dec.feed(caches[v], one, ones))
                best[v] = min(best[v], (time.perf_counter() - start) / args.steps)
        profiles = {}
        for v, dec in decoders.items():
            with torch.profiler.profile() as prof:
                for _ in range(5):
                    dec.logits(dec.feed(caches[v], one, ones))
            rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:8]
            total = sum(e.self_cpu_time_total for e in prof.key_averages())
            profiles[v] = [
                {"op": e.key, "share": round(e.self_cpu_time_total / total, 3), "calls": e.count} for e in rows
            ]
    variants = {}
    for v, seconds in best.items():
        per_step = seconds + build_s[v] / ROLLOUT_STEPS
        variants[v] = {
            "ms_per_step": round(per_step * 1000, 2),
            "fraction_of_bound": round(bound_s / per_step, 3),
            "top_ops": profiles[v],
        }
    result = {
        "model": args.model,
        "rows": R,
        "context": args.context,
        "threads": torch.get_num_threads(),
        "bandwidth_gbs": round(bw, 2),
        "bound_ms": round(bound_s * 1000, 2),
        "fused_build_ms": round(build_s["fused"] * 1000, 1),
        "packed_build_ms": round(build_s["packed"] * 1000, 1),
        "variants": variants,
        "speedup_fused": round(variants["modules"]["ms_per_step"] / variants["fused"]["ms_per_step"], 2),
        "speedup_packed": round(variants["fused"]["ms_per_step"] / variants["packed_sdpa"]["ms_per_step"], 2),
        "speedup_direct_attention": round(
            variants["packed_sdpa"]["ms_per_step"] / variants["packed"]["ms_per_step"], 2
        ),
        "date": time.strftime("%Y-%m-%d"),
        "command": command_line("decode_step.py", args),
    }
    write_results("decode_step", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
