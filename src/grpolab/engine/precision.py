"""The precision of the update passes, chosen per host by measurement, never by assumption.

The GRPO update (forward + backward) and the reference pass run under autocast in `train.precision`, the SFT warm
start in `train.sft_precision`; weights, LoRA adapters, optimizer state, the loss and the log-probs stay fp32 (the
LM head's log-softmax is taken in fp32 on logits computed in the chosen dtype: `engine.logprobs.LinearLogProbs`).
Rollouts and evaluation decode in fp32 whatever is chosen here.

The warm start's `auto` is fp32 on a CPU (`choose_sft_precision`): SFT seeding under bf16 autocast reached lower
held-out success than fp32 from the same seeds (benchmarks/results/seeding_precision.json, on an Intel Xeon with
AMX and avx512_bf16; docs/results.md has the table), although the log-probs' agreement
below passed there. No short check at the start of a run was found that predicts it (tried: the cosine of the bf16
and fp32 gradients of a reference transcript's loss, and the loss fall of 3 AdamW steps of a fresh LoRA policy in
each; neither separated them). Why it learns less is not the LoRA path, the head's dtype or underflow
(`benchmarks/bf16_gradients.py`, 2026-12-07): after one fp32 SFT step the bf16 gradient of a batch's loss is 26% off
the fp32 one (cosine 0.98), and putting the LM head or the LoRA branch back in fp32 leaves it there (26%, 25%); its
error is as large in the last 10 layers (19%) as in the first (28%), so it enters at the top, through the logits the
bf16 body computes. After 10 steps it is 7%: the early steps, which seeding is made of, are the ones bf16 moves most.

The update's `auto` keeps fp32 on a CPU too while `CPU_BF16_LEARNS_AS_FP32` is False (the GRPO evidence:
benchmarks/demo_precision.py, docs/decisions.md). Where it is allowed, the checks below decide; all three must hold:
- the CPU has native bf16 dot products (the `avx512_bf16` or `amx_bf16` flag): without them a bf16 matmul is
  emulated, and on an AVX2-only AMD EPYC (2026-12-03) `torch.mm` 1024^3 ran at 0.84 GFLOP/s in bf16 against 149 in
  fp32, so the slow dtype is never timed there;
- a forward + backward of the model on the end of a reference transcript (`update_seconds`) beats fp32 by
  BF16_MIN_SPEEDUP: the update's own pass, since a bare matmul (2.2x on an AVX512-BF16 EPYC) leaves out autocast's
  casts and the attention and norms in bf16 (the demo's whole update: 1.49x at best, benchmarks/update_precision.py);
- the model's log-probs on a fixed sequence under bf16 autocast agree with fp32 within BF16_MAX_K3 nats per token
  (k3 estimator; weight-only int8 rollouts measured 0.0026 on the demo and were accepted, bf16 0.0008 on an
  AVX512-BF16 EPYC).
On CUDA, bf16 wherever the device supports it. `fp32` and `bf16` force the choice (bf16 is then used even where
it is slow: the user asked for it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from grpolab.engine.grpo import sampler_mismatch

Precision = Literal["fp32", "bf16"]
Requested = Literal["auto", "fp32", "bf16"]

CPU_BF16_LEARNS_AS_FP32 = False
"""Whether `auto` may pick bf16 on a CPU at all (see the module docstring: measured not to, here)."""
BF16_MIN_SPEEDUP = 1.25
"""bf16 must beat fp32 by this factor on a forward + backward of the model (`update_seconds`) to be chosen."""
BF16_MAX_K3 = 0.005
"""Most k3 KL per token between the model's bf16-autocast and fp32 log-probs for bf16 to be chosen."""
PROBE_TOKENS = 256
"""Tokens of the timed forward + backward (the end of a reference transcript): the update's calls run 100-800
positions each in the demo; 256 keeps the probe's four passes near 4 s on SmolLM2-135M on 2 cores."""
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
SEEDING_EVIDENCE = (
    "bf16 SFT seeding learned less than fp32 from the same seeds (held-out success -17.5 points over 4 seeds, "
    "benchmarks/results/seeding_precision.json)"
)


@dataclass(frozen=True)
class PrecisionChoice:
    """What the update runs in, why, and the figures the choice rests on (written to the run's precision.json)."""

    requested: Requested
    chosen: Precision
    why: str
    measured: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_flags(path: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags (Linux); empty where /proc/cpuinfo is not there to read."""
    try:
        text = path.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags") and ":" in line:
            return set(line.split(":", 1)[1].split())
    return set()


def native_bf16(flags: set[str] | None = None) -> str | None:
    """The flag that gives this CPU native bf16 dot products, or None."""
    flags = cpu_flags() if flags is None else flags
    return next((f for f in NATIVE_BF16_FLAGS if f in flags), None)


def update_seconds(model: Any, ids: list[int]) -> dict[str, float]:
    """Seconds of one forward + backward of a transcript's log-probs in fp32 and under bf16 autocast: the update's
    own pass, timed on the model, since a matmul's rate leaves out what autocast adds (casts, attention and norms
    in bf16). The backward goes to the input embeddings with every weight frozen, as it goes through the frozen
    base under LoRA; gradients are dropped and every parameter's `requires_grad` is put back."""
    device = next(model.parameters()).device
    seq = torch.tensor([ids], device=device)
    targets = seq[0, 1:]
    grads = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)

    def pass_(precision: str) -> float:
        start = time.perf_counter()
        with update_autocast(precision, device.type):
            embeds = model.get_input_embeddings()(seq).detach().requires_grad_()
            logits = model(inputs_embeds=embeds, use_cache=False).logits[0, :-1].float()
            loss = torch.log_softmax(logits, -1).gather(-1, targets[:, None]).sum()
            torch.autograd.grad(loss, embeds)
        return time.perf_counter() - start

    try:
        pass_("bf16")  # warm-up: oneDNN picks and caches its kernels on the first call of each shape and dtype
        pass_("fp32")
        return {"fp32_update_s": round(pass_("fp32"), 3), "bf16_update_s": round(pass_("bf16"), 3)}
    finally:
        for p, g in zip(model.parameters(), grads):
            p.requires_grad_(g)


