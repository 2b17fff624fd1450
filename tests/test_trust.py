"""Trusting the reward: probes, alarms and the report."""

import json
import math

import pytest

from grpolab.alarms.rules import check_alarms, welch_t
from grpolab.config import load_config
from grpolab.preflight.check import recommend
from grpolab.preflight.probes import PROBES, gameable_lines, run_probes

DEFAULT = {"format": 1.0, "schema": 1.5, "completion": 3.0, "length": -0.05}
FORMAT_ONLY = {"format": 5.0, "schema": 0.0, "completion": 0.0, "length": 0.0}


def count(text: str) -> int:
    return len(text) // 4


def test_the_battery_holds_the_documented_probes():
    assert set(PROBES) == {
        "dummy_tags",
        "empty_call",
        "call_without_answer",
        "fabricated_response",
        "hedged_answer",
        "confident_without_tools",
        "unknown_tool",
        "schema_invalid",
        "call_loop",
        "padding",
        "fenced_calls",
        "answer_only_in_thought",
    }


@pytest.mark.parametrize("env_name", ["finance", "arithmetic"])
def test_default_weights_are_not_gameable(request, env_name):
    env = request.getfixturevalue(env_name)
    results = run_probes(env, env.tasks("train") + env.tasks("heldout"), DEFAULT, 100, count)  # every task
    assert gameable_lines(results) == []
    assert all(r.margin > 0 for r in results)


def test_the_probes_run_each_tasks_reference_once_and_edit_that_run(finance, monkeypatch):
    """Every probe rebuilt its task's reference, running the reference's tool calls again each time (a forked child
    per call of a user's tool); inside run_probes a task's reference runs once, and the env is left as it was."""
    built: list[str] = []
    run = type(finance).reference_parts

    def counted(self, task):  # noqa: ANN001, ANN202
        built.append(task.id)
        return run(self, task)

    monkeypatch.setattr(type(finance), "reference_parts", counted)
    tasks = finance.tasks("train")[:3]
    assert run_probes(finance, tasks, DEFAULT, 100, count)
    assert sorted(built) == sorted(t.id for t in tasks)
    assert "reference_parts" not in vars(finance)
    finance.reference_transcript(tasks[0])
    assert len(built) == 4  # outside, each call runs it again


def test_the_probes_run_each_distinct_call_once_and_score_as_before(finance, monkeypatch):
    """The probes' edits of a task's honest transcript replay its calls: each of a user's tools ran in a forked
    child every time. Inside run_probes a call runs once per toolbox, and every score is the one it was."""
    from grpolab.rewards import replay

    tasks = finance.tasks("train")[:3]
    before = [
        (r.probe, r.task_id, r.score.total, r.score.reasons) for r in run_probes(finance, tasks, DEFAULT, 100, count)
    ]
    ran: list[str] = []
    run = replay.call_result

    def counted(toolbox, call):  # noqa: ANN001, ANN202
        if call.ok:  # a malformed call runs nothing: its error is the response
            ran.append(f"{id(toolbox)} {call.name} {json.dumps(call.arguments, sort_keys=True)}")
        return run(toolbox, call)

    monkeypatch.setattr(replay, "call_result", counted)
    with replay.calls_answered_once():
        after = run_probes(finance, tasks, DEFAULT, 100, count)
    assert [(r.probe, r.task_id, r.score.total, r.score.reasons) for r in after] == before
    assert ran and len(ran) == len(set(ran))  # each distinct call ran once
    ran.clear()
    run_probes(finance, tasks, DEFAULT, 100, count)
    assert len(ran) == len(set(ran))  # run_probes enters the scope itself
    from grpolab.rewards.score import score_transcript

    reference = finance.reference_transcript(tasks[0])
    for _ in range(2):
        score_transcript(finance, tasks[0], reference, DEFAULT, 100, count_tokens=count)
    assert len(ran) > len(set(ran))  # outside it, every replay runs its calls


def test_format_only_weights_are_gameable_by_dummy_tags(finance):
    results = run_probes(finance, finance.tasks("train")[:3], FORMAT_ONLY, 100, count)
    lines = gameable_lines(results)
    assert any(line.startswith("gameable: dummy_tags beats honest work by 0.00") for line in lines), lines
    assert "components format" in lines[0]


def test_probes_never_beat_honest_on_completion(finance):
    for r in run_probes(finance, finance.tasks("heldout")[:4], DEFAULT, 100, count):
        assert r.score.components["completion"] == 0.0 or r.probe in ("call_loop", "padding"), r.probe


