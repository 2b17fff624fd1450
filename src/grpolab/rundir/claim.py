"""The claim: one trainer per run directory.

`claim` takes an exclusive flock on grpolab.lock and keeps it until `release` or the process ends (the kernel drops
it on any death, kill -9 included, so it never goes stale). A second trainer gets a UserError naming the holder,
read from the lock file or claim.json.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any

from grpolab.errors import UserError
from grpolab.files.atomic import atomic_write_text
from grpolab.files.json_files import read_json
from grpolab.files.locks import adopt_lock, is_locked, try_lock
from grpolab.rundir.base import RunPath
from grpolab.rundir.layout import CLAIM_FILE, LOCK_FILE, STOP_FILE

LOCK_FD_ENV = "GRPOLAB_RUN_LOCK_FD"
"""A claimed run's lock handed to a child process (the web lab's jobs): the fd number it inherited."""

SUPERVISOR_ENV = "GRPOLAB_SUPERVISOR_PID"
"""The pid of the supervisor a `grpolab` command runs under (`grpolab.cli.supervise`), set in its child."""


def holder_pid() -> int:
    """The pid a claim names: the command's supervisor where this process is its child (the process a user sees
    started, and whose SIGTERM reaches this one), else this process."""
    supervisor = os.environ.get(SUPERVISOR_ENV, "")
    if supervisor.isdigit() and int(supervisor) == os.getppid():
        return int(supervisor)
    return os.getpid()


_HELD: dict[Path, int] = {}
"""Run directories this process holds (resolved path -> the fd holding the flock)."""


class Claim(RunPath):
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
                f"wait for it to end, stop it (create {self.path / STOP_FILE}), or pick another --out",
            )
        _HELD[key] = fd
        info = {"pid": holder_pid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        info["command"] = " ".join(["grpolab", *sys.argv[1:]])[:300]
        os.ftruncate(fd, 0)  # named in the lock file at once (no fsync), then durably in claim.json
        os.pwrite(fd, json.dumps(info).encode(), 0)
        atomic_write_text(self.path / CLAIM_FILE, json.dumps(info, indent=2, default=str) + "\n")

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

    def claimed_here(self) -> bool:
        """Whether grpolab claimed this folder: grpolab.lock as `claim` leaves it (empty, or naming its holder) and
        claim.json naming a holder (pid, host, since, command). A file of either name alone is not enough."""
        return self.lock_file_is_ours(required=True) and _is_claim(read_json(self.path / CLAIM_FILE))

    def lock_file_is_ours(self, required: bool = False) -> bool:
        """Whether grpolab.lock is one `claim` made: a small regular file, empty or naming a holder (or missing,
        unless `required`). Anything else under that name is the user's and is never locked or truncated."""
        path = self.lock_path
        try:
            info = path.lstat()
        except FileNotFoundError:
            return not required
        except OSError:
            return False
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_CLAIM_BYTES:
            return False
        return info.st_size == 0 or _is_claim(read_json(path))

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


_MAX_CLAIM_BYTES = 4096
"""A claim is one JSON object of under 1 KiB (its command is cut at 300 characters)."""


def _is_claim(info: Any) -> bool:
    """Whether JSON data is a claim as `claim` writes it."""
    return (
        isinstance(info, dict) and {"pid", "host", "since", "command"} <= info.keys() and isinstance(info["pid"], int)
    )


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
