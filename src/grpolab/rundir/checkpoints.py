"""Weights in a run directory: the SFT warm start and the GRPO checkpoints (torch files).

Each checkpoint's manifest.json holds the size and sha256 of its files, and so does sft/manifest.json for the warm
start. Loading skips a checkpoint that does not match, or that torch's weights-only loader refuses, and falls back
to the previous one; the trainer sets such a checkpoint aside (damaged-step-N-T) and says so. A damaged warm start
is a UserError wherever it is loaded (the checkpoints were trained on top of it), and is set aside only where it is
about to be redone. Only the newest `KEEP_CHECKPOINTS` checkpoints are kept.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from grpolab.errors import UserError
from grpolab.files.atomic import atomic_write, atomic_write_dir, atomic_write_text, sha256_file, unused_name
from grpolab.files.json_files import read_json
from grpolab.rundir.base import RunPath
from grpolab.rundir.layout import (
    CHECKPOINT_PREFIX,
    CHECKPOINTS_DIR,
    DAMAGED_PREFIX,
    MANIFEST_FILE,
    SFT_DIR,
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
        import torch  # only when a checkpoint is written: readers of a run directory do not load torch

        trainable = {n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad}
        (self.path / SFT_DIR / MANIFEST_FILE).unlink(missing_ok=True)  # a kill before the new one: no stale sum
        atomic_write(self.warm_start_path, lambda tmp: torch.save(trainable, tmp))
        self._write_warm_start_manifest()
        return self.warm_start_path

    def _write_warm_start_manifest(self) -> None:
        entry = _file_entry(self.warm_start_path)
        atomic_write_text(self.path / SFT_DIR / MANIFEST_FILE, json.dumps({"files": {TRAINABLE_FILE: entry}}) + "\n")

    def warm_start_problem(self) -> str | None:
        """Why the SFT warm start cannot be trusted (checksum, size, missing), or None (also when there is none,
        or when it predates sft/manifest.json: then loading it is the check)."""
        return checkpoint_problem(self.path / SFT_DIR) if self._has_warm_start() else None

    def _has_warm_start(self) -> bool:
        return self.warm_start_path.is_file() or (self.path / SFT_DIR / MANIFEST_FILE).is_file()

    def warm_start(self) -> Path | None:
        """The SFT warm start to build the policy on, None without one; a damaged or missing one (its manifest is
        there) is a UserError naming it: a policy built without it, or on another, is not the one the run trained."""
        if not self._has_warm_start():
            return None
        problem = self.warm_start_problem()
        if problem is not None:
            raise UserError(
                f"the SFT warm start {self.warm_start_path} is damaged ({problem})",
                "the run's checkpoints were trained on top of it: restore it from a copy, or train a new run",
            )
        return self.warm_start_path

    def set_aside_damaged_warm_start(self) -> list[str]:
        """Move a damaged SFT warm start to sft/damaged-trainable-T.pt (kept for inspection), for a run that is
        about to redo it. Only the holder of the claim does this."""
        problem = self.warm_start_problem()
        if problem is None:
            return []
        (self.path / SFT_DIR / MANIFEST_FILE).unlink()
        if not self.warm_start_path.is_file():
            return [f"the SFT warm start {self.warm_start_path} is damaged ({problem}): redone now"]
        aside = unused_name(self.warm_start_path.with_name(f"{DAMAGED_PREFIX}trainable-{int(time.time())}.pt"))
        self.warm_start_path.rename(aside)
        return [f"the SFT warm start {self.warm_start_path} is damaged ({problem}): kept as {aside}, redone now"]

    def adopt_warm_start(self, source: Checkpoints) -> None:
        """Start from another run's SFT warm start (experiments that vary only GRPO share one)."""
        found = source.warm_start()  # a damaged one: a UserError naming it, before anything is copied
        if found is None:
            raise UserError(f"{source.path} has no SFT warm start", "pick a run trained with train.sft_steps > 0")
        self.warm_start_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.warm_start_path, lambda tmp: shutil.copyfile(found, tmp))
        self._write_warm_start_manifest()
        problem = self.warm_start_problem()
        if problem is not None:  # changed while it was copied
            raise UserError(f"the SFT warm start of {source.path} changed while it was copied ({problem})", "retry")
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
        import torch  # only when a checkpoint is written: readers of a run directory do not load torch

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
        """Move the damaged checkpoints newer than the newest intact one to checkpoints/damaged-step-N-T (kept for
        inspection, out of the way of resuming and of pruning). Only the holder of the claim does this."""
        notes = []
        for _, path in reversed(self.checkpoints()):
            problem = checkpoint_problem(path)
            if problem is None:
                break
            notes.append(f"checkpoint {path.name} is damaged ({problem}): skipped, kept as {self._set_aside(path)}")
        return notes

    def _set_aside(self, path: Path) -> str:
        aside = unused_name(path.with_name(f"{DAMAGED_PREFIX}{path.name}-{int(time.time())}"))
        path.rename(aside)
        return aside.name

    def load_checkpoint(
        self, model: Any, optimizer: Any | None, notes: list[str] | None = None, set_aside: bool = False
    ) -> dict | None:
        """Load the newest intact checkpoint into `model` (and `optimizer`); its state dict, or None without one.
        Damaged checkpoints, and those torch's weights-only loader refuses, are skipped (a line for each goes to
        `notes`); with `set_aside` (the claim's holder, resuming) they are also moved to damaged-step-N-T."""
        for _, path in reversed(self.checkpoints()):
            problem = checkpoint_problem(path)
            if problem is None:
                try:
                    return _load_checkpoint(path, model, optimizer)
                except UserError:
                    raise
                except Exception as exc:  # refused by the weights-only loader, or unreadable without a manifest
                    problem = f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
            line = f"checkpoint {path.name} cannot be loaded ({problem}): skipped"
            if set_aside:
                line += f", kept as {self._set_aside(path)}"
            if notes is not None:
                notes.append(line)
        return None

    def load_step(self, step: int, model: Any) -> dict[str, Any]:
        """Load the weights of the checkpoint of `step` into `model` (to read the policy as it was then: a probe, a
        comparison); its state dict. A missing or damaged one is a UserError naming it."""
        found = dict(self.checkpoints())
        if step not in found:
            kept = ", ".join(str(s) for s in found) or "none"
            raise UserError(f"{self.path} has no checkpoint of step {step} (kept: {kept})", "pick a kept step")
        problem = checkpoint_problem(found[step])
        if problem is not None:
            raise UserError(f"checkpoint {found[step]} is damaged ({problem})", "pick another kept step")
        return _load_checkpoint(found[step], model, None)


