"""Weights in a run directory: the SFT warm start and the GRPO checkpoints (torch files).

Each checkpoint's manifest.json holds the size and sha256 of its files; loading skips a checkpoint that does not
match and falls back to the previous one. Only the newest `KEEP_CHECKPOINTS` are kept.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from grpolab.errors import UserError
from grpolab.files import atomic_write, atomic_write_dir, atomic_write_text, read_json, sha256_file
from grpolab.rundir.base import RunPath
from grpolab.rundir.layout import (
    CHECKPOINT_PREFIX,
    CHECKPOINTS_DIR,
    MANIFEST_FILE,
    WARM_START_FILE,
    WARM_START_SOURCE_FILE,
)

KEEP_CHECKPOINTS = 2
TRAINABLE_FILE = "trainable.pt"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "state.json"
ADAPTER_DIR = "adapter"


class Checkpoints(RunPath):
    @property
    def warm_start_path(self) -> Path:
        """Where the SFT warm start's trainable weights are kept (GRPO's policy and reference start from them)."""
        return self.path / WARM_START_FILE

    def save_warm_start(self, model: Any) -> Path:
        import torch

        trainable = {n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad}
        atomic_write(self.warm_start_path, lambda tmp: torch.save(trainable, tmp))
        return self.warm_start_path

    def warm_start(self) -> Path | None:
        return self.warm_start_path if self.warm_start_path.is_file() else None

    def adopt_warm_start(self, source: Checkpoints) -> None:
        """Start from another run's SFT warm start (experiments that vary only GRPO share one)."""
        found = source.warm_start()
        if found is None:
            raise UserError(f"{source.path} has no SFT warm start", "pick a run trained with train.sft_steps > 0")
        self.warm_start_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found, self.warm_start_path)
        text = json.dumps({"warm_start_from": str(source.path)}, indent=2, default=str) + "\n"
        atomic_write_text(self.path / WARM_START_SOURCE_FILE, text)

    def checkpoints(self) -> list[tuple[int, Path]]:
        root = self.path / CHECKPOINTS_DIR
        found = []
        for d in root.glob(f"{CHECKPOINT_PREFIX}*") if root.is_dir() else []:
            number = d.name.removeprefix(CHECKPOINT_PREFIX)
            if (d / STATE_FILE).is_file() and number.isdigit():
                found.append((int(number), d))
        return sorted(found)

    def save_checkpoint(self, step: int, model: Any, optimizer: Any | None, state: dict[str, Any]) -> Path:
        import torch

        def fill(tmp: Path) -> None:
            trainable = {n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad}
            torch.save(trainable, tmp / TRAINABLE_FILE)
            if optimizer is not None:
                torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
            if hasattr(model, "peft_config"):
                model.save_pretrained(tmp / ADAPTER_DIR)
            (tmp / STATE_FILE).write_text(json.dumps({**state, "step": step}, default=str))
            (tmp / MANIFEST_FILE).write_text(json.dumps(_manifest(tmp), indent=1))

        target = self.path / CHECKPOINTS_DIR / f"{CHECKPOINT_PREFIX}{step}"
        atomic_write_dir(target, fill)
        for _, old in self.checkpoints()[:-KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)
        return target

    def set_aside_damaged_checkpoints(self) -> list[str]:
        """Move the damaged checkpoints newer than the newest intact one to checkpoints/damaged-step-N (kept for
        inspection, out of the way of resuming and of pruning). Only the holder of the claim does this."""
        notes = []
        for step, path in reversed(self.checkpoints()):
            problem = checkpoint_problem(path)
            if problem is None:
                break
            aside = path.with_name(f"damaged-{CHECKPOINT_PREFIX}{step}-{int(time.time())}")
            path.rename(aside)
            notes.append(f"checkpoint {path.name} is damaged ({problem}): skipped, kept as {aside.name}")
        return notes

    def load_checkpoint(self, model: Any, optimizer: Any | None, notes: list[str] | None = None) -> dict | None:
        """Load the newest intact checkpoint into `model` (and `optimizer`); its state dict, or None without one.
        Damaged checkpoints are skipped (a line for each goes to `notes`)."""
        for _, path in reversed(self.checkpoints()):
            problem = checkpoint_problem(path)
            if problem is None:
                try:
                    return _load_checkpoint(path, model, optimizer)
                except UserError:
                    raise
                except Exception as exc:  # an unreadable file in a checkpoint without a manifest (older runs)
                    problem = f"{type(exc).__name__}: {str(exc)[:120]}"
            if notes is not None:
                notes.append(f"checkpoint {path.name} is damaged ({problem}): skipped")
        return None


def _load_checkpoint(path: Path, model: Any, optimizer: Any | None) -> dict[str, Any]:
    import torch

    trainable = torch.load(path / TRAINABLE_FILE, map_location="cpu")
    missing = set(trainable) - {n for n, _ in model.named_parameters()}
    if missing:
        raise UserError(
            f"checkpoint {path} does not fit this model ({len(missing)} unknown tensors)",
            "resume with the run's own config.json (model and LoRA settings)",
        )
    state = json.loads((path / STATE_FILE).read_text())
    model.load_state_dict(trainable, strict=False)
    if optimizer is not None and (path / OPTIMIZER_FILE).is_file():
        optimizer.load_state_dict(torch.load(path / OPTIMIZER_FILE, map_location="cpu"))
    return state


def _manifest(folder: Path) -> dict[str, Any]:
    """Size and sha256 of every file of a checkpoint folder (written last, into the folder itself)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)
    return {"files": {str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": sha256_file(p)} for p in files}}


def checkpoint_problem(path: Path) -> str | None:
    """Why a checkpoint folder cannot be trusted (a file missing, cut short or changed), or None when it is
    intact. Checkpoints written before manifests existed are trusted here and checked by loading."""
    manifest = read_json(path / MANIFEST_FILE)
    if manifest is None:
        return None if not (path / MANIFEST_FILE).exists() else f"unreadable {MANIFEST_FILE}"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or TRAINABLE_FILE not in files:
        return f"{MANIFEST_FILE} lists no {TRAINABLE_FILE}"
    for name, want in files.items():
        f = path / name
        if not isinstance(want, dict) or not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != want.get("bytes"):
            return f"{name} has {f.stat().st_size} bytes, the manifest says {want.get('bytes')}"
        if sha256_file(f) != want.get("sha256"):
            return f"{name} does not match its checksum"
    return None
