"""Where bf16 autocast moves the SFT gradient: the question behind `precision = auto` keeping fp32 on a CPU.

    .venv/bin/python benchmarks/bf16_gradients.py [--after 1 10] [--transcripts 4]

SFT seeding under bf16 autocast learned less than fp32 from the same seeds (seeding_precision.json). This takes the
demo's policy (SmolLM2 + its LoRA) after N fp32 SFT steps and computes the gradient of one SFT batch's loss
(`--transcripts` reference transcripts, the seeding's loss) in fp32 and under bf16 autocast, then again with one
suspect at a time put back in fp32:
    head        the LM head's matmuls (`engine.logprobs.LinearLogProbs`); its softmax is fp32 in every case
    lora        the LoRA branch of every adapted layer (lora_A, lora_B matmuls), the base layer still bf16
For each: the relative error |g_bf16 - g_fp32| / |g_fp32| over all LoRA parameters, their cosine, the share of
elements whose sign agrees (the direction of Adam's first step), and the relative error per band of 10 layers.
Writes benchmarks/results/bf16_gradients.json.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from common import DEMO, write_results

import grpolab.engine.logprobs as logprobs
from grpolab.config import load_config
from grpolab.engine.logprobs import make_batch, token_logprobs
from grpolab.engine.policy import build_policy
from grpolab.engine.precision import update_autocast
from grpolab.engine.sft import reference_tokens, sft_warm_start
from grpolab.envs import env_for


@contextmanager
def fp32_head() -> Any:
    original = logprobs.compute_dtype
    logprobs.compute_dtype = lambda device_type, default: torch.float32
    try:
        yield
    finally:
        logprobs.compute_dtype = original


@contextmanager
def fp32_lora(model: Any) -> Any:
    adapted = [m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and re.search(r"lora_[AB]\.", n)]

    def in_fp32(m: torch.nn.Linear) -> Callable[[torch.Tensor], torch.Tensor]:
        def forward(x: torch.Tensor) -> torch.Tensor:
            with torch.autocast(x.device.type, enabled=False):
                return F.linear(x.float(), m.weight)

        return forward

    for m in adapted:
        m.forward = in_fp32(m)
    try:
        yield
    finally:
        for m in adapted:
            del m.forward  # back to the class's own


def gradient(model: Any, batch: list[tuple[list[int], list[int], list[int]]], pad: int, precision: str) -> Any:
    """The LoRA parameters' gradient of the SFT loss of `batch` (the seeding's loss), by name, flattened."""
    model.zero_grad(set_to_none=True)
    model.train()
    total = sum(sum(m) for _, _, m in batch)
    for prompt, completion, mask in batch:
        b = make_batch([prompt], [completion], [mask], pad)
        with update_autocast(precision, "cpu"):
            logp = token_logprobs(model, b)
        (-(logp * b.mask).sum() / total).backward()
    return {n: p.grad.detach().flatten().clone() for n, p in model.named_parameters() if p.requires_grad}


def agreement(exact: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> dict[str, Any]:
    a, b = torch.cat(list(exact.values())), torch.cat([other[n] for n in exact])
    bands: dict[str, list[str]] = {}
    for n in exact:
        layer = int(re.search(r"layers\.(\d+)\.", n).group(1))  # type: ignore[union-attr]
        bands.setdefault(f"layers {layer // 10 * 10}-{layer // 10 * 10 + 9}", []).append(n)
    by_band = {}
    for band, names in bands.items():
        x, y = torch.cat([exact[n] for n in names]), torch.cat([other[n] for n in names])
        by_band[band] = round(float((x - y).norm() / x.norm()), 4)
    big = a.abs() > a.abs().median()
    return {
        "relative_error": round(float((a - b).norm() / a.norm()), 4),
        "cosine": round(float(F.cosine_similarity(a, b, 0)), 5),
        "sign_agreement": round(float((a.sign() == b.sign()).float().mean()), 4),
        "sign_agreement_above_median": round(float((a[big].sign() == b[big].sign()).float().mean()), 4),
        "relative_error_by_band": by_band,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--after", type=int, nargs="+", default=[1, 10], help="fp32 SFT steps before each measurement")
    ap.add_argument("--transcripts", type=int, default=4, help="reference transcripts in the measured batch")
    args = ap.parse_args()
    start = time.perf_counter()
    cfg = load_config(DEMO)
    env = env_for(cfg)
    rows = []
    for steps in args.after:
        model, tokenizer, _ = build_policy(cfg)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        losses = sft_warm_start(
            model, tokenizer, env, steps, cfg.train.sft_batch_size, cfg.train.sft_learning_rate, cfg.seed
        )
        tasks = env.tasks("heldout")[: args.transcripts]  # not the seeding's own tasks
        batch = [reference_tokens(tokenizer, env, t) for t in tasks]
        exact = gradient(model, batch, pad, "fp32")
        again = gradient(model, batch, pad, "fp32")
        with fp32_head():
            head = gradient(model, batch, pad, "bf16")
        with fp32_lora(model):
            lora = gradient(model, batch, pad, "bf16")
        row = {
            "sft_steps": steps,
            "sft_loss": round(losses[-1], 4),
            "fp32_again": agreement(exact, again)["relative_error"],
            "bf16": agreement(exact, gradient(model, batch, pad, "bf16")),
            "bf16_fp32_head": agreement(exact, head),
            "bf16_fp32_lora": agreement(exact, lora),
        }
        print({k: (v if not isinstance(v, dict) else v["relative_error"]) for k, v in row.items()}, flush=True)
        rows.append(row)
    result = {
        "command": "python benchmarks/bf16_gradients.py "
        + " ".join(["--after", *map(str, args.after)])
        + f" --transcripts {args.transcripts}",
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
        "seconds": round(time.perf_counter() - start, 1),
    }
    print(write_results("bf16_gradients", result))


if __name__ == "__main__":
    main()
