"""The model rollouts sample from: the policy itself (`exact`), or a lighter copy of it (`int8`).

A decode step on a CPU is bound by reading the weights once per token, so the `int8` copy stores its base linear
weights as int8 per output channel and quantises activations to int8 per call (fbgemm's dynamic-quantised linear,
W8A8): 4x less memory traffic per decoded token. Activations use the full 8-bit range only where fbgemm's products
are exact (a CPU with VNNI accumulates them in int32); `full_range_is_exact` probes this once per process, and
elsewhere fbgemm's `reduce_range` (7-bit activations) is used. The measurements behind these choices are in
docs/design.md ("Config fields: why", `rollout.engine`).

The LoRA adapters are not copied: the copy's adapter modules hold the policy's own adapter parameters, so the
sampler follows every update at no cost (`refresh` re-quantises only when all weights train). The embedding is
shared too. The mismatch between sampler and trainer is corrected in the loss (truncated importance sampling,
`grpolab.engine.grpo`) and logged.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import torch
from torch import Tensor, nn

from grpolab.errors import UserError


@functools.cache
def full_range_is_exact() -> bool:
    """Whether fbgemm's dynamic int8 linear is as accurate with the full 8-bit activation range as with 7 bits on
    this CPU (true with VNNI; false where int16 accumulation saturates): one probe layer, fixed random inputs."""
    gen = torch.Generator(device="cpu").manual_seed(0)  # fbgemm's kernels are the CPU's
    w, x = torch.randn(256, 512, generator=gen, device="cpu"), torch.randn(16, 512, generator=gen, device="cpu")
    packed = int8_packed(w, None)
    exact = x @ w.T
    error = {r: float((torch.ops.quantized.linear_dynamic(x, packed, r) - exact).norm()) for r in (False, True)}
    return error[False] <= error[True]


def int8_packed(weight: Tensor, bias: Tensor | None) -> Any:
    """fbgemm's packed linear: int8 weights per output channel (symmetric, scale max |w| / 127), fp32 bias."""
    w = weight.float()
    scales = (w.abs().amax(dim=1) / 127).clamp(min=1e-12).double()
    zero_points = torch.zeros(w.shape[0], dtype=torch.long, device=w.device)
    qweight = torch.quantize_per_channel(w, scales, zero_points, 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(qweight, None if bias is None else bias.float())


class Int8Linear(nn.Module):
    """A frozen linear layer with int8 weights (per output channel) and dynamically quantised activations."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.pack(linear.weight.detach(), None if linear.bias is None else linear.bias.detach())

    def pack(self, weight: Tensor, bias: Tensor | None) -> None:
        self.packed = int8_packed(weight, bias)
        self.reduce_range = not full_range_is_exact()  # probed once per process, read here rather than per call

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        shape = x.shape
        y = torch.ops.quantized.linear_dynamic(x.reshape(-1, shape[-1]), self.packed, self.reduce_range)
        return y.view(*shape[:-1], self.out_features)


class ExactSampler:
    """Rollouts from the policy itself: the recorded log-probs are the policy's own."""

    exact = True

    def __init__(self, policy: Any):
        self.model = policy

    def refresh(self) -> None:
        """Nothing to do: the sampler is the policy."""


class Int8Sampler:
    """Rollouts from an int8 copy of the base weights, with the policy's own LoRA adapters applied unmerged."""

    exact = False

    def __init__(self, policy: Any):
        self.policy = policy
        self.model = copy.deepcopy(policy).eval()
        shared = dict(policy.named_parameters())
        self.pairs: list[tuple[nn.Module, nn.Linear]] = []
        for name, module in list(self.model.named_modules()):
            for child_name, child in list(module.named_children()):
                full = f"{name}.{child_name}" if name else child_name
                if isinstance(child, nn.Linear) and not is_adapter(full):
                    setattr(module, child_name, Int8Linear(child))
                    self.pairs.append((getattr(module, child_name), policy.get_submodule(full)))
        for name in [n for n, _ in self.model.named_parameters()]:  # adapters, norms, embedding: the policy's own
            owner, _, leaf = name.rpartition(".")
            setattr(self.model.get_submodule(owner) if owner else self.model, leaf, shared[name])
        self.lora = any(is_adapter(n) for n in shared)

    def refresh(self) -> None:
        """With LoRA the adapters are shared; with full fine-tuning the int8 weights are re-quantised."""
        if self.lora:
            return
        for quantized, source in self.pairs:
            quantized.pack(source.weight.detach(), None if source.bias is None else source.bias.detach())


def is_adapter(name: str) -> bool:
    """Whether a module or parameter name (from `named_modules` / `named_parameters`) is one of peft's LoRA
    adapters (lora_A, lora_B, ...) rather than a base-model layer."""
    return ".lora_" in name or name.startswith("lora_")


def make_sampler(policy: Any, engine: str) -> ExactSampler | Int8Sampler:
    """The rollout copy for `rollout.engine` (int8 is fbgemm's: CPU only)."""
    if engine != "int8":
        return ExactSampler(policy)
    device = next(policy.parameters()).device
    if device.type != "cpu":
        raise UserError(
            f"rollout.engine = int8 runs on the CPU only (fbgemm's kernels), and this run's model is on {device}",
            'set rollout.engine = "exact" (a GPU decodes without it), or train.device = "cpu"',
        )
    return Int8Sampler(policy)