@torch.no_grad()
def bf16_agreement(model: Any, ids: list[int]) -> dict[str, float]:
    """How far the model's log-probs of a token sequence (a reference transcript) move under bf16 autocast: k3 per
    token and the share of probability ratios outside [0.9, 1.1] (`grpo.sampler_mismatch`, fp32 as the sampler)."""
    device = next(model.parameters()).device
    seq = torch.tensor([ids], device=device)
    targets = seq[0, 1:]

    def logps() -> torch.Tensor:
        logits = model(input_ids=seq, use_cache=False).logits[0, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)

    exact = logps()
    with update_autocast("bf16", device.type):
        low = logps()
    k3, out = sampler_mismatch(low, exact, torch.ones_like(low))
    return {"bf16_k3": float(f"{k3:.3g}"), "bf16_ratio_out": round(out, 4)}


def choose_precision(
    requested: Requested,
    probe: Callable[[], tuple[Any, list[int]]],
    device: str = "cpu",
    flags: set[str] | None = None,
) -> PrecisionChoice:
    """The update's precision for `requested` on this host. `probe` gives (model, token ids of a reference
    transcript); it is called only where the choice needs the model (auto, on a CPU with native bf16)."""
    if requested != "auto":
        return PrecisionChoice(requested, requested, f"train.precision = {requested} (forced)")
    if device == "cuda":
        ok = torch.cuda.is_bf16_supported()
        return PrecisionChoice("auto", "bf16" if ok else "fp32", f"CUDA {'with' if ok else 'without'} bf16")
    flag = native_bf16(flags)
    if flag is None:
        cap = torch.backends.cpu.get_cpu_capability()
        why = f"this CPU ({cap}) has no native bf16 dot products (no {' or '.join(NATIVE_BF16_FLAGS)} flag)"
        return PrecisionChoice("auto", "fp32", why)
    if not CPU_BF16_LEARNS_AS_FP32:
        why = (
            f"{flag} is here, but bf16 learned less than fp32 from the same seeds on CPUs: in SFT seeding "
            "(benchmarks/results/seeding_precision.json) and in the demo's GRPO update "
            "(benchmarks/results/demo_precision.json), and no short check predicts it yet; "
            'train.precision = "bf16" forces it (the warm start keeps its own train.sft_precision)'
        )
        return PrecisionChoice("auto", "fp32", why)
    model, ids = probe()
    seconds = update_seconds(model, ids[-PROBE_TOKENS:])
    speedup = seconds["fp32_update_s"] / max(seconds["bf16_update_s"], 1e-9)
    measured = {**seconds, "bf16_speedup": round(speedup, 2)}
    if speedup < BF16_MIN_SPEEDUP:
        why = f"{flag}, but a bf16 update pass ran only {speedup:.2f}x fp32 here (needs {BF16_MIN_SPEEDUP}x)"
        return PrecisionChoice("auto", "fp32", why, measured)
    measured.update(bf16_agreement(model, ids))
    if measured["bf16_k3"] > BF16_MAX_K3:
        why = f"bf16 is {speedup:.2f}x faster, but moved log-probs by k3 {measured['bf16_k3']:.4f} (max {BF16_MAX_K3})"
        return PrecisionChoice("auto", "fp32", why, measured)
    why = f"{flag}: a bf16 update pass {speedup:.2f}x fp32, log-prob k3 {measured['bf16_k3']:.4f} per token"
    return PrecisionChoice("auto", "bf16", why, measured)


def choose_sft_precision(requested: Requested, update: Precision, device: str = "cpu") -> PrecisionChoice:
    """The SFT warm start's precision for `train.sft_precision`, given the update's resolved one: auto keeps fp32
    on a CPU (bf16 seeding learned less there, SEEDING_EVIDENCE) and follows the update on a GPU."""
    if requested != "auto":
        return PrecisionChoice(requested, requested, f"train.sft_precision = {requested} (forced)")
    if device == "cuda":
        return PrecisionChoice("auto", update, "the update's precision (CUDA)")
    return PrecisionChoice("auto", "fp32", f"a CPU: {SEEDING_EVIDENCE}")


@contextmanager
def update_autocast(precision: str, device_type: str = "cpu") -> Iterator[None]:
    """Autocast for an update pass in `precision` (nothing for fp32)."""
    ctx = torch.autocast(device_type, dtype=torch.bfloat16) if precision == "bf16" else nullcontext()
    with ctx:
        yield


def compute_dtype(device_type: str, default: torch.dtype) -> torch.dtype:
    """The dtype matmuls run in here: autocast's where it is on, else `default` (the operands' own)."""
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return default
