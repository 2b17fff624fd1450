"""The run directory (DESIGN.md): config.json, metrics.jsonl, episodes.jsonl, eval/STEP.jsonl, checkpoints/step-N/.

Every write is atomic (write a temp file, then rename), so a run killed at any moment leaves whole files. Resume
rewinds metrics and episodes to the last checkpoint's step, so no step is recorded twice or lost.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from grpolab.errors import UserError

KEEP_CHECKPOINTS = 2


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON Lines file; a missing file is empty, and unparseable lines are skipped (not fatal)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def episodes_path(self) -> Path:
        return self.path / "episodes.jsonl"

    @property
    def warm_start_path(self) -> Path:
        """Where the SFT warm start's trainable weights are kept (GRPO's policy and reference start from them)."""
        return self.path / "sft" / "trainable.pt"

    @property
    def stop_path(self) -> Path:
        """A file whose presence asks a running training to checkpoint and stop after its current step."""
        return self.path / "STOP"

    def request_stop(self) -> None:
        atomic_write_text(self.stop_path, "stop requested\n")

    def stop_requested(self) -> bool:
        return self.stop_path.is_file()

    def clear_stop(self) -> None:
        self.stop_path.unlink(missing_ok=True)

    def warm_start(self) -> Path | None:
        return self.warm_start_path if self.warm_start_path.is_file() else None

    def write_json(self, name: str, data: Any) -> None:
        atomic_write_text(self.path / name, json.dumps(data, indent=2, default=str) + "\n")

    def read_json(self, name: str) -> Any:
        path = self.path / name
        if not path.is_file():
            raise UserError(f"{path} not found", "is this a grpolab run directory? (it needs config.json)")
        try:
            return json.loads(path.read_text())
        except ValueError as exc:
            raise UserError(f"{path} is not valid JSON ({exc})", "restore it or start a new run")

    def append_jsonl(self, path: Path, rows: list[dict[str, Any]]) -> None:
        """Append by rewriting atomically: the file is always a whole number of lines."""
        old = path.read_text() if path.is_file() else ""
        new = "".join(json.dumps(r, default=_json_default) + "\n" for r in rows)
        atomic_write_text(path, old + new)

    def rewind(self, step: int) -> None:
        """Drop metric and episode rows after `step` (they are redone after a resume)."""
        for path in (self.metrics_path, self.episodes_path):
            rows = [r for r in read_jsonl(path) if r.get("step", 0) <= step]
            atomic_write_text(path, "".join(json.dumps(r, default=_json_default) + "\n" for r in rows))

    def write_eval(self, label: str, rows: list[dict[str, Any]]) -> None:
        atomic_write_text(self.path / "eval" / f"{label}.jsonl", "".join(json.dumps(r) + "\n" for r in rows))

    # ---- checkpoints ----

    def checkpoints(self) -> list[tuple[int, Path]]:
        root = self.path / "checkpoints"
        found = []
        for d in root.glob("step-*") if root.is_dir() else []:
            if (d / "state.json").is_file() and d.name[5:].isdigit():
                found.append((int(d.name[5:]), d))
        return sorted(found)

    def save_checkpoint(self, step: int, model: Any, optimizer: Any, state: dict[str, Any]) -> Path:
        target = self.path / "checkpoints" / f"step-{step}"
        tmp = Path(tempfile.mkdtemp(dir=self.path, prefix=".ckpt."))
        trainable = {n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad}
        torch.save(trainable, tmp / "trainable.pt")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        if hasattr(model, "peft_config"):
            model.save_pretrained(tmp / "adapter")
        (tmp / "state.json").write_text(json.dumps({**state, "step": step}, default=str))
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, target)
        for _, old in self.checkpoints()[:-KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)
        return target

    def load_checkpoint(self, model: Any, optimizer: Any | None) -> dict[str, Any] | None:
        ckpts = self.checkpoints()
        if not ckpts:
            return None
        _, path = ckpts[-1]
        trainable = torch.load(path / "trainable.pt", map_location="cpu")
        missing = set(trainable) - {n for n, _ in model.named_parameters()}
        if missing:
            raise UserError(f"checkpoint {path} does not fit this model ({len(missing)} unknown tensors)",
                            "resume with the run's own config.json (model and LoRA settings)")  # fmt: skip
        model.load_state_dict(trainable, strict=False)
        if optimizer is not None:
            optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu"))
        return json.loads((path / "state.json").read_text())


def _json_default(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    return str(x)


def heldout_at_start(run: RunDir) -> float | None:
    """Held-out success before GRPO (eval label "0"), if it was measured."""
    path = run.path / "eval" / "summary.json"
    try:
        return json.loads(path.read_text())["0"]["heldout/success"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
