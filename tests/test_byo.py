"""Bring your own agent, end to end: a folder `grpolab new-env` wrote (tasks in JSONL, a tools module, a TRL-shaped
reward plugin, a config naming them) runs every command from another folder, each in a fresh process, with no
wrapper: check, train, train --resume, eval --run, compare, report, export-trl."""

import json
import os
import subprocess
import sys
from pathlib import Path

from grpolab.scaffold import new_env
from tests.conftest import cut_to_tiny, run_grpolab

SRC = str(Path(__file__).resolve().parents[1] / "src")


def tiny_folder(tmp_path: Path) -> Path:
    """A new-env folder with its config cut to the tiny model's size (the rest as written)."""
    (tmp_path / "user").mkdir()  # new-env never makes the folder it writes into
    folder = new_env("units", tmp_path / "user")
    cut_to_tiny(folder / "config.toml", steps=2)
    return folder


grpolab = run_grpolab  # the CLI in a fresh interpreter (tests.conftest)


def test_a_new_env_folder_runs_every_command_with_no_wrapper(tmp_path):
    folder = tiny_folder(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = elsewhere / "run"
    config = str(folder / "config.toml")

    checked = grpolab("check", "--config", config, "--prompts", "1", "--json", cwd=elsewhere)
    assert checked.returncode == 0, checked.stderr
    reference = json.loads(checked.stdout)["dry_run"]["references"][0]
    assert reference["components"]["names_unit"] == 1.0 and reference["weighted"]["names_unit"] == 0.5

    trained = grpolab("train", "--config", config, "--out", str(run), "--quiet", cwd=elsewhere)
    assert trained.returncode == 0, trained.stderr
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["rewards"] == [f"{folder / 'rewards.py'}:names_unit"] and recorded["plugins"] == []
    assert recorded["data"] == [str(folder / "tasks.jsonl")]
    assert recorded["data_env"]["tools"] == str(folder / "tools.py")
    rows = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert rows and all("names_unit" in r["components"] for r in rows)
    assert all("reward/names_unit" in json.loads(m) for m in (run / "metrics.jsonl").read_text().splitlines())

    resumed = grpolab("train", "--resume", str(run), "--steps", "3", "--quiet", cwd=elsewhere)
    assert resumed.returncode == 0, resumed.stderr
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 3

    evaluated = grpolab("eval", "--run", str(run), "--limit", "2", "--json", cwd=elsewhere)
    assert evaluated.returncode == 0, evaluated.stderr
    compared = grpolab("compare", "--run", str(run), "--limit", "1", "--json", cwd=elsewhere)
    assert compared.returncode == 0, compared.stderr
    assert "names_unit" in json.loads(compared.stdout)["right"]["episodes"][0]["components"]
    reported = grpolab("report", "--run", str(run), cwd=elsewhere)
    assert reported.returncode == 0, reported.stderr
    assert "reward/names_unit" in (run / "report.html").read_text()

    lab = subprocess.run(  # the lab's run view, in a process that imported nothing of the plugin beforehand
        [sys.executable, "-c", f"from pathlib import Path; from grpolab.lab.handlers import run_view; "
         f"print(run_view(Path({str(elsewhere)!r}), 'run'))"],
        cwd=elsewhere, env={**os.environ, "PYTHONPATH": SRC}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert lab.returncode == 0, lab.stderr
    assert "names_unit" in lab.stdout and "lab-error" not in lab.stdout

    script = elsewhere / "train_grpo.py"
    exported = grpolab("export-trl", "--config", config, "-o", str(script), cwd=elsewhere)
    assert exported.returncode == 0, exported.stderr
    assert str(folder / "rewards.py") in script.read_text() and "'names_unit': 0.5" in script.read_text()
