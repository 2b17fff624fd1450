"""The forecast from a pilot (`grpolab.simulator.forecast`): re-scored under any weights, shortcuts reached by
edits, what it cannot know said, and `simulate --pilot` on a run's first step."""

from __future__ import annotations

import json

import pytest

from grpolab.config import load_config
from grpolab.errors import UserError
from grpolab.simulator.forecast import (
    REACH_FLOOR,
    Pilot,
    PilotEpisode,
    forecast,
    pilot_from_rows,
    reach_shortcuts,
    without_thought,
)
from grpolab.vocabulary import TOOL_CALL_PROB, class_key


def episode(cls: str, f: float, s: float, c: float, length: float, group: str = "0") -> PilotEpisode:
    return PilotEpisode(group, cls, {"format": f, "schema": s, "completion": c, "length": length}, length * 100)


PILOT = Pilot(
    [
        *[episode("grounded_correct", 1, 1, 1, 1.3)] * 3,
        *[episode("call_no_answer", 1, 1, 0, 0.6)] * 6,
        *[episode("free_text_guess", 0, 0, 0, 0.8)] * 7,
    ],
    "test pilot",
)


def cfg(weights: dict[str, float], **more):
    return load_config(None, {"reward.weights": weights, "rollout.group_size": 8, "train.prompts_per_step": 2, **more})


def moves(result) -> dict[str, float]:
    return {c: v["final"] - v["initial"] for c, v in result["classes"].items()}


def test_the_same_pilot_re_scored_under_other_weights_moves_the_other_way():
    """What-ifs need no new sampling: paying completion grows the correct class; paying only schema and shortness
    grows the calls without an answer, from the same 16 episodes."""
    honest = moves(
        forecast(PILOT, cfg({"format": 1, "schema": 1.5, "completion": 3, "length": -0.05}), steps=10, speed=5)
    )
    shortcut = moves(forecast(PILOT, cfg({"format": 0, "schema": 1, "completion": 0, "length": -1}), steps=10, speed=5))
    assert honest["grounded_correct"] > 0.2 and honest["free_text_guess"] < 0
    assert shortcut["call_no_answer"] > 0.2 and shortcut["grounded_correct"] < 0


def test_normalize_then_sum_and_other_scales_forecast_too():
    for more in ({"grpo.multi_objective_aggregation": "normalize_then_sum"}, {"grpo.scale_rewards": "none"}):
        out = forecast(
            PILOT, cfg({"format": 1, "schema": 1.5, "completion": 3, "length": -0.05}, **more), steps=5, speed=5
        )
        assert moves(out)["grounded_correct"] > 0, more


def test_a_forecast_is_seeded_and_says_what_it_cannot_know():
    c = cfg({"format": 1, "schema": 1.5, "completion": 3, "length": -0.05})
    a, b = forecast(PILOT, c, steps=4, runs=3), forecast(PILOT, c, steps=4, runs=3)
    assert a["iterations"] == b["iterations"]
    assert "dropped_thought" in a["unknown"] and "grounded_correct" not in a["unknown"]
    tiny = Pilot(PILOT.episodes[:4], "four episodes")
    assert any("fewer than" in n for n in forecast(tiny, c, steps=2)["notes"])
    assert "forecast accuracy" in a["accuracy_line"]


def test_a_weight_the_pilot_was_not_scored_with_is_refused():
    with pytest.raises(UserError, match="says_revenue"):
        forecast(PILOT, cfg({"completion": 1}), weights={"completion": 1, "says_revenue": 2})


DEMO_WEIGHTS = {"format": 1, "schema": 1.5, "completion": 3, "length": -0.05}
BRANCHED = Pilot(
    [
        *[episode("wrong_result_call", 1, 1, 0, 1.5)] * 12,
        *[episode("grounded_correct", 1, 1, 1, 1.5)] * 2,
        *[episode("free_text_guess", 0, 0, 0, 0.4)] * 2,
        # the no-thought branch: reached, not sampled; half of it solves (forced_branch.py's finding in miniature)
        *[
            PilotEpisode(
                "b", "dropped_thought", {"format": 0.75, "schema": 1, "completion": c, "length": 1.4}, 140, True
            )
            for c in (1, 0, 1, 0)
        ],
    ],
    "branched pilot",
)