def _load_checkpoint(path: Path, model: Any, optimizer: Any | None) -> dict[str, Any]:
    import torch  # only when a checkpoint is read

    trainable = torch.load(path / TRAINABLE_FILE, map_location="cpu", weights_only=True)
    missing = set(trainable) - {n for n, _ in model.named_parameters()}
    if missing:
        raise UserError(
            f"checkpoint {path} does not fit this model ({len(missing)} unknown tensors)",
            "resume with the run's own config.json (model and LoRA settings)",
        )
    state = json.loads((path / STATE_FILE).read_text())
    model.load_state_dict(trainable, strict=False)
    if optimizer is not None and (path / OPTIMIZER_FILE).is_file():
        optimizer.load_state_dict(torch.load(path / OPTIMIZER_FILE, map_location="cpu", weights_only=True))
    return state


def _manifest(folder: Path) -> dict[str, Any]:
    """Size and sha256 of every file of a checkpoint folder (written last, into the folder itself)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)
    return {"files": {str(p.relative_to(folder)): _file_entry(p) for p in files}}


def _file_entry(path: Path) -> dict[str, Any]:
    """A manifest's record of one file: its size and sha256 (what `checkpoint_problem` checks)."""
    return {"bytes": path.stat().st_size, "sha256": sha256_file(path)}


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
