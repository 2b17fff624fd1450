"""Shared fixtures: environments, the CLI in-process, the CLI as a subprocess, and a small training config."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Keep test caches out of the user's cache unless one is configured (the embedded tokenizer is cached there).
os.environ.setdefault("GRPOLAB_CACHE", os.path.join(tempfile.gettempdir(), "grpolab-test-cache"))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

TINY_SETTINGS = {
    "model": "tiny",
    "rollout.group_size": 4,
    "rollout.max_new_tokens": 12,
    "train.prompts_per_step": 2,
    "train.eval_limit": 2,
    "train.eval_every": 0,
}
"""Config overrides for the tiny random model: a GRPO step in about a second."""


@pytest.fixture(scope="session")
def finance():
    from grpolab.envs import get_env

    return get_env("finance")


@pytest.fixture(scope="session")
def arithmetic():
    from grpolab.envs import get_env

    return get_env("arithmetic")


@pytest.fixture()
def cli(capsys):
    """Run `grpolab ARGS...` in this process: (exit code, stdout, stderr)."""
    from grpolab.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exc:
            main(list(argv))
        out, err = capsys.readouterr()
        return exc.value.code, out, err

    return run


def start_grpolab(*args: str) -> subprocess.Popen:
    """`python -m grpolab.cli ARGS...` as its own process group (so a test can kill it like a user would).

    Its stderr goes to an unlinked temp file, read back through `proc.stderr` (from the start, at any time): a pipe
    that nobody reads while the test waits would block a child that writes more than 64 KiB."""
    fd, path = tempfile.mkstemp(prefix="grpolab-stderr-")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "grpolab.cli", *args],
            stdout=subprocess.DEVNULL,
            stderr=fd,
            start_new_session=True,
        )
        proc.stderr = open(path, encoding="utf-8", errors="replace")  # its own offset: reads from the start
    finally:
        os.close(fd)
        os.unlink(path)
    return proc


def write_small_config(folder: Path, checkpoint_every: int = 5) -> Path:
    """A TOML config for tiny-model runs through the CLI (G=2, 8 new tokens, one prompt per step)."""
    path = folder / "small.toml"
    path.write_text(
        "[rollout]\ngroup_size = 2\nmax_new_tokens = 8\n"
        f"[train]\nprompts_per_step = 1\neval_limit = 2\neval_every = 0\ncheckpoint_every = {checkpoint_every}\n"
    )
    return path


@pytest.fixture(scope="session")
def grpolab_process():
    return start_grpolab


@pytest.fixture(scope="session")
def small_config():
    return write_small_config


@pytest.fixture()
def tokenizer():
    """The embedded model's tokenizer; tests may set its chat template, which is restored afterwards (the loaded
    tokenizer is shared by every test)."""
    from grpolab.models import load_tokenizer

    tok = load_tokenizer()
    original = tok.chat_template
    yield tok
    tok.chat_template = original