def test_a_decision_flips_faster_than_a_class_reshapes_at_its_own_speed():
    """The thought-or-not decision (DECISION_CLASSES) moves at `decision_speed`: at the class speed the reached
    no-thought branch barely grows from its floor; at a decision speed 8x that, it grows by a fifth or more."""
    c = cfg(DEMO_WEIGHTS)
    slow = forecast(BRANCHED, c, steps=12, runs=32, speed=0.08, decision_speed=0.08, within_speed=0)
    fast = forecast(BRANCHED, c, steps=12, runs=32, speed=0.08, decision_speed=0.64, within_speed=0)
    assert moves(slow)["dropped_thought"] < 0.1 < 0.2 < moves(fast)["dropped_thought"]
    assert "dropped_thought" in fast["growing"] and fast["settings"]["decision_speed"] == 0.64
    # honest work, paid more than anything, grows at the class speed in both
    assert moves(slow)["grounded_correct"] > 0.1 and moves(fast)["grounded_correct"] > 0.1


def test_the_winner_split_over_seeded_runs_sums_to_one():
    out = forecast(BRANCHED, cfg(DEMO_WEIGHTS), steps=12, runs=32, speed=0.08, decision_speed=0.64, within_speed=0)
    assert set(out["winners"]) <= set(out["classes"]) and abs(sum(out["winners"].values()) - 1) < 1e-6
    assert list(out["winners"].values()) == sorted(out["winners"].values(), reverse=True)


def test_a_class_s_better_episodes_grow_inside_it_at_the_within_speed():
    """With `within_speed`, the solved half of the no-thought branch grows inside its class: the class's reward and
    the forecast's success rise over the steps; without it, the class's reward stays its pilot mean."""
    from grpolab.vocabulary import REWARD_MEAN, SUCCESS

    c = cfg(DEMO_WEIGHTS)
    frozen = forecast(BRANCHED, c, steps=12, runs=16, speed=0.08, decision_speed=0.64, within_speed=0)
    moving = forecast(BRANCHED, c, steps=12, runs=16, speed=0.08, decision_speed=0.64, within_speed=0.3)
    assert frozen["iterations"][0][REWARD_MEAN] == pytest.approx(moving["iterations"][0][REWARD_MEAN])
    assert moving["iterations"][-1][SUCCESS] > frozen["iterations"][-1][SUCCESS] + 0.05
    assert moving["iterations"][-1][REWARD_MEAN] > frozen["iterations"][-1][REWARD_MEAN]


def test_within_class_draws_follow_the_within_class_probabilities():
    import numpy as np

    from grpolab.simulator.forecast import _pick_within, _within_probs

    seg, K = np.array([0, 0, 0, 2, 2, 3]), 4
    inside = _within_probs(np.random.default_rng(0).normal(size=(3, 6)), seg, K)
    for cls in (0, 2, 3):
        drawn = _pick_within(
            inside, seg, K, np.full((3, 1, 20000), cls), np.random.default_rng(cls).random((3, 1, 20000))
        )
        for r in range(3):
            freq = np.bincount(drawn[r, 0], minlength=6) / 20000
            assert np.all(freq[seg != cls] == 0)
            assert np.allclose(freq[seg == cls], inside[r, seg == cls], atol=0.02)


TEXT = '<thought>I need the revenue first.</thought>\n<tool_call>{"name": "f", "arguments": {}}</tool_call>answer'


def test_without_thought_edits_only_an_opening_thought():
    assert without_thought(TEXT) == '<tool_call>{"name": "f", "arguments": {}}</tool_call>answer'
    assert without_thought(TEXT, replacement="...").startswith("<thought>...</thought>\n<tool_call>")
    assert without_thought("no thought here <thought>x</thought>") is None


def test_a_shortcut_nobody_sampled_is_reached_by_an_edit_and_grows_when_paid():
    """The demo's dropped thought: a pilot without one, an edit that drops the thought scores as the original minus
    its length; a reward that pays shortness grows it from its floor, one that pays format does not."""
    rows = [
        {"group": 0, "text": TEXT, "valid_calls": 1, "tokens": 120, "components": dict(e.components), "class": e.cls}
        for e in PILOT.episodes[:3]
    ]

    def rescore(row, text):  # the thought costs format where it is required, and tokens
        has = text.startswith("<thought>") and "..." not in text
        return {"format": 1.0 if has else 0.5, "schema": 1.0, "completion": 1.0, "length": len(text) / 100}

    reached = reach_shortcuts(PILOT, rows, rescore)
    added = [e for e in reached.episodes if e.reached]
    assert {e.cls for e in added} == {"dropped_thought", "empty_thought"} and len(added) == 6
    # the speed is given: the shipped one is fitted on real runs and may change
    short = forecast(reached, cfg({"format": 0, "schema": 1.5, "completion": 3, "length": -1}), steps=20, speed=5)
    start = short["classes"]["dropped_thought"]
    assert start["reached_by_edit"] and start["initial"] == pytest.approx(REACH_FLOOR / 16 / (1 + 2 * REACH_FLOOR / 16))
    assert "dropped_thought" in short["growing"]
    strict = forecast(reached, cfg({"format": 5, "schema": 1.5, "completion": 3, "length": -0.05}), steps=20, speed=5)
    assert "dropped_thought" not in strict["growing"]
    assert reach_shortcuts(PILOT, rows, rescore, thought_required=False) is PILOT


