"""The simulator: update math on the class policy, reward-hacking cases, calibration from real rows."""

import json
import math

import numpy as np
import pytest

from grpolab.behaviour import classify_episode
from grpolab.config import load_config
from grpolab.rewards.components import standard_names
from grpolab.simulator.simulate import (
    CLASSES,
    DEFAULT_PRIOR,
    ClassProfile,
    SimSettings,
    class_rewards,
    measure_profiles,
    prior_from_rows,
    sim_to_real,
    simulate,
)
from grpolab.vocabulary import SIM_TO_REAL, SIMULATOR, produced_by, reward_key

DEFAULT = {"format": 1.0, "schema": 1.5, "completion": 3.0, "length": -0.05}


@pytest.fixture(scope="module")
def profiles(finance):
    return measure_profiles(finance, lambda text: len(text) // 4)


def settings(weights=DEFAULT, steps=150, runs=8, beta=None, seed=0):
    cfg = load_config(None, {"reward.weights": weights, "grpo.beta": beta, "seed": seed})
    return SimSettings(cfg, steps=steps, runs=runs)


def run(profiles, weights=DEFAULT, **kw):
    return simulate(profiles, DEFAULT_PRIOR, settings(weights, **kw))["iterations"]


def test_profiles_come_from_the_real_reward(profiles):
    grounded, free, dummy = (profiles[c].components for c in ("grounded_correct", "free_text_guess", "dummy_tags"))
    assert grounded["completion"] == 1.0 and grounded["schema"] == 1.0
    assert free["completion"] == 0.0 and dummy["schema"] == 0.0
    assert profiles["verbose_correct"].tokens > 3 * profiles["grounded_correct"].tokens


def test_honest_reward_drives_success_up(profiles):
    it = run(profiles)
    assert it[0]["success"] < 0.2 and it[-1]["success"] > 0.8
    assert it[-1]["reward/mean"] > it[0]["reward/mean"] and it[-1]["hack_mass"] < it[0]["hack_mass"]


def test_warning_format_weight_without_completion_raises_dummy_tag_mass(profiles):
    weights = {"format": 5.0, "schema": 0.0, "completion": 0.0, "length": -0.05}
    result = simulate(profiles, DEFAULT_PRIOR, settings(weights))
    it = result["iterations"]
    assert it[-1]["hack_mass"] > 0.6 and it[-1]["success"] < it[0]["success"]
    assert result["classes"]["dummy_tags"]["final"] > 0.5  # the dummy-tag class takes over
    assert "reward hacking" in result["warnings"][0] and "dummy_tags" in result["warnings"][0]
    assert simulate(profiles, DEFAULT_PRIOR, settings())["warnings"] == []


def test_warning_huge_length_penalty_skips_the_work(profiles):
    """A severe verbosity penalty pays the shortest classes (a bare call, no reasoning, no answer) over solving."""
    it = run(profiles, {**DEFAULT, "length": -10.0})
    assert it[-1]["success"] < 0.1 < 0.8 < run(profiles)[-1]["success"]


def test_warning_large_beta_barely_moves(profiles):
    free = run(profiles)
    pinned = run(profiles, beta=50.0)
    assert pinned[-1]["kl"] < free[-1]["kl"] / 10 and free[-1]["kl"] > 0.001  # per-token k3, as the trainer logs
    assert abs(pinned[-1]["success"] - pinned[0]["success"]) < 0.05


def test_equal_rewards_leave_the_policy_alone():
    values = {"format": 1.0, "schema": 0.0, "completion": 0.0, "length": 0.1}
    flat = {c: ClassProfile(values, 10.0) for c in CLASSES}
    it = simulate(flat, DEFAULT_PRIOR, settings(steps=20, runs=2))["iterations"]
    assert it[-1]["kl"] == pytest.approx(0.0, abs=1e-12)


def test_seeded_and_banded(profiles):
    a, b = run(profiles, seed=3, steps=20), run(profiles, seed=3, steps=20)
    assert a == b
    assert all(r["success/p10"] <= r["success"] + 1e-9 <= r["success/p90"] + 2e-9 for r in a)


def test_class_rewards_are_weighted_sums(profiles):
    table = class_rewards(profiles, DEFAULT)
    i = CLASSES.index("grounded_correct")
    expected = 1.0 + 1.5 + 3.0 - 0.05 * profiles["grounded_correct"].tokens / 100
    assert table[i, -1] == pytest.approx(expected)
    assert np.allclose(table[:, :-1].sum(1), table[:, -1])


def test_calibration_classifies_scored_rows():
    rows = [
        {"components": {"completion": 1.0}, "tokens": 90, "valid_calls": 2},
        {
            "components": {"completion": 0.0},
            "reasons": {"completion": "no final answer", "schema": "1/1 calls valid"},
            "valid_calls": 1,
            "tokens": 40,
        },
        {
            "components": {"completion": 0.0},
            "reasons": {"schema": "no tool call, but the task needs one"},
            "tokens": 120,
            "text": "I think it rose.",
        },
    ]
    assert [classify_episode(r) for r in rows] == ["grounded_correct", "call_no_answer", "free_text_guess"]
    prior = prior_from_rows(rows)
    assert sum(prior.values()) == pytest.approx(1.0) and prior["free_text_guess"] > prior["malformed_call"]


def test_sim_to_real_gap():
    sim = {
        "iterations": [
            {"step": 0, "success": 0.1, "tool_call_prob": 0.5},
            {"step": 1, "success": 0.3, "tool_call_prob": 0.7},
        ]
    }
    gap = sim_to_real(sim, [{"step": 1, "success": 0.5, "tool_call_prob": 0.7}])
    assert gap == {"tool_call_prob": 0.0, "success": pytest.approx(0.2)}


def test_curves_use_the_trainers_metric_names(profiles):
    """One vocabulary: the simulator's curves carry the names the trainer logs and the page charts."""
    row = run(profiles, steps=2)[-1]
    names = {s.name for s in produced_by(SIMULATOR) if not s.family} | {reward_key(n) for n in standard_names()}
    assert names <= set(row)


def test_simulate_against_a_real_run_follows_its_config_and_first_step(cli, tmp_path):
    import json

    from grpolab.rundir import RunDir

    cfg = load_config(None, {"env": "arithmetic", "grpo.beta": 0.3, "rollout.group_size": 4})
    run = RunDir.create(tmp_path / "run", cfg)
    free = {"components": {"completion": 0.0}, "reasons": {"schema": "no tool call"}, "tokens": 80, "text": "12"}
    good = {"components": {"completion": 1.0}, "tokens": 90, "valid_calls": 1}
    run.append_episodes([{**good, "step": 1}] * 3 + [{**free, "step": 1}] + [{**free, "step": 2}] * 8)
    run.append_metrics({"step": 1, "success": 0.75, "tool_call_prob": 0.75, "kl": 0.0, "reward/mean": 3.0})
    code, out, _ = cli("simulate", "--real", str(run.path), "--steps", "3", "--runs", "2", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["settings"]["beta"] == 0.3  # the run's config, not the defaults (0.05)
    # the prior is the first step's sampled episodes (3 correct of 4), not later steps
    assert result["classes"]["grounded_correct"]["initial"] > result["classes"]["free_text_guess"]["initial"]
    assert set(result["sim_to_real"]) == set(SIM_TO_REAL)


@pytest.mark.parametrize("bad", ["1" + "0" * 400, "1.7e308", "-1.7e308", "NaN"], ids=["bigint", "max", "-max", "nan"])
def test_simulate_against_a_run_whose_metrics_cannot_be_compared_exits_2(cli, tmp_path, run_with, bad):
    """A 400-digit integer raised OverflowError; +-1.7e308 printed an infinite gap; NaN compared nothing, exit 0."""
    run = run_with(tmp_path / "run", bad, where=("metrics",))
    code, out, err = cli("simulate", "--real", str(run), "--steps", "3", "--runs", "2")
    flat = " ".join(err.split())
    assert code == 2 and "metrics.jsonl: 22 value(s) not finite or beyond ±1e+15" in flat, err
    assert "no values to compare with" in flat and "inf" not in out, (out, err)


def test_simulate_against_a_run_with_some_values_left_out_names_them(cli, tmp_path, run_with):
    run = run_with(tmp_path / "run")
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "kl": 1.7e308, "success": ' + "9" * 400 + ', "reward/mean": 0.5}\n')
    code, out, err = cli("simulate", "--real", str(run), "--steps", "3", "--runs", "2", "--json")
    assert code == 0 and "2 value(s) not finite" in " ".join(err.split()), err
    result = json.loads(out)
    assert all(math.isfinite(v) for v in result["sim_to_real"].values()) and result["sim_to_real"]


def test_weights_that_make_the_simulation_non_finite_exit_2(cli):
    """Weights of 1e308 printed NaN for every curve and exited 0."""
    code, out, err = cli("simulate", "--weights", "1e308,1e308,1e308,1e308", "--steps", "3", "--runs", "2")
    flat = " ".join(err.split())
    assert code == 2 and "reward weights" in flat and "--weights" in flat and "nan" not in out, err