def _rows(rewards, **extra):
    return [
        {"step": i + 1, "reward/mean": r, "kl": 0.01, "entropy": 1.0, "completion_len": 50.0, **extra}
        for i, r in enumerate(rewards)
    ]


def test_hacking_alarm_fires_when_reward_rises_and_heldout_does_not():
    cfg = load_config()
    rows = _rows([1.0, 1.1, 0.9, 2.5, 2.7, 2.6])
    alarms = check_alarms(rows, {0: 0.3, 6: 0.3}, cfg)
    assert "reward_hacking" in alarms and "Welch t" in alarms["reward_hacking"]
    assert "reward_hacking" not in check_alarms(rows, {0: 0.3, 6: 0.6}, cfg)  # held-out improved: honest progress
    assert "reward_hacking" not in check_alarms(_rows([1.0, 1.1, 0.9, 1.0, 1.05, 0.95]), {0: 0.3, 6: 0.3}, cfg)


def test_recorded_format_hack_stream_raises_the_alarm():
    """A metrics stream shaped like a gamed run: format reward to its ceiling, success flat at 0."""
    cfg = load_config(None, {"reward.weights": FORMAT_ONLY})
    rewards = [2.0, 2.3, 2.1, 3.9, 4.6, 5.0, 5.0, 5.0]
    heldout = {0: 0.0, 4: 0.0, 8: 0.0}
    fired = [check_alarms(_rows(rewards[:n]), {k: v for k, v in heldout.items() if k <= n}, cfg) for n in range(1, 9)]
    assert any("reward_hacking" in a for a in fired)


def test_stability_alarms():
    cfg = load_config()
    rows = _rows([1, 1])
    rows[-1].update({"kl": 0.5, "entropy": 0.01, "completion_len": 159.0})
    alarms = check_alarms(rows, {}, cfg)
    assert {"kl_bound", "entropy_collapse", "length_runaway"} <= set(alarms)
    assert "sampler_mismatch" not in alarms  # the exact engine logs no mismatch
    rows[-1]["mismatch/kl"] = 0.0003
    assert "sampler_mismatch" not in check_alarms(rows, {}, cfg)
    rows[-1]["mismatch/kl"] = 0.25  # the dynamic W8A8 copy of SmolLM2
    assert "0.250 nats/token, past alarms.mismatch_bound 0.05" in check_alarms(rows, {}, cfg)["sampler_mismatch"]


def test_welch_t():
    assert welch_t([1, 1], [2, 2]) == math.inf
    assert welch_t([1, 2, 3], [1, 2, 3]) == 0
    assert welch_t([0, 1, 0, 1], [2, 3, 2, 3]) > 2


def test_recommendations_name_the_reason():
    base = {"group_size": 8, "prompts": 4, "all_pass": [], "tool_call_prob": 0.5}
    assert recommend({**base, "frac_zero_std": 1.0, "all_fail": ["a"] * 4, "tool_call_prob": 0.0}).startswith(
        "no signal"
    )
    assert recommend({**base, "frac_zero_std": 1.0, "all_fail": ["a"] * 4}).startswith("too hard")
    assert recommend({**base, "frac_zero_std": 1.0, "all_fail": [], "all_pass": ["a"] * 4}).startswith("too easy")
    assert recommend({**base, "frac_zero_std": 0.75, "all_fail": ["a"] * 3}).startswith("weak signal")
    assert recommend({**base, "frac_zero_std": 0.25, "all_fail": ["a"]}).startswith("learnable")


def test_check_cli_flags_format_only_weights(tmp_path, grpolab_process):
    out = tmp_path / "preflight.json"
    proc = grpolab_process(
        "check",
        "--env",
        "finance",
        "--model",
        "tiny",
        "--weights",
        "5,0,0,0",
        "--prompts",
        "1",
        "--group-size",
        "2",
        "--save",
        str(out),
    )
    assert proc.wait(timeout=300) == 1, proc.stderr.read()
    report = json.loads(out.read_text())
    assert any(line.startswith("gameable: dummy_tags") for line in report["gameable"])
    assert {"dry_run", "probes", "learnability"} <= set(report)
    assert report["learnability"]["tool_call_prob"] == 0.0
    # the smoke test's episodes are the forecast's pilot, kept for `simulate --pilot` what-ifs
    assert len(report["pilot_episodes"]) == 2 and report["forecast"]["pilot"]["episodes"] == 2
    assert "forecast accuracy" in report["forecast"]["accuracy_line"]
    # and the same prompts once more where the episode cannot open its thought: the shortcut no sample took yet
    assert len(report["branch_episodes"]) == 2 and report["branch_seconds"] >= 0
    assert not any(row["text"].lstrip().startswith("<thought>") for row in report["branch_episodes"])
