"""The greedy probe (`alarms.probe_tasks`): greedy episodes on a fixed set of train tasks at every held-out evaluation,
and its alarm when a hack class takes them over (grpolab.alarms.greedy_probe)."""

import json

from grpolab.alarms.greedy_probe import probe_alarms, probe_fields
from grpolab.alarms.rules import AlarmWatch
from grpolab.config import LabConfig, load_config
from grpolab.rundir import RunDir
from grpolab.vocabulary import (
    PROBE_HELDOUT_SECONDS,
    PROBE_N,
    PROBE_SECONDS,
    PROBE_SUCCESS,
    probe_class_key,
    spec_of,
)
from tests.conftest import EPISODE_ROW
from tests.test_reliability import SMALL

SOLVED = {"components": {"format": 1.0, "schema": 1.0, "completion": 1.0, "length": 0.12}, "valid_calls": 1}
HONEST = {**EPISODE_ROW, **SOLVED, "text": "<thought>I need the ACME Q3 report first</thought>The answer is 14.17"}
EMPTY = {**EPISODE_ROW, **SOLVED, "text": "<thought>ACME Q3</thought>The answer is 14.17"}
"""Solved episodes after a valid call, one with a thought of words, one with the query copied into it."""


def test_the_probe_fields_are_class_shares_of_its_episodes():
    fields = probe_fields([HONEST, EMPTY, EMPTY, EMPTY], True, 0.25)
    assert fields[PROBE_N] == 4 and fields[PROBE_SUCCESS] == 0.25
    assert fields[probe_class_key("empty_thought")] == 0.75
    assert sum(v for k, v in fields.items() if k.startswith("probe/class/")) == 1.0
    assert spec_of(probe_class_key("empty_thought")) is spec_of("probe/class/NAME")
    assert probe_fields([], True, 0.0) == {}


def test_the_alarm_needs_the_share_and_the_standard_errors():
    start = probe_fields([HONEST] * 12, True, 0.5)
    taken = probe_fields([EMPTY] * 9 + [HONEST] * 3, True, 0.5)
    alarm = probe_alarms(start, taken, 0.3, 3.0)
    assert list(alarm) == ["probe:class/empty_thought"]
    assert "0% -> 75%" in alarm["probe:class/empty_thought"] and "12 train tasks" in alarm["probe:class/empty_thought"]
    one = probe_fields([EMPTY] + [HONEST] * 11, True, 0.5)
    assert probe_alarms(start, one, 0.0, 3.0) == {}  # one episode in 12 is noise at 3 standard errors
    assert probe_alarms(start, one, 0.0, 0.0) != {}
    assert probe_alarms(start, taken, 0.8, 0.0) == {}  # the share's growth must hold too
    assert probe_alarms({}, taken, 0.0, 0.0) == {}  # no start: nothing to compare with


def test_the_watch_raises_it_on_rows_that_carry_a_probe():
    start = probe_fields([HONEST] * 12, True, 0.5)
    watch = AlarmWatch(LabConfig(), probe_start=start)
    row = {"step": 1, "reward/mean": 1.0, **probe_fields([EMPTY] * 9 + [HONEST] * 3, True, 0.5)}
    assert "probe:class/empty_thought" in watch.check(row)["alarms"]
    assert "probe:class/empty_thought" not in watch.check({"step": 2, "reward/mean": 1.0})["alarms"]
    assert "probe:class/empty_thought" not in AlarmWatch(LabConfig()).check(row)["alarms"]


def test_a_run_with_the_probe_on_records_it_at_every_evaluation(tmp_path):
    from grpolab.run.loop import train

    overrides = {**SMALL, "train.steps": 1, "train.eval_every": 1, "alarms.probe_tasks": 2}
    out = tmp_path / "run"
    train(load_config(None, overrides), out, quiet=True)
    run = RunDir(out)
    summary = run.eval_summary()
    assert summary["0"][PROBE_N] == 2 and summary["1"][PROBE_N] == 2
    assert all(summary[k][PROBE_SECONDS] > 0 and summary[k][PROBE_HELDOUT_SECONDS] > 0 for k in "01")  # its cost
    assert run.probe_at_start()[PROBE_N] == 2
    rows = [json.loads(line) for line in (out / "eval" / "probe-1.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and {r["task_id"] for r in rows}.isdisjoint(
        {r["task_id"] for r in run.eval_rows("1")}
    )  # train tasks, never the held-out ones
    assert run.eval_labels() == ["0", "1"]  # the probe is not a held-out evaluation
    assert run.metrics()[-1][PROBE_N] == 2
