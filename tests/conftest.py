"""Shared fixtures: environments, the CLI in-process, the CLI as a subprocess, and a small training config."""

import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests import zygote

# Keep test caches out of the user's cache unless one is configured (the embedded tokenizer is cached there).
os.environ.setdefault("GRPOLAB_CACHE", os.path.join(tempfile.gettempdir(), "grpolab-test-cache"))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # One torch thread per xdist worker, in it and in every grpolab it starts (they inherit it). Set before torch is
    # imported: with 2 workers of 2 threads each on 2 cores, OpenMP's threads wait on each other, and four test files
    # took 154 s against 66 s with one thread each (2026-12-07, `-n 2`).
    os.environ.setdefault("OMP_NUM_THREADS", "1")

TINY_SETTINGS = {
    "model": "tiny",
    "rollout.group_size": 4,
    "rollout.max_new_tokens": 12,
    "train.prompts_per_step": 2,
    "train.eval_limit": 2,
    "train.eval_every": 0,
}
"""Config overrides for the tiny random model: a GRPO step in about a second."""


def cut_to_tiny(config: Path, steps: int) -> None:
    """A user's config.toml cut to the tiny model's size (`steps` GRPO steps, the rest as written)."""
    text = config.read_text()
    for key, value in {"group_size": 2, "max_new_tokens": 12, "steps": steps, "sft_steps": 1, "eval_limit": 2}.items():
        text = re.sub(rf"(?m)^{key} = \S+", f"{key} = {value}", text)
    config.write_text('model = "tiny"\n' + text)


def run_grpolab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`grpolab ARGS` as its own process from `cwd`, this checkout's source first on the path: forked from an
    interpreter that imported torch and transformers already (tests/zygote.py), grpolab itself loaded afresh."""
    return zygote.run(list(args), cwd, timeout=600)


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


def start_grpolab(*args: str) -> subprocess.Popen | zygote.Command:
    """`python -m grpolab.cli ARGS...` as its own process group (so a test can kill it like a user would), forked
    as `run_grpolab`'s commands are.

    Its stderr goes to an unlinked temp file, read back through `proc.stderr` (from the start, at any time): a pipe
    that nobody reads while the test waits would block a child that writes more than 64 KiB."""
    fd, path = tempfile.mkstemp(prefix="grpolab-stderr-")
    try:
        proc = zygote.popen(list(args), None, subprocess.DEVNULL, fd, new_session=True)
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


EPISODE_ROW = {
    "task_id": "pct_change-ACME-Q3",
    "kind": "pct_change",
    "prompt": "By what percent did ACME stock change in Q3?",
    "answer": "14.17",
    "text": "<thought>look it up</thought>The answer is 14.17",
    "tokens": 12,
    "turns": 0,
    "total": 1.0,
    "components": {"format": 1.0, "schema": 0.0, "completion": 0.0, "length": 0.12},
    "reasons": {"format": "well-formed", "schema": "no tool call", "completion": "no result number"},
    "breakdown": "F:+1.0 | S:+0.0 | C:+0.0 | L:-0.01",
    "valid_calls": 0,
}
"""A scored held-out episode row as the trainer writes it (eval/LABEL.jsonl, episodes.jsonl)."""
BAD = '"__BAD__"'


def write_run(folder: Path, bad: str = "0.5", where: tuple[str, ...] = ("metrics", "summary", "probes")) -> Path:
    """A small run directory as a 2-step run leaves it, with the raw JSON text `bad` (e.g. "1e400", "NaN", a
    400-digit integer, deeply nested brackets) written in place of the numbers of each artifact in `where`
    (metrics, summary, probes, episodes, config)."""
    import json

    from grpolab.config import load_config

    def dump(data: object) -> str:
        return json.dumps(data).replace(BAD, bad)

    (folder / "eval").mkdir(parents=True, exist_ok=True)
    config = load_config(None, {"model": "tiny"}).model_dump(mode="json")
    if "config" in where:
        config["grpo"]["kl_bound"] = "__BAD__"
    (folder / "config.json").write_text(dump(config))
    metrics = []
    for step in (1, 2):
        row: dict = {"step": step, "alarms": {}}
        for key in (
            "reward/mean",
            "reward/format",
            "kl",
            "kl_bound",
            "tool_call_prob",
            "tool_token_mass",
            "success",
            "policy_loss",
            "adv/mean_abs",
            "behaviour/thought_words",
            "class/free_text_guess",
        ):
            row[key] = "__BAD__" if "metrics" in where else 0.1 * step
        metrics.append(row)
    (folder / "metrics.jsonl").write_text("".join(dump(r) + "\n" for r in metrics))
    episode = {**EPISODE_ROW, **({"total": "__BAD__", "tokens": "__BAD__"} if "episodes" in where else {})}
    if "episodes" in where:
        episode["components"] = dict.fromkeys(EPISODE_ROW["components"], "__BAD__")
    for label in ("0", "2"):
        (folder / "eval" / f"{label}.jsonl").write_text(dump(episode) + "\n")
    (folder / "episodes.jsonl").write_text("".join(dump({**episode, "step": s}) + "\n" for s in (1, 1, 2)))
    heldout = {"heldout/success": "__BAD__" if "summary" in where else 0.5, "heldout/tool_call_prob": 0.5}
    (folder / "eval" / "summary.json").write_text(dump({"0": heldout, "2": heldout}))
    probe = {"probe": "dummy_tags", "task_id": "t", "breakdown": "F:+1.0", "gameable": False}
    probe.update(dict.fromkeys(("score", "honest", "margin"), "__BAD__" if "probes" in where else 1.0))
    learn = {"reward/mean": "__BAD__" if "probes" in where else 0.5, "pass_at_g": 1, "recommendation": "ok"}
    (folder / "preflight.json").write_text(dump({"probes": [probe], "learnability": learn}))
    return folder


@pytest.fixture(scope="session")
def run_with():
    return write_run
