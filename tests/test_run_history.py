"""What a run directory has recorded is never lost: a resume that cannot use a checkpoint says so and keeps the rows it
cuts, a refused or damaged artifact is named and set aside, and a folder that is not a run is never taken for one."""

import json
import os
import shutil
from pathlib import Path

import pytest

from grpolab.config import load_config
from grpolab.errors import UserError
from grpolab.rundir import RunDir
from tests.test_reliability import SMALL, one_line

pytestmark = pytest.mark.xdist_group("test_run_history")  # its module fixtures train a run: once, in one worker

TRAINED = {**SMALL, "train.steps": 2, "train.checkpoint_every": 1, "train.sft_steps": 1, "train.sft_batch_size": 1}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished 2-step run with an SFT warm start and checkpoints step-1 and step-2 (copy it before changing it)."""
    from grpolab.run.loop import train

    out = tmp_path_factory.mktemp("history") / "run"
    train(load_config(None, TRAINED), out, quiet=True)
    assert [s for s, _ in RunDir(out).checkpoints()] == [1, 2]
    return out


@pytest.fixture()
def run(trained, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def spoken(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())  # rich wraps lines


def resume(run: Path, steps: int) -> None:
    from grpolab.run.loop import train

    cfg = RunDir(run).read_config()
    cfg.train.steps = steps
    train(cfg, run, resume=True)


def cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def test_a_resume_with_every_checkpoint_damaged_keeps_the_rows_it_cuts(run, capsys):
    metrics, episodes = lines(run / "metrics.jsonl"), lines(run / "episodes.jsonl")
    assert [json.loads(m)["step"] for m in metrics] == [1, 2] and episodes
    for _, folder in RunDir(run).checkpoints():
        cut_short(folder / "trainable.pt")
    capsys.readouterr()
    resume(run, 0)
    err = spoken(capsys)
    assert "step-2 is damaged" in err and "step-1 is damaged" in err, err
    kept = [p for p in (run / "checkpoints").iterdir() if p.name.startswith("rows-after-step-0")]
    assert len(kept) == 1, sorted(p.name for p in (run / "checkpoints").iterdir())
    assert lines(kept[0] / "metrics.jsonl") == metrics and lines(kept[0] / "episodes.jsonl") == episodes
    assert f"kept in {kept[0]}" in err and "steps 1-2" in err, err
    assert (run / "metrics.jsonl").read_text() == ""  # started over: no step is recorded twice


def test_a_refused_checkpoint_pickle_is_named_and_set_aside(run, capsys):
    import torch

    from grpolab.files.atomic import sha256_file

    class Payload:
        def __reduce__(self):
            return (os.getcwd, ())  # harmless if it ever ran; torch's weights-only loader must refuse it

    folder = run / "checkpoints" / "step-2"
    torch.save({"weights": Payload()}, folder / "trainable.pt")
    manifest = json.loads((folder / "manifest.json").read_text())  # the forger rewrites the manifest too
    data = folder / "trainable.pt"
    manifest["files"]["trainable.pt"] = {"bytes": data.stat().st_size, "sha256": sha256_file(data)}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    resume(run, 2)
    err = spoken(capsys)
    assert "checkpoint step-2 cannot be loaded" in err and "UnpicklingError" in err, err
    assert "resumed" in err and "from step 1" in err, err
    aside = [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("damaged-step-2")]
    assert len(aside) == 1 and f"kept as {aside[0]}" in err, err
    assert [json.loads(m)["step"] for m in lines(run / "metrics.jsonl")] == [1, 2]


def test_a_truncated_warm_start_exits_2_naming_it(cli, run):
    warm = run / "sft" / "trainable.pt"
    assert json.loads((run / "sft" / "manifest.json").read_text())["files"]["trainable.pt"]["sha256"]
    cut_short(warm)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != "grpolab.lock"}
    for argv in (("eval", "--run", str(run), "--limit", "1"), ("train", "--resume", str(run), "--quiet")):
        code, _, err = cli(*argv)
        assert code == 2 and f"SFT warm start {warm} is damaged" in one_line(err), (argv, err)
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != "grpolab.lock"}
    assert after.keys() == before.keys() and all(after[p] == before[p] for p in before if p.name != "claim.json")


def test_a_damaged_warm_start_is_set_aside_and_redone_when_the_run_starts_over(run, capsys):
    from grpolab.rundir import checkpoint_problem

    for _, folder in RunDir(run).checkpoints():
        cut_short(folder / "trainable.pt")
    cut_short(run / "sft" / "trainable.pt")
    capsys.readouterr()
    resume(run, 0)
    err = spoken(capsys)
    aside = [p.name for p in (run / "sft").iterdir() if p.name.startswith("damaged-trainable")]
    assert len(aside) == 1 and "SFT warm start" in err and aside[0] in err, err
    assert checkpoint_problem(run / "sft") is None  # redone, with its manifest


def test_a_warm_start_is_not_adopted_from_a_damaged_run(run, tmp_path):
    cut_short(run / "sft" / "trainable.pt")
    new = RunDir(tmp_path / "new")
    (tmp_path / "new").mkdir()
    with pytest.raises(UserError, match="SFT warm start .* is damaged"):
        new.adopt_warm_start(RunDir(run))
    assert list((tmp_path / "new").iterdir()) == []


def test_resume_refuses_a_folder_that_only_holds_a_config_json(cli, run, tmp_path):
    mine = tmp_path / "my-project"
    mine.mkdir()
    shutil.copy(run / "config.json", mine / "config.json")  # a valid config, but no run was ever made here
    (mine / "notes.txt").write_text("keep\n")
    code, _, err = cli("train", "--resume", str(mine), "--quiet")
    assert code == 2 and f"{mine} is not a grpolab run directory" in one_line(err), err
    assert sorted(p.name for p in mine.iterdir()) == ["config.json", "notes.txt"]
