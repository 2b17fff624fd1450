"""The metric vocabulary: each producer writes what `grpolab.vocabulary` declares it writes, and nothing else."""

from types import SimpleNamespace

import pytest

from grpolab.alarms.drift import step_behaviour
from grpolab.alarms.greedy_probe import probe_cost, probe_fields
from grpolab.alarms.rules import AlarmWatch
from grpolab.config import load_config
from grpolab.engine.policy import build_policy
from grpolab.engine.trainer import GRPOTrainer
from grpolab.envs import env_for
from grpolab.metrics import heldout_summary
from grpolab.rewards.components import register_reward, standard_names, unregister_reward
from grpolab.simulator.simulate import DEFAULT_PRIOR, SimSettings, measure_profiles, simulate
from grpolab.trl.backend import TRL_TO_LAB, lab_metrics
from grpolab.vocabulary import (
    ATTRIBUTION,
    BEHAVIOUR,
    CHART_GROUPS,
    EVAL,
    REWARD_MEAN,
    SIM_BANDS,
    SIMULATOR,
    SKIP_REASON,
    SPECS,
    SUCCESS,
    TRAINER,
    TRL,
    WATCH,
    band_key,
    produced_by,
    reward_key,
    spec_of,
)
from tests.conftest import EPISODE_ROW

ROW_INDEX = "step"
"""Every row's index, not a metric."""


def assert_writes_what_it_declares(producer: str, row: dict, absent_ok: set[str] = frozenset()) -> None:
    undeclared = [k for k in row if k != ROW_INDEX and (spec_of(k) is None or producer not in spec_of(k).producers)]
    assert not undeclared, f"{producer} writes names it does not declare: {undeclared}"
    missing = [s.name for s in produced_by(producer, required_only=True) if not s.family and s.name not in row]
    assert not missing, f"{producer} declares names it does not write: {missing}"
    written = {spec_of(k).name for k in row if k != ROW_INDEX}
    unwritten = [s.name for s in produced_by(producer) if s.name not in written and s.name not in absent_ok]
    assert not unwritten, f"{producer} never wrote {unwritten} here"


def test_the_table_is_complete():
    for spec in SPECS.values():
        assert spec.meaning and spec.unit and spec.producers, spec
        assert spec.group in ("", *CHART_GROUPS), spec
    assert all(any(s.group == g for s in SPECS.values()) for g in CHART_GROUPS)
    assert spec_of(reward_key("format")).name == reward_key("NAME")


@pytest.fixture()
def text_length_reward():
    register_reward("text_length", lambda r, task, env, ctx: (len(r.generated_text) % 13 / 13, "test"))
    yield
    unregister_reward("text_length")


def test_a_native_grpo_step_writes_what_the_trainer_declares(text_length_reward):
    cfg = load_config(
        None,
        {
            "model": "tiny",
            "rollout.group_size": 4,
            "rollout.max_new_tokens": 12,
            "train.prompts_per_step": 2,
            "reward.weights": {"text_length": 1.0, "format": 1.0},
        },
    )
    model, tok, ref = build_policy(cfg)
    m = GRPOTrainer(model, tok, env_for(cfg), cfg, ref).step(1).metrics
    assert m[ROW_INDEX] == 1
    assert {reward_key(n) for n in standard_names()} <= set(m)
    assert_writes_what_it_declares(TRAINER, m, absent_ok={SKIP_REASON})  # a step that updated is not skipped


def test_the_eval_summary_writes_what_eval_declares():
    def episode(kind: str, solved: bool) -> SimpleNamespace:
        score = SimpleNamespace(solved=solved, valid_calls=1, components={"schema": 1.0}, total=1.0)
        return SimpleNamespace(task=SimpleNamespace(kind=kind), score=score)

    summary = heldout_summary([episode("a", True), episode("b", False)])  # mixed kinds: the per-kind family too
    summary.update(probe_fields([EPISODE_ROW], True, 0.0))  # what the run loop adds with alarms.probe_tasks on
    summary.update(probe_cost(1.5, 6.0))
    summary["heldout/seconds"] = 6.0  # what the run loop adds: the evaluation's time (`grpolab.run.timing` reads it)
    assert_writes_what_it_declares(EVAL, summary)


def test_the_simulator_writes_what_it_declares(finance):
    cfg = load_config(None, {})
    profiles = measure_profiles(finance, lambda text: len(text) // 4)
    row = simulate(profiles, DEFAULT_PRIOR, SimSettings(cfg, steps=2, runs=2))["iterations"][-1]
    metrics = {k: v for k, v in row.items() if not k.endswith(tuple(f"/{b}" for b in SIM_BANDS))}
    assert all(band_key(k, b) in row for k in metrics if k != ROW_INDEX for b in SIM_BANDS)
    assert_writes_what_it_declares(SIMULATOR, metrics)


def test_the_trl_backend_maps_logs_to_what_it_declares():
    weights = {n: 1.0 for n in standard_names()}
    logs = {**{k: 0.5 for k in TRL_TO_LAB}, **{f"rewards/{n}/mean": 0.5 for n in weights}}
    assert_writes_what_it_declares(TRL, lab_metrics(logs, weights))


def test_the_alarm_watch_writes_what_it_declares():
    watch = AlarmWatch(load_config(None, {}))
    rows = [{ROW_INDEX: i, REWARD_MEAN: 1.0 + i, reward_key("format"): 0.1 * i, SUCCESS: 0.5} for i in range(1, 5)]
    first = watch.check(rows[0])  # too early to attribute: the attribution fields come once two windows exist
    assert_writes_what_it_declares(WATCH, first, absent_ok={ATTRIBUTION})
    for row in rows[1:]:
        last = watch.check(row)
    assert_writes_what_it_declares(WATCH, last)


def test_the_behaviour_summary_writes_what_it_declares(finance):
    task = finance.tasks("train")[0]
    row = {"text": finance.reference_transcript(task), "components": {"completion": 1.0}, "valid_calls": 2}
    assert_writes_what_it_declares(BEHAVIOUR, step_behaviour([row]))
