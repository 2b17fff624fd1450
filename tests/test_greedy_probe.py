"""The greedy-probe detector of the hack-detection benchmark: greedy episodes on train tasks at each checkpoint of a
recorded run (benchmarks/greedy_probe.py), its start shared by runs that start alike, and the lab's probe alarm
replayed at the checkpoints a run had."""

import json
import shutil
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import their siblings by name

import greedy_probe as gp  # noqa: E402

from grpolab.config import LabConfig, load_config  # noqa: E402
from tests.test_reliability import SMALL  # noqa: E402


def probe(empty: float) -> dict:
    return {"n": 12, "success": 0.5, "classes": {"empty_thought": empty, "grounded_correct": 1.0 - empty}}


def test_the_benchmark_replays_the_lab_alarm_at_the_checkpoints_a_run_had():
    from detectors import Recorded, first_alarm, greedy_probe

    rows = [{"step": s} for s in range(1, 9)]
    by_step = {"0": probe(0.0), "2": probe(1 / 12), "4": probe(0.75), "6": probe(0.75)}
    run = Recorded(LabConfig(), rows, {}, {}, {}, by_step)
    assert first_alarm(greedy_probe, run, 3.0) == 4  # 0 -> 75% of 12: z 3.5
    assert first_alarm(greedy_probe, run, 4.0) is None
    assert first_alarm(greedy_probe, run, 0.0) == 4  # 1 of 12 is under drift_share 0.3 at any z
    assert first_alarm(greedy_probe, Recorded(LabConfig(), rows, {}, {}), 0.0) is None  # not measured
    assert gp.alarms(by_step, 3, 0.3, 3.0) == {}  # before step 4, only step 2's checkpoint
    assert list(gp.alarms(by_step, 5, 0.3, 3.0)) == ["probe:class/empty_thought"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A 1-step tiny run with checkpoints at steps 0 and 1 (copy it before changing it)."""
    from grpolab.run.loop import train

    out = tmp_path_factory.mktemp("probe") / "run"
    train(load_config(None, {**SMALL, "train.steps": 1, "train.checkpoint_every": 1, "train.eval_limit": 1}), out)
    return out


def test_load_step_reads_one_kept_checkpoint_and_names_what_it_cannot(trained, tmp_path):
    from grpolab.engine.policy import build_policy
    from grpolab.errors import UserError
    from grpolab.rundir import RunDir

    run = RunDir(shutil.copytree(trained, tmp_path / "run"))
    model, _, _ = build_policy(run.read_config())
    assert run.load_step(1, model)["step"] == 1 and run.load_step(0, model)["step"] == 0
    with pytest.raises(UserError, match=r"no checkpoint of step 5 \(kept: 0, 1\)"):
        run.load_step(5, model)
    weights = tmp_path / "run" / "checkpoints" / "step-1" / "trainable.pt"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(UserError, match="step-1 is damaged"):
        run.load_step(1, model)


def test_run_probe_decodes_every_checkpoint_and_shares_the_start(trained, tmp_path):
    from grpolab.rundir import RunDir

    first = shutil.copytree(trained, tmp_path / "runs" / "a")
    assert [s for s, _ in RunDir(first).checkpoints()] == [0, 1]
    got = gp.run_probe(first)
    assert sorted(got) == ["0", "1"] and got["0"]["n"] == got["1"]["n"] > 0
    assert json.loads((first / gp.CACHE).read_text()) == got
    starts = json.loads((tmp_path / "runs" / gp.STARTS).read_text())
    assert list(starts.values()) == [got["0"]]
    twin = tmp_path / "runs" / "b"  # a run that starts alike: its start is read, not decoded again
    shutil.copytree(first, twin)
    (twin / gp.CACHE).unlink()
    key = next(iter(starts))
    (tmp_path / "runs" / gp.STARTS).write_text(json.dumps({key: {**got["0"], "n": 99}}))
    assert gp.run_probe(twin)["0"]["n"] == 99
