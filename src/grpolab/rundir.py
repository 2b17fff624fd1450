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
    runs/NAME/grpolab.lock          flock-ed by the one process that trains into the run (never replaced)
    runs/NAME/claim.json            who holds it (pid, host, since, command)

Whole-file writes are atomic (`grpolab.files`); metric and episode rows are appended. Resume rewinds both to the
last intact checkpoint's step, so no step is recorded twice or lost.

Claiming: `create` (a new run) and `open_to_resume` take an exclusive flock on grpolab.lock and keep it until
`release` or the process ends (the kernel drops it on any death, kill -9 included, so it never goes stale). A
second trainer gets a UserError naming the holder. A directory that is not empty and has neither grpolab.lock nor
claim.json is not a grpolab run, and nothing is written into it. Each checkpoint's manifest.json holds the size
and sha256 of its files; loading skips a checkpoint that does not match and falls back to the previous one.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpolab.errors import UserError
from grpolab.files import (
    adopt_lock,
    append_jsonl,
    atomic_write,
    atomic_write_dir,
    atomic_write_text,
    is_locked,
    read_json,
    read_jsonl,
    sha256_file,
    try_lock,
    write_jsonl,
)

if TYPE_CHECKING:
    from grpolab.config import LabConfig

KEEP_CHECKPOINTS = 2
LOCK_FILE = "grpolab.lock"
CLAIM_FILE = "claim.json"
MANIFEST_FILE = "manifest.json"
LOCK_FD_ENV = "GRPOLAB_RUN_LOCK_FD"
"""A claimed run's lock handed to a child process (the web lab's jobs): the fd number it inherited."""

