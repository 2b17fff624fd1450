"""Training runs started from the web lab: a detached `grpolab train` process per run dir.

The lab claims the run directory itself (`RunDir.create`, the same claim as `grpolab train --out`) and hands the
held lock to the process it starts (`pass_fds` + `LOCK_FD_ENV`), which continues the claimed run with
`grpolab train --resume`: no moment exists in which another job or a trainer on the command line could take the
directory. At most `LabLimits.max_jobs` jobs run at once (counted under a lock on the runs folder, so two
requests, or two labs, cannot both take the last slot).

The process runs with an isolated import path (`python -P`: neither the lab's working folder nor the script's is on
sys.path, so a `random.py` there is never imported in place of the standard library's) and in a working folder of
its own (the run directory: a `.env` or any other file of the lab's folder is never read as the job's own).

The process is started in its own session, so it outlives the page (and a page reload finds it again: a run is
running while its lock is held). Stopping writes the run dir's STOP file: the trainer checkpoints after its
current step and exits, so the last checkpoint is kept.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from grpolab.config import LabConfig
from grpolab.errors import UserError
from grpolab.files.atomic import atomic_write_text
from grpolab.files.locks import locked
from grpolab.lab.limits import LabLimits, run_name
from grpolab.rundir import LOCK_FD_ENV, RunDir

STATE_FILE = "lab.json"
START_LOCK = ".lab-jobs.lock"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def config_toml(cfg: LabConfig) -> str:
    """The config as TOML (kept beside the run as `.NAME.toml`, for `grpolab train --config` by hand)."""
    data = cfg.model_dump(mode="json")
    lines = [f"{k} = {_toml(v)}" for k, v in data.items() if not isinstance(v, dict) and v is not None]
    for section, values in data.items():
        if isinstance(values, dict):
            lines.append(f"\n[{section}]")
            for k, v in values.items():
                if isinstance(v, dict):
                    lines.append(f"{k} = {{ " + ", ".join(f"{json.dumps(a)} = {_toml(b)}" for a, b in v.items()) + " }")
                elif v is not None:
                    lines.append(f"{k} = {_toml(v)}")
    text = "\n".join(lines) + "\n"
    tomllib.loads(text)  # it must read back
    return text


def start(cfg: LabConfig, root: Path, name: str, limits: LabLimits | None = None) -> Path:
    """Claim runs/NAME for `cfg` and start training into it in the background (UserError when refused)."""
    limits = limits or LabLimits()
    name = run_name(name)
    limits.check_config(cfg)
    if Path(cfg.model).exists():  # a model folder the lab allowed, named from the lab's folder: the job runs elsewhere
        cfg = cfg.model_copy(update={"model": str(Path(cfg.model).resolve())})
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot create the runs folder {root} ({exc.strerror})", "start the lab with a writable --runs"
        )
    with locked(root / START_LOCK):
        busy = active(root)
        if len(busy) >= limits.max_jobs:
            raise UserError(
                f"{len(busy)} training jobs are running ({', '.join(busy)}), the lab's limit",
                "stop one, or wait for one to end",
            )
        out = root / name
        if out.exists():
            raise UserError(f"run directory {out} already exists", "pick another run name")
        run = RunDir.create(out, cfg)
        atomic_write_text(root / f".{name}.toml", config_toml(cfg))
        try:
            with open(root / f".{name}.log", "ab") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-P", "-m", "grpolab.cli", "train", "--resume", str(out.resolve()), "--quiet"],
                    cwd=out,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    pass_fds=(run.lock_fd,),
                    env={**os.environ, LOCK_FD_ENV: str(run.lock_fd)},
                )
        finally:
            run.release()  # our copy of the lock; the child's copy holds it until the child ends
    state = {"pid": proc.pid, "log": str(root / f".{name}.log")}
    atomic_write_text(root / f".{name}.{STATE_FILE}", json.dumps(state))
    return out


def active(root: Path) -> list[str]:
    """Names of the lab's jobs under `root` that are still running."""
    suffix = f".{STATE_FILE}"
    names = [p.name[1 : -len(suffix)] for p in root.glob(f".*{suffix}")] if root.is_dir() else []
    return sorted(n for n in names if running(root, n))


def _reap(root: Path, name: str) -> None:
    """Collect a finished child of this process (so it does not linger as a zombie)."""
    try:
        pid = json.loads((root / f".{name}.{STATE_FILE}").read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return
    if isinstance(pid, int):
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child (started before a page reload): nothing to reap
            pass


def running(root: Path, name: str) -> bool:
    """A training holds the run directory's claim (whoever started it: this lab, another one, or the CLI)."""
    _reap(root, name)
    return RunDir(root / name).in_use()


def stop(root: Path, name: str) -> str:
    if not running(root, name):
        return f"{name} is not running"
    RunDir(root / name).request_stop()
    return f"stop requested: {name} checkpoints after its current step and exits"
