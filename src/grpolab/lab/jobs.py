"""Training runs started from the web lab: a detached `grpolab train` process per run dir.

The process is started in its own session, so it outlives the page (and a page reload finds it again through
`runs/NAME/lab.json`). Stopping writes the run dir's STOP file: the trainer checkpoints after its current step and
exits, so the last checkpoint is kept.
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
from grpolab.files import atomic_write_text
from grpolab.rundir import RunDir

STATE_FILE = "lab.json"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def config_toml(cfg: LabConfig) -> str:
    """The config as TOML (what the started process reads with --config)."""
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


def start(cfg: LabConfig, root: Path, name: str) -> Path:
    if not name or any(c in name for c in "/\\") or name.startswith("."):
        raise UserError(f"run name {name!r} is not a plain directory name", "use letters, digits, - and _")
    out = root / name
    if out.exists():
        raise UserError(f"run directory {out} already exists", "pick another run name")
    root.mkdir(parents=True, exist_ok=True)
    cfg_path = root / f".{name}.toml"
    atomic_write_text(cfg_path, config_toml(cfg))
    log = open(root / f".{name}.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpolab.cli", "train", "--config", str(cfg_path), "--out", str(out), "--quiet"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    state = {"pid": proc.pid, "log": str(root / f".{name}.log")}
    atomic_write_text(root / f".{name}.{STATE_FILE}", json.dumps(state))
    return out


def _state(root: Path, name: str) -> dict:
    try:
        return json.loads((root / f".{name}.{STATE_FILE}").read_text())
    except (OSError, ValueError):
        return {}


def running(root: Path, name: str) -> bool:
    """The run's process exists and is not a zombie (a finished child of this process is reaped first)."""
    pid = _state(root, name).get("pid")
    if not isinstance(pid, int):
        return False
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (started before a page reload): nothing to reap
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop(root: Path, name: str) -> str:
    if not running(root, name):
        return f"{name} is not running"
    RunDir(root / name).request_stop()
    return f"stop requested: {name} checkpoints after its current step and exits"