def test_the_envs_reference_solution_reaches_the_honest_class_once_per_task(finance):
    """A pilot that never solved a task still forecasts the honest class: each task's reference solution, scored by
    the env's own reward and classified like a sample, joins the pilot as a reached episode (once per task)."""
    from grpolab.models import model_token_counter
    from grpolab.simulator.forecast import env_references, env_rescorer

    config = cfg({"format": 1, "schema": 1.5, "completion": 3, "length": -0.05}, env="finance")
    count = model_token_counter(config.model)
    tasks = finance.tasks("train")[:2]
    rows = [{"task_id": t.id, "group": t.id, "text": "", "components": {}} for t in tasks for _ in range(2)]
    unsolved = Pilot([e for e in PILOT.episodes if e.cls != "grounded_correct"], "never solved")
    reached = reach_shortcuts(unsolved, rows, lambda row, text: None, reference=env_references(finance, count))
    assert reached.episodes == unsolved.episodes  # nothing scored: nothing added
    reached = reach_shortcuts(
        unsolved, rows, env_rescorer(finance, config, count), reference=env_references(finance, count)
    )
    added = [e for e in reached.episodes if e.reached]
    assert [e.group for e in added] == [f"reference:{t.id}" for t in tasks]
    assert {e.cls for e in added} == {"grounded_correct"}
    assert all(e.components["completion"] == 1.0 and e.tokens > 20 for e in added)
    paid = forecast(reached, config, steps=20, speed=1)
    assert paid["classes"]["grounded_correct"]["initial"] > 0 and "grounded_correct" in paid["growing"]
    assert env_references(finance, count)({"task_id": "no-such-task"}) is None


def test_pilot_rows_without_finite_components_are_left_out_and_counted():
    rows = [
        {"components": {"completion": 1.0}, "valid_calls": 1, "tokens": 50},
        {"components": {"completion": None}},
        {"text": "no components"},
    ]
    pilot = pilot_from_rows(rows, "rows")
    assert len(pilot.episodes) == 1 and "2 pilot episode(s)" in pilot.notes[0]


def test_simulate_pilot_forecasts_from_a_runs_first_step(cli, tmp_path):
    from grpolab.rundir import RunDir

    c = load_config(None, {"env": "arithmetic", "grpo.beta": 0.3, "rollout.group_size": 4})
    run = RunDir.create(tmp_path / "run", c)
    comps = {"format": 1.0, "schema": 1.0, "length": 0.8}
    good = {
        "components": {**comps, "completion": 1.0},
        "tokens": 80,
        "valid_calls": 1,
        "text": "<thought>I add the two numbers.</thought>\n12",
        "task_id": "x",
    }
    free = {
        "components": {**comps, "completion": 0.0, "schema": 0.0},
        "reasons": {"schema": "no tool call"},
        "tokens": 80,
    }
    run.append_episodes([{**good, "step": 1, "group": 0}] * 2 + [{**free, "step": 1, "group": 0}] * 2)
    run.append_episodes([{**free, "step": 2, "group": 0}] * 4)
    code, out, _ = cli("simulate", "--pilot", str(run.path), "--steps", "6", "--runs", "2", "--json")
    assert code == 0, out
    result = json.loads(out)
    assert result["forecast"] and result["pilot"]["episodes"] == 4 and result["settings"]["beta"] == 0.3
    assert result["classes"]["grounded_correct"]["final"] > result["classes"]["grounded_correct"]["initial"]
    code, out, _ = cli("simulate", "--pilot", str(run.path), "--steps", "6", "--runs", "2")
    assert code == 0 and "growing: grounded_correct" in out and "forecast accuracy" in out, out


