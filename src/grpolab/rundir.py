"""The run directory, and every read and write of it (docs/design.md, "Run directory").

    runs/NAME/config.json           the resolved config
    runs/NAME/metrics.jsonl         one row per GRPO step (append-only)
    runs/NAME/episodes.jsonl        sampled trajectories with per-component rewards and reasons (append-only)
    runs/NAME/eval/LABEL.jsonl      held-out episodes of one evaluation (base, 0, step numbers)
    runs/NAME/eval/summary.json     held-out metrics by evaluation label
    runs/NAME/preflight.json        probes (and learnability when `check --save` wrote it)
    runs/NAME/sft.json, sft/        SFT losses and the warm start's trainable weights
    runs/NAME/checkpoints/step-N/   trainable weights, optimizer, RNG state, step
    runs/NAME/report.html           written by `grpolab.report`
    runs/NAME/STOP                  asks a running training to checkpoint and stop

Whole-file writes are atomic (`grpolab.files`); metric and episode rows are appended. Resume rewinds both to the
last checkpoint's step, so no step is recorded twice or lost.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpolab.errors import UserError
from grpolab.files import (
    append_jsonl,
    atomic_write,
    atomic_write_dir,
    atomic_write_text,
    read_json,
    read_jsonl,
    write_jsonl,
)

if TYPE_CHECKING:
    from grpolab.config import LabConfig

KEEP_CHECKPOINTS = 2


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    @classmethod
    def create(cls, path: str | Path, cfg: LabConfig) -> RunDir:
        """A new run directory holding `cfg`; an existing run is never overwritten."""
        run = cls(path)
        if run.metrics_path.exists() or run.checkpoints():
            raise UserError(
                f"run directory {run.path} already has a run",
                f"resume it with --resume {run.path}, or pick another --out",
            )
        run.path.mkdir(parents=True, exist_ok=True)
        run.write_config(cfg)
        return run

    # ---- paths ----

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def episodes_path(self) -> Path:
        return self.path / "episodes.jsonl"

    @property
    def summary_path(self) -> Path:
        return self.path / "eval" / "summary.json"

    @property
    def report_path(self) -> Path:
        return self.path / "report.html"

    @property
    def warm_start_path(self) -> Path:
        """Where the SFT warm start's trainable weights are kept (GRPO's policy and reference start from them)."""
        return self.path / "sft" / "trainable.pt"

    @property
    def stop_path(self) -> Path:
        """A file whose presence asks a running training to checkpoint and stop after its current step."""
        return self.path / "STOP"

    # ---- config and JSON artifacts ----

    def write_config(self, cfg: LabConfig) -> None:
        self.write_json("config.json", cfg.model_dump(mode="json"))

    def read_config(self) -> LabConfig:
        from grpolab.config import LabConfig

        data = self.read_json("config.json")
        try:
            return LabConfig.model_validate(data)
        except Exception as exc:
            first = str(exc).splitlines()[0]
            raise UserError(f"{self.path}/config.json is not a valid config ({first})", "fix or remove it")

    def is_run(self) -> bool:
        return (self.path / "config.json").is_file()

    def write_json(self, name: str, data: Any) -> None:
        atomic_write_text(self.path / name, json.dumps(data, indent=2, default=str) + "\n")

    def read_json(self, name: str) -> Any:
        """A JSON artifact that must be there and valid (UserError otherwise)."""
        path = self.path / name
        if not path.is_file():
            raise UserError(f"{path} not found", "is this a grpolab run directory? (it needs config.json)")
        problems: list[str] = []
        data = read_json(path, problems)
        if problems:
            raise UserError(f"{path}: {problems[0]}", "restore it or start a new run")
        return data

    def artifact(self, name: str, problems: list[str] | None = None) -> Any:
        """A JSON artifact read defensively: None when missing or unreadable (the reason goes to `problems`)."""
        return read_json(self.path / name, problems)

    # ---- step rows ----

    def append_metrics(self, row: dict[str, Any]) -> None:
        append_jsonl(self.metrics_path, [row])

    def append_episodes(self, rows: list[dict[str, Any]]) -> None:
        append_jsonl(self.episodes_path, rows)

    def metrics(self) -> list[dict[str, Any]]:
        """Metric rows with an integer step (unreadable lines skipped)."""
        return [r for r in read_jsonl(self.metrics_path) if isinstance(r.get("step"), int)]

    def episodes(self) -> list[dict[str, Any]]:
        return read_jsonl(self.episodes_path)

    def rewind(self, step: int) -> None:
        """Drop metric and episode rows after `step` (they are redone after a resume)."""
        for path in (self.metrics_path, self.episodes_path):
            if path.exists():
                write_jsonl(path, [r for r in read_jsonl(path) if r.get("step", 0) <= step])

    # ---- evaluations ----

    def record_eval(self, label: str, rows: list[dict[str, Any]], summary: dict[str, float]) -> None:
        """The episodes of one held-out evaluation and its summary (under `label`: base, 0, or a step)."""
        write_jsonl(self.path / "eval" / f"{label}.jsonl", rows)
        data = self.eval_summary()
        data[str(label)] = summary
        self.write_json("eval/summary.json", data)

    def eval_summary(self, problems: list[str] | None = None) -> dict[str, Any]:
        """Held-out metrics by evaluation label ({} when none was recorded)."""
        data = read_json(self.summary_path, problems)
        return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}

    def eval_rows(self, label: str) -> list[dict[str, Any]]:
        return read_jsonl(self.path / "eval" / f"{label}.jsonl")

    def eval_labels(self) -> list[str]:
        """Evaluation labels in order: base, then steps."""
        folder = self.path / "eval"
        stems = {p.stem for p in folder.glob("*.jsonl")} if folder.is_dir() else set()
        steps = sorted((s for s in stems if s.isdigit()), key=int)
        return (["base"] if "base" in stems else []) + steps

    def heldout_at_start(self) -> float | None:
        """Held-out success before GRPO (eval label "0"), if it was measured."""
        start = self.eval_summary().get("0", {}).get("heldout/success")
        return float(start) if isinstance(start, (int, float)) else None

    # ---- stop requests ----

    def request_stop(self) -> None:
        atomic_write_text(self.stop_path, "stop requested\n")

    def stop_requested(self) -> bool:
        return self.stop_path.is_file()

    def clear_stop(self) -> None:
        self.stop_path.unlink(missing_ok=True)

    # ---- weights: the SFT warm start and checkpoints ----

    def save_warm_start(self, model: Any) -> Path:
        import torch

        trainable = {n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad}
        atomic_write(self.warm_start_path, lambda tmp: torch.save(trainable, tmp))
        return self.warm_start_path

    def warm_start(self) -> Path | None:
        return self.warm_start_path if self.warm_start_path.is_file() else None

    def adopt_warm_start(self, source: RunDir) -> None:
        """Start from another run's SFT warm start (experiments that vary only GRPO share one)."""
        found = source.warm_start()
        if found is None:
            raise UserError(f"{source.path} has no SFT warm start", "pick a run trained with train.sft_steps > 0")
        self.warm_start_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found, self.warm_start_path)
        self.write_json("sft/source.json", {"warm_start_from": str(source.path)})

    def checkpoints(self) -> list[tuple[int, Path]]:
        root = self.path / "checkpoints"
        found = []
        for d in root.glob("step-*") if root.is_dir() else []:
            if (d / "state.json").is_file() and d.name[5:].isdigit():
                found.append((int(d.name[5:]), d))
        return sorted(found)

    def save_checkpoint(self, step: int, model: Any, optimizer: Any | None, state: dict[str, Any]) -> Path:
        import torch

        def fill(tmp: Path) -> None:
            trainable = {n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad}
            torch.save(trainable, tmp / "trainable.pt")
            if optimizer is not None:
                torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
            if hasattr(model, "peft_config"):
                model.save_pretrained(tmp / "adapter")
            (tmp / "state.json").write_text(json.dumps({**state, "step": step}, default=str))

        target = self.path / "checkpoints" / f"step-{step}"
        atomic_write_dir(target, fill)
        for _, old in self.checkpoints()[:-KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)
        return target

    def load_checkpoint(self, model: Any, optimizer: Any | None) -> dict[str, Any] | None:
        """Load the latest checkpoint into `model` (and `optimizer`); its state dict, or None without one."""
        import torch

        ckpts = self.checkpoints()
        if not ckpts:
            return None
        _, path = ckpts[-1]
        trainable = torch.load(path / "trainable.pt", map_location="cpu")
        missing = set(trainable) - {n for n, _ in model.named_parameters()}
        if missing:
            raise UserError(
                f"checkpoint {path} does not fit this model ({len(missing)} unknown tensors)",
                "resume with the run's own config.json (model and LoRA settings)",
            )
        model.load_state_dict(trainable, strict=False)
        if optimizer is not None and (path / "optimizer.pt").is_file():
            optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu"))
        return json.loads((path / "state.json").read_text())
