"""The run directory, and every read and write of it (docs/design.md, "Run directory").

The package's rooms: `layout` (the file names, declared once), `claim` (one trainer per directory: the flock and
claim.json), `artifacts` (config, JSON artifacts, step rows, evaluations, STOP), `checkpoints` (the SFT warm start
and GRPO checkpoints, torch files with checksums) and `snapshot` (the one defensive, read-only view that the report
and the web lab read a run through). `RunDir` is the writer's handle on all of them.

A run is recognised by its markers together, never by one file name: grpolab.lock as the claim leaves it and
claim.json naming a holder (a resume also takes config.json with checkpoints, as runs older than the claim have).
A non-empty directory without them is not a grpolab run and nothing is written into it; a run killed at any
moment resumes from its newest intact checkpoint, keeping whatever it sets aside or cuts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from grpolab.errors import UserError
from grpolab.rundir.artifacts import Artifacts
from grpolab.rundir.checkpoints import KEEP_CHECKPOINTS, Checkpoints, checkpoint_problem
from grpolab.rundir.claim import LOCK_FD_ENV, Claim
from grpolab.rundir.layout import CLAIM_FILE, LOCK_FILE, MANIFEST_FILE
from grpolab.rundir.snapshot import RunSnapshot, read_snapshot

if TYPE_CHECKING:
    from grpolab.config import LabConfig

__all__ = [
    "CLAIM_FILE",
    "KEEP_CHECKPOINTS",
    "LOCK_FD_ENV",
    "LOCK_FILE",
    "MANIFEST_FILE",
    "RunDir",
    "RunSnapshot",
    "checkpoint_problem",
    "read_snapshot",
]


class RunDir(Claim, Artifacts, Checkpoints):
    """A run directory: its claim, its files and its weights."""

    @classmethod
    def create(cls, path: str | Path, cfg: LabConfig) -> RunDir:
        """A new run directory holding `cfg`, claimed by this process; an existing run is never overwritten and
        a non-empty directory that is not a grpolab run is never written into."""
        run = cls(path)
        run._refuse_existing_run()
        run._make_dir()
        entries = {p.name for p in run.path.iterdir() if not p.name.startswith(f".{CLAIM_FILE}.")}  # temp files
        fresh = not entries or (entries == {LOCK_FILE} and run.lock_file_is_ours())  # a claim killed at once
        claiming = run.lock_file_is_ours(required=True) and run.in_use()  # another trainer, claiming it right now
        if not (fresh or claiming or run.claimed_here()):
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
        if not (run.claimed_here() or (run.checkpoints() and run.lock_file_is_ours())):
            raise UserError(
                f"{run.path} is not a grpolab run directory (config.json, but no {LOCK_FILE} + {CLAIM_FILE} "
                "from a grpolab training nor any checkpoint)",
                "pass a run directory that `grpolab train --out` made to --resume",
            )
        run.claim()
        return run

    def _refuse_existing_run(self) -> None:
        if self.has_steps() or self.checkpoints():
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