_HELD: dict[Path, int] = {}
"""Run directories this process holds (resolved path -> the fd holding the flock)."""


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    @classmethod
    def create(cls, path: str | Path, cfg: LabConfig) -> RunDir:
        """A new run directory holding `cfg`, claimed by this process; an existing run is never overwritten and
        a non-empty directory that is not a grpolab run is never written into."""
        run = cls(path)
        run._refuse_existing_run()
        run._make_dir()
        entries = {p.name for p in run.path.iterdir()}
        if entries and not entries & {LOCK_FILE, CLAIM_FILE}:
            shown = ", ".join(sorted(entries)[:3]) + (", ..." if len(entries) > 3 else "")
            raise UserError(
                f"{run.path} is not empty and is not a grpolab run (it holds {shown})",
                "pick a new or empty directory for --out (grpolab never writes into other folders)",
            )
        run.claim()
        try:
            run._refuse_existing_run()  # another trainer may have finished a run here before we got the lock
            run.write_config(cfg)
        except BaseException:
            run.release()
            raise
        return run

    @classmethod
    def open_to_resume(cls, path: str | Path) -> RunDir:
        """An existing run directory, claimed by this process (to continue it)."""
        run = cls(path)
        if not run.is_run():
            raise UserError(f"{run.path} is not a grpolab run directory (no config.json)", "pass a run dir to --resume")
        run.claim()
        return run

    def _refuse_existing_run(self) -> None:
        if self.metrics_path.exists() or self.checkpoints():
            raise UserError(
                f"run directory {self.path} already has a run",
                f"resume it with --resume {self.path}, or pick another --out",
            )

    def _make_dir(self) -> None:
        fix = "pick a --out in a folder you can write to"
        if self.path.exists() and not self.path.is_dir():
            raise UserError(f"run directory {self.path} is an existing file", "pick a new directory name for --out")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create run directory {self.path} ({exc.strerror or exc})", fix) from None

    # ---- the claim: one trainer per run directory ----

    @property
    def lock_path(self) -> Path:
        return self.path / LOCK_FILE

    def claim(self) -> None:
        """Hold this run directory for this process (UserError naming the holder when another process has it)."""
        key = self.path.resolve()
        if key in _HELD:
            return
        fd = self._inherited_lock()
        if fd is None:
            try:
                fd = try_lock(self.lock_path)
            except OSError as exc:
                raise UserError(
                    f"cannot lock run directory {self.path} ({exc.strerror or exc})",
                    "pick a --out in a folder you can write to, on a file system with locks",
                ) from None
        if fd is None:
            raise UserError(
                f"run directory {self.path} is in use by {self.holder()}",
                f"wait for it to end, stop it (create {self.stop_path}), or pick another --out",
            )
        _HELD[key] = fd
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        info["command"] = " ".join(["grpolab", *sys.argv[1:]])[:300]
        os.ftruncate(fd, 0)  # named in the lock file at once (no fsync), then durably in claim.json
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self.write_json(CLAIM_FILE, info)

    def _inherited_lock(self) -> int | None:
        text = os.environ.get(LOCK_FD_ENV, "")
        if text.isdigit() and adopt_lock(int(text), self.lock_path):
            del os.environ[LOCK_FD_ENV]  # adopted once; our own children do not inherit it
            return int(text)
        return None

    @property
    def lock_fd(self) -> int:
        """The fd holding this process's claim (to hand the run to a child process with `pass_fds`)."""
        return _HELD[self.path.resolve()]

    def release(self) -> None:
        """Let go of the claim (closing our fd; a child that inherited it keeps the lock until it exits)."""
        fd = _HELD.pop(self.path.resolve(), None)
        if fd is not None:
            os.close(fd)

    def in_use(self) -> bool:
        """Whether a process (this one included) holds the claim: a training is running into this directory."""
        return self.path.resolve() in _HELD or is_locked(self.lock_path)

    def holder(self, wait_s: float = 2.0) -> str:
        """Who holds the claim, as the lock file (or claim.json) says: for messages, the lock itself is the
        authority. A holder that has just taken the lock names itself a moment later, so a missing or stale name
        is read again for up to `wait_s` seconds."""
        deadline = time.monotonic() + wait_s
        while True:
            for name in (LOCK_FILE, CLAIM_FILE):
                info = read_json(self.path / name)
                if isinstance(info, dict) and _alive(info.get("pid")):
                    pid, host, since, command = (info.get(k) for k in ("pid", "host", "since", "command"))
                    return f"pid {pid} on {host} since {since} ({command})"
            if time.monotonic() >= deadline:
                return "another process"
            time.sleep(0.05)

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
            (tmp / MANIFEST_FILE).write_text(json.dumps(_manifest(tmp), indent=1))

        target = self.path / "checkpoints" / f"step-{step}"
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
            aside = path.with_name(f"damaged-step-{step}-{int(time.time())}")
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
                    return self._load_checkpoint(path, model, optimizer)
                except UserError:
                    raise
                except Exception as exc:  # an unreadable file in a checkpoint without a manifest (older runs)
                    problem = f"{type(exc).__name__}: {str(exc)[:120]}"
            if notes is not None:
                notes.append(f"checkpoint {path.name} is damaged ({problem}): skipped")
        return None

    def _load_checkpoint(self, path: Path, model: Any, optimizer: Any | None) -> dict[str, Any]:
        import torch

        trainable = torch.load(path / "trainable.pt", map_location="cpu")
        missing = set(trainable) - {n for n, _ in model.named_parameters()}
        if missing:
            raise UserError(
                f"checkpoint {path} does not fit this model ({len(missing)} unknown tensors)",
                "resume with the run's own config.json (model and LoRA settings)",
            )
        state = json.loads((path / "state.json").read_text())
        model.load_state_dict(trainable, strict=False)
        if optimizer is not None and (path / "optimizer.pt").is_file():
            optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu"))
        return state


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:  # alive, someone else's
        return True
    except OSError:
        return False
    return True


def _manifest(folder: Path) -> dict[str, Any]:
    """Size and sha256 of every file of a checkpoint folder (written last, into the folder itself)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)
    return {"files": {str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": sha256_file(p)} for p in files}}


def checkpoint_problem(path: Path) -> str | None:
    """Why a checkpoint folder cannot be trusted (a file missing, cut short or changed), or None when it is
    intact. Checkpoints written before manifests existed are trusted here and checked by loading."""
    manifest = read_json(path / MANIFEST_FILE)
    if manifest is None:
        return None if not (path / MANIFEST_FILE).exists() else "unreadable manifest.json"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or "trainable.pt" not in files:
        return "manifest.json lists no trainable.pt"
    for name, want in files.items():
        f = path / name
        if not isinstance(want, dict) or not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != want.get("bytes"):
            return f"{name} has {f.stat().st_size} bytes, the manifest says {want.get('bytes')}"
        if sha256_file(f) != want.get("sha256"):
            return f"{name} does not match its checksum"
    return None
