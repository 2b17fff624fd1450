"""Whole parameters for decoding a sharded model: DeepSpeed ZeRO-3, FSDP2 (`fully_shard`) and FSDP1.

The fast decoder (`grpolab.engine.decoder`) reads each layer's weights when it is built and calls the `forward` of
the model's embedding and norm modules directly, so no sharding framework's hook gathers anything for it: on a
sharded model it would read this process's shard. `full_parameters(model)` makes every
parameter whole for the length of a block, through each framework's own API:
- ZeRO-3 (parameters carry `ds_id`): `deepspeed.zero.GatheredParameters` over all of them, read-only;
- FSDP2: `unshard()` on every `FSDPModule`, `reshard()` on each when the block ends, even on an error;
- FSDP1: `FullyShardedDataParallel.summon_full_params(model, writeback=False)`.
Any other model passes through untouched, for the price of one scan over its parameters and modules.

Cost: every process holds the whole model's weights (in the unsharded dtype) for the block, as under DDP.
Entering is collective (an all-gather): every process must enter together, as TRL's `rollout_func` does. Inside
the block the decoder runs no collective, so processes may decode different numbers of tokens. Nothing built
inside (a `FastDecoder` holds views of the weights) may be used after the block: FSDP frees the gathered storage.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from grpolab.errors import UserError


def _fsdp() -> Any:
    """torch.distributed.fsdp if something imported it (no model can be FSDP-wrapped otherwise), else None."""
    return sys.modules.get("torch.distributed.fsdp")


def _is_zero3(p: Any) -> bool:
    return hasattr(p, "ds_id")


@contextmanager
def full_parameters(model: Any) -> Iterator[None]:
    """Every parameter of `model` whole inside the block, whatever shards them (see the module docstring)."""
    params = list(model.parameters())
    if any(_is_zero3(p) for p in params):
        try:
            import deepspeed
        except ImportError as exc:
            raise UserError(
                f"the model's parameters are DeepSpeed ZeRO-3 placeholders but deepspeed does not import ({exc})",
                "install deepspeed in this environment (pip install deepspeed), or train without ZeRO-3",
            ) from None
        with deepspeed.zero.GatheredParameters(params):
            yield
        return
    fsdp = _fsdp()
    if fsdp is None:
        yield
        return
    units = [m for m in model.modules() if isinstance(m, fsdp.FSDPModule)]
    if units:
        try:
            for unit in units:  # the same order on every process: each unshard is an all-gather
                unit.unshard()
            yield
        finally:
            for unit in units:
                unit.reshard()
    elif any(isinstance(m, fsdp.FullyShardedDataParallel) for m in model.modules()):
        with fsdp.FullyShardedDataParallel.summon_full_params(model, writeback=False):
            yield
    else:
        yield


def sharded_parameter(model: Any) -> str | None:
    """The name of the first parameter this process holds only a shard of, or None when all are whole."""
    dtensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)
    for name, p in model.named_parameters():
        if dtensor is not None and isinstance(p, dtensor):
            return name  # FSDP2
        if _is_zero3(p) and getattr(getattr(p, "ds_status", None), "name", None) != "AVAILABLE":
            return name  # ZeRO-3: a placeholder until gathered
    fsdp = _fsdp()
    if fsdp is None:
        return None
    for prefix, m in model.named_modules():
        handle = getattr(m, "_handle", None) if isinstance(m, fsdp.FullyShardedDataParallel) else None
        if handle is not None and handle.is_sharded(handle.flat_param):  # FSDP1: one flat shard per unit
            names = getattr(handle.flat_param, "_fqns", None) or ["_flat_param"]
            return f"{prefix}.{names[0]}" if prefix else names[0]
    return None