def test_the_lab_forecasts_from_a_pilot_and_says_how_often_it_was_right(monkeypatch):
    """Where a pilot of the form's model and env exists (the demo's is shipped), the sliders re-score it: the cards
    name the pilot, what grows and the measured accuracy; weights the pilot was not scored with fall back to the
    class-profile simulator, which says it is one."""
    from grpolab.lab import handlers

    from .test_lab import FORM

    monkeypatch.setattr(handlers, "demo_pilot", lambda cfg: PILOT)
    values = {**FORM, "simulator.lr": 0.3, "simulator.steps": 20}
    cards, chart, _ = handlers.simulate_view(values)
    assert "forecast after 20 iterations from 16 pilot episodes (test pilot" in cards
    assert "forecast accuracy" in cards and "growing under these weights: grounded_correct" in cards
    assert "forecast:" in chart
    shortcut = {**values, "reward.weights.completion": 0.0, "reward.weights.length": -1.0}
    assert "growing under these weights: call_no_answer" in handlers.simulate_view(shortcut)[0]
    monkeypatch.setattr(handlers, "demo_pilot", lambda cfg: None)
    assert "class-profile simulator after 20 iterations" in handlers.simulate_view(values)[0]


def test_simulate_on_the_demo_config_forecasts_the_dropped_thought_from_the_shipped_pilot(cli):
    """`grpolab simulate --config demo.toml` reads the shipped samples of the demo's seeded model, as the lab does,
    and names the shortcut the demo's weights pay for before any GRPO step; another env, or a weight the pilot was
    not scored with, keeps the class-profile simulator."""
    from grpolab.config import DEMO_CONFIG
    from grpolab.simulator.forecast import demo_pilot

    code, out, _ = cli("simulate", "--config", str(DEMO_CONFIG), "--runs", "4", "--json")  # as many steps as a run
    assert code == 0, out
    result = json.loads(out)
    assert result["forecast"] and "dropped_thought" in result["growing"]
    assert result["settings"]["steps"] == load_config(DEMO_CONFIG).train.steps == 20
    last = result["iterations"][-1]  # a dropped thought opens with a tool call: the episodes still call (real: 100%)
    assert last[class_key("dropped_thought")] > 0.5 and last[TOOL_CALL_PROB] > 0.9
    assert result["pilot"]["episodes"] >= 100 and result["accuracy"]
    demo = load_config(DEMO_CONFIG)
    assert demo_pilot(demo) is not None
    assert demo_pilot(load_config(DEMO_CONFIG, {"env": "arithmetic"})) is None
    assert demo_pilot(load_config(DEMO_CONFIG, {"reward.weights": {**demo.reward.weights, "mine": 1.0}})) is None
    code, out, _ = cli("simulate", "--env", "arithmetic", "--steps", "3", "--runs", "2")
    assert code == 0 and out.startswith("simulation"), out


SMALL = ("--env", "arithmetic", "--steps", "3", "--runs", "2", "--json")


def test_simulate_pilot_reads_a_check_reports_no_thought_branch(cli, tmp_path):
    """A `check --save` report carries its episodes on the no-thought branch: the forecast from it has the class
    they sample, as reached, and says where it came from."""
    comps = {"format": 1.0, "schema": 1.0, "completion": 0.0, "length": 0.8}
    free = {
        "text": "<thought>I add them.</thought>\n<tool_call>\n"
        '{"name": "add", "arguments": {"a": 5, "b": 7}}\n</tool_call>\n<tool_response>12</tool_response>\n13',
        "components": comps,
        "valid_calls": 1,
        "tokens": 60,
        "task_id": "x",
    }
    skipped = {**free, "text": free["text"].split("\n", 1)[1], "components": {**comps, "format": 0.0}}
    report = tmp_path / "check.json"
    report.write_text(json.dumps({"pilot_episodes": [free] * 8, "branch_episodes": [skipped] * 4}))
    code, out, _ = cli("simulate", "--pilot", str(report), *SMALL)
    assert code == 0, out
    result = json.loads(out)
    assert result["classes"]["dropped_thought"]["reached_by_edit"]
    assert any("4 episode(s) of dropped_thought sampled on the no-thought branch" in n for n in result["notes"])
    report.write_text(json.dumps({"pilot_episodes": [free] * 8}))
    code, out, _ = cli("simulate", "--pilot", str(report), *SMALL)
    assert code == 0 and not any("no-thought branch" in n for n in json.loads(out)["notes"])
