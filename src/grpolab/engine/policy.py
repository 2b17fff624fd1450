"""The policy GRPO trains and the reference it is held to: LoRA adapters on the base, or a full copy.

With LoRA the reference is the same model with its adapters disabled (no second copy of the weights). An SFT warm
start is applied first and merged into the base, so the frozen reference is the model GRPO actually starts from.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from grpolab.config import LabConfig
from grpolab.engine.device import engine_device, place
from grpolab.engine.precision import PrecisionChoice, choose_precision
from grpolab.engine.sft import reference_tokens
from grpolab.envs.base import Environment
from grpolab.errors import UserError
from grpolab.models import load_model, peft_lora_args
from grpolab.rundir import RunDir


def with_lora(model: Any, cfg: LabConfig) -> Any:
    from peft import LoraConfig as PeftLoraConfig  # peft: only when a LoRA policy is built
    from peft import get_peft_model

    return get_peft_model(model, PeftLoraConfig(**peft_lora_args(cfg.lora)))


def apply_warm_start(model: Any, cfg: LabConfig, path: Path) -> Any:
    """The base model with an SFT warm start's trainable weights applied (LoRA: merged into the base)."""
    weights = load_warm_start(path)
    if not cfg.lora.enabled:
        model.load_state_dict(weights, strict=False)
        return model
    peft_model = with_lora(model, cfg)
    peft_model.load_state_dict(weights, strict=False)
    return peft_model.merge_and_unload()


def load_warm_start(path: Path) -> dict[str, Any]:
    """An SFT warm start's tensors (torch's weights-only loader); one that cannot be loaded is a UserError (runs
    written before sft/manifest.json have no checksum, so loading is their check)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
        raise UserError(
            f"the SFT warm start {path} cannot be loaded ({reason})",
            "the run's checkpoints were trained on top of it: restore it from a copy, or train a new run",
        ) from None


def engine_model(name: str, cfg: LabConfig) -> tuple[Any, Any]:
    """(model, tokenizer) by name, on the device `train.device` names, in the dtype chosen for it there."""
    model, tokenizer = load_model(name, seed=cfg.seed)
    return place(model, cfg.train.device, cfg.lora.enabled), tokenizer


def build_policy(cfg: LabConfig, warm_start: Path | None = None) -> tuple[Any, Any, Any]:
    """(policy, tokenizer, reference): reference is None with LoRA (adapters off), else a frozen full copy; on the
    device `train.device` names."""
    torch.manual_seed(cfg.seed)
    model, tokenizer = load_model(cfg.model, seed=cfg.seed)
    if warm_start is not None:
        model = apply_warm_start(model, cfg, warm_start)
    model = place(model, cfg.train.device, cfg.lora.enabled)
    if not cfg.lora.enabled:
        reference = copy.deepcopy(model).eval()
        for p in reference.parameters():
            p.requires_grad_(False)
        return model, tokenizer, reference
    return with_lora(model, cfg), tokenizer, None


def load_run_policy(path: Path, notes: list[str] | None = None) -> tuple[Any, Any, LabConfig, int]:
    """(policy, tokenizer, config, step) of a run directory at its newest intact checkpoint (SFT warm start
    included): the one way from a run to its policy (eval, compare, export, chat). A checkpoint skipped on the way
    (damaged, or refused by the weights-only loader) is named in `notes`, as are the run's recorded plugins it
    imports (`RunDir.config_to_run`); a damaged warm start is a UserError."""
    run = RunDir(path)
    cfg = run.config_to_run(notes)
    if not run.checkpoints():
        raise UserError(f"{path} has no checkpoint", "train it first (grpolab train --out ...), or name a model")
    model, tokenizer, _ = build_policy(cfg, run.warm_start())
    state = run.load_checkpoint(model, None, notes)
    if state is None:
        raise UserError(f"{path} has no intact checkpoint", "train it again, or resume it to write a new one")
    return model, tokenizer, cfg, int(state["step"])


def load_policy(spec: str, cfg: LabConfig) -> tuple[Any, Any, LabConfig]:
    """(policy, tokenizer, config) of a run directory (its newest checkpoint and its own config) or of a model by
    name (smollm2, tiny, an HF id or a folder, with `cfg`)."""
    path = Path(spec)
    if RunDir(path).is_run():
        return load_run_policy(path)[:3]
    model, tokenizer = engine_model(spec, cfg)
    return model, tokenizer, cfg


def resolve_precision(cfg: LabConfig, env: Environment, model: Any = None, tokenizer: Any = None) -> PrecisionChoice:
    """The update's precision for `train.precision` on this host (`engine.precision`). Where the choice needs the
    model, it probes `model` (loaded from the config when not given) on a reference transcript of the env."""

    def probe() -> tuple[Any, list[int]]:
        m, tok = (model, tokenizer) if model is not None else load_model(cfg.model, seed=cfg.seed)
        prompt, completion, _ = reference_tokens(tok, env, env.tasks("train")[0])
        return m, (prompt + completion)[-512:]

    # the device the run will use: a model not loaded yet goes where `train.device` puts it (a CUDA run must not be
    # judged by the CPU's rules)
    device = next(model.parameters()).device.type if model is not None else engine_device(cfg.train.device).type
    return choose_precision(cfg.train.precision, probe, device)
