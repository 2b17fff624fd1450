"""Where the native engine runs (`train.device`) and the dtype its weights are held in there.

- `auto` takes a CUDA device when torch sees one, else the CPU; `cuda` without one is a UserError.
- CPU: fp32 weights, as always. Whether the update runs in bf16 is measured per host (`engine.precision`).
- CUDA: the passes run in bf16 (autocast: `train.precision = auto` picks it where the device supports it).
  - The weights stay fp32 where the run's fp32 state fits in half the device's memory.
  - Beyond that they load in bf16.
  - The fp32 state: the weights, plus with full fine-tuning their gradients, AdamW's two moments and the frozen
    reference; with LoRA only the weights, the adapters being small.
  - fp32 master weights keep AdamW's small steps, which bf16 weights round away. SmolLM2-135M's 0.5 GB fits
    any GPU, so the embedded model keeps its CPU numerics there.

Every tensor the engine makes is created on the model's device (tests/test_device.py reads the engine's source for
tensor constructors without `device=`); the rollout's random draws come from a CPU generator and are moved, so a
seed samples the same uniforms on either device.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from grpolab.errors import UserError

Device = Literal["auto", "cpu", "cuda"]

FP32_SHARE = 0.5
"""Most of the device's memory the run's fp32 state may take before weights load in bf16 (the rest is for
activations, the KV cache and the logits)."""


def engine_device(requested: Device) -> torch.device:
    """The device for `train.device`."""
    if requested == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if requested == "cuda":
        raise UserError(
            "train.device = cuda, but torch sees no CUDA device here",
            'set train.device = "auto" (or "cpu"), or install a CUDA build of torch on a machine with a GPU',
        )
    return torch.device("cpu")


def fp32_state_bytes(n_params: int, lora: bool) -> int:
    """Bytes of a run's fp32 state: weights; with full fine-tuning also gradients, two AdamW moments and the
    reference copy."""
    return n_params * 4 * (1 if lora else 5)


def weights_dtype(device: torch.device, n_params: int, lora: bool, memory_bytes: int | None = None) -> torch.dtype:
    """The dtype the weights are held in on `device` for a model of `n_params` (`memory_bytes`: the device's
    memory, read from CUDA when not given)."""
    if device.type != "cuda":
        return torch.float32
    if memory_bytes is None:
        memory_bytes = torch.cuda.get_device_properties(device).total_memory
    if fp32_state_bytes(n_params, lora) <= FP32_SHARE * memory_bytes:
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def place(model: Any, requested: Device, lora: bool = True) -> Any:
    """`model` on the device `train.device` names, in the dtype chosen for it there (on the CPU: unchanged)."""
    device = engine_device(requested)
    dtype = weights_dtype(device, sum(p.numel() for p in model.parameters()), lora)
    first = next(model.parameters())
    return model if (first.device, first.dtype) == (device, dtype) else model.to(device=device, dtype=dtype)
