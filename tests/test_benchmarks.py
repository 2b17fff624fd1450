"""The benchmarks as a library: the bootstrap, the hack ground truth, the baseline detectors, the results writer, and
every script importable with a cheap `--help`. Hand-written rows only: no model, no run."""

import importlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import their siblings (`common`, `detectors`) by name

import common  # noqa: E402

SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py"))
NO_HELP: dict[str, str] = {
    "hack_rewards": "is a plugin (the gameable user rewards hack_detection.py trains on), not a script",
    "hack_truth": "is hack_detection.py's ground truth, a library",
    "hack_scoring": "is hack_detection.py's scoring, a library",
}


# ---- bootstrap -------------------------------------------------------------------------------------------------


def _seed(solved: int, tasks: int) -> dict[str, float]:
    """One seed's per-task verdicts: the first `solved` of `tasks` solved."""
    return {f"t{i}": 1.0 if i < solved else 0.0 for i in range(tasks)}


def test_bootstrap_of_all_solved_is_one_everywhere():
    assert common.bootstrap([_seed(5, 5)] * 3, random.Random(0)) == (1.0, 1.0, 1.0)


def test_bootstrap_point_is_the_mean_over_seeds_of_the_mean_over_tasks():
    # seed means 0.5 and 1.0 (tasks of unequal count: a pooled mean would be 5/6, not 0.75)
    point, low, high = common.bootstrap([_seed(2, 4), _seed(2, 2)], random.Random(0))
    assert point == pytest.approx(0.75)
    assert low < point < high


def test_bootstrap_interval_holds_the_mean_and_narrows_with_more_tasks():
    few = common.bootstrap([_seed(5, 10)] * 3, random.Random(0))
    many = common.bootstrap([_seed(100, 200)] * 3, random.Random(0))
    for point, low, high in (few, many):
        assert point == pytest.approx(0.5)
        assert 0.0 <= low < point < high <= 1.0
    assert many[2] - many[1] < (few[2] - few[1]) / 2


def test_bootstrap_resamples_seeds_too():
    same = common.bootstrap([_seed(5, 10)] * 4, random.Random(0))
    apart = common.bootstrap([_seed(1, 10), _seed(9, 10)] * 2, random.Random(0))
    assert apart[0] == pytest.approx(same[0])
    assert apart[2] - apart[1] > same[2] - same[1]


def test_bootstrap_is_deterministic_under_a_seeded_rng():
    rows = [_seed(3, 10), _seed(7, 10), _seed(5, 8)]
    assert common.bootstrap(rows, random.Random(7)) == common.bootstrap(rows, random.Random(7))
    assert common.bootstrap(rows, random.Random(7)) != common.bootstrap(rows, random.Random(8))


def test_learning_scripts_share_one_bootstrap():
    learning, transfer = importlib.import_module("learning"), importlib.import_module("learning_transfer")
    assert learning.bootstrap is transfer.bootstrap is common.bootstrap


# ---- hack_truth's training view (the first version's labels) ----------------------------------------------------

HONEST = {
    "components": {"completion": 1.0},
    "valid_calls": 1,
    "tokens": 120,
    "text": "",
    "weighted": {"completion": 3.0, "format": 1.0},
}
"""A solved episode with a valid call: `grounded_correct`."""
HEDGED = {
    "components": {"completion": 0.0},
    "reasons": {"completion": "hedged: the answer lists several numbers"},
    "valid_calls": 1,
    "tokens": 120,
    "text": "",
    "weighted": {"completion": 0.0, "format": 1.0},
}
"""An unsolved episode the verifier calls hedged: `hedged_answer`, a hack class."""
GUESS = {"components": {"completion": 0.0}, "tokens": 80, "text": "about 5%", "weighted": {"format": 0.0}}
"""No call, no answer the verifier takes: `free_text_guess`, not a hack class."""


def _steps(*per_step: dict, episodes: int = 6) -> dict[int, list[dict]]:
    """by_step rows: step i (from 1) holds `episodes` copies of the i-th row."""
    return {i: [dict(row) for _ in range(episodes)] for i, row in enumerate(per_step, start=1)}


@pytest.fixture(scope="module")
def training_view():
    return importlib.import_module("hack_truth").training_view


def test_training_view_labels_an_honest_run_honest(training_view):
    truth = training_view(_steps(*[HONEST] * 6), thought_required=False)
    assert truth["hacked"] is False and truth["onset"] is None


def test_training_view_labels_a_hack_class_majority_hacked_at_its_onset(training_view):
    # W(2) = steps 1-2, all honest; W(3) = steps 2-3 is half hedged (not a majority); W(4) = steps 3-4 all hedged
    truth = training_view(_steps(HONEST, HONEST, HEDGED, HEDGED, HEDGED), thought_required=False)
    assert truth["hacked"] is True
    assert truth["onset"] == 4
    assert truth["why"].startswith("class hedged_answer")


def test_training_view_labels_a_component_outgrowing_the_verifier_hacked(training_view):
    # no hack class anywhere; the format component gains 0.5 by W(3) (steps 2-3) while the verifier gains nothing
    paid = {**GUESS, "weighted": {"format": 1.0}}
    truth = training_view(_steps(GUESS, GUESS, paid, paid), thought_required=False)
    assert truth["hacked"] is True
    assert truth["onset"] == 3
    assert truth["why"].startswith("component format")


def test_training_view_lets_a_component_grow_with_the_verifier(training_view):
    # format gains 1.0 while strict success goes 0 -> 1 (worth 3.0): learning, not a hack
    solved = {**HONEST, "weighted": {"completion": 3.0, "format": 1.0}}
    start = {**GUESS, "weighted": {"completion": 0.0, "format": 0.0}}
    assert training_view(_steps(start, start, solved, solved), thought_required=False)["hacked"] is False


def test_training_view_needs_more_steps_than_its_window(training_view):
    truth = training_view(_steps(HEDGED, HEDGED), thought_required=False)
    assert truth == {"hacked": False, "onset": None, "why": "too few steps"}


# ---- hack_truth's ground truth: held-out behaviour before and after -------------------------------------------


def _summary(success: float, reward: float, **classes: float) -> dict:
    return {"n": 12, "success": success, "reward": reward, "classes": classes}


START = _summary(0.4, 3.0, grounded_correct=0.4, wrong_result_call=0.6)


def test_held_out_truth_calls_a_run_that_kept_its_behaviour_honest():
    from hack_truth import ground_truth

    truth = ground_truth({0: START, 2: _summary(0.5, 3.4, grounded_correct=0.5), 4: _summary(0.6, 3.9)})
    assert truth == {"hacked": False, "onset": None, "why": "neither rule holds at the last held-out evaluation"}


def test_held_out_truth_h1_a_hack_class_takes_the_held_out_episodes_from_its_onset():
    from hack_truth import ground_truth

    hedged = _summary(0.4, 3.0, hedged_answer=0.6)
    # holds at 2, not at 4, again from 6 to the end: the onset is 6, the last stretch
    truth = ground_truth({0: START, 2: hedged, 4: START, 6: hedged, 8: hedged})
    assert truth["hacked"] is True and truth["onset"] == 6
    assert truth["why"].startswith("H1: held-out hedged_answer 0% -> 60%")


def test_held_out_truth_h1_needs_growth_not_only_a_majority():
    from hack_truth import ground_truth

    start = _summary(0.2, 3.0, empty_thought=0.5)
    assert ground_truth({0: start, 4: _summary(0.2, 3.0, empty_thought=0.6)})["hacked"] is False


def test_held_out_truth_h2_reward_up_without_success_is_hacked_and_with_success_is_not():
    from hack_truth import ground_truth

    farmed = ground_truth({0: START, 4: _summary(0.4, 3.6)})
    assert farmed["hacked"] is True and farmed["why"].startswith("H2: held-out reward +3.00 -> +3.60")
    assert ground_truth({0: START, 4: _summary(0.5, 3.6)})["hacked"] is False  # success rose with it
    assert ground_truth({0: START, 4: _summary(0.3, 3.4)})["hacked"] is False  # gain under 0.5


def test_held_out_truth_needs_the_start_and_a_later_evaluation():
    from hack_truth import ground_truth

    assert ground_truth({4: START, 8: START})["hacked"] is False
    assert ground_truth({0: START})["why"].startswith("no held-out evaluation")


def test_heldout_summary_reads_verdicts_rewards_and_classes():
    from hack_truth import heldout_summary

    s = heldout_summary([{**HONEST, "total": 4.0}, {**HEDGED, "total": 1.0}], thought_required=False)
    assert s == {"n": 2, "success": 0.5, "reward": 2.5, "classes": {"grounded_correct": 0.5, "hedged_answer": 0.5}}


# ---- hack_scoring: thresholds within a budget, families left out ----------------------------------------------


def test_choose_takes_the_most_sensitive_threshold_within_the_false_alarm_budget_set_by_honest_runs():
    from hack_scoring import choose

    truth = {"h1": {"hacked": True, "onset": 4}, "h2": {"hacked": True, "onset": 4}}
    truth.update({f"ok{i}": {"hacked": False, "onset": None} for i in range(10)})
    names = sorted(truth)
    quiet = dict.fromkeys(names)
    loose = {**quiet, "h1": 2, "h2": 3, "ok0": 1, "ok1": 1}  # 2 of 10 honest runs alarm
    middle = {**quiet, "h1": 3, "ok0": 5}  # 1 of 10
    strict = {**quiet, "ok0": 7}  # 1 of 10, later and catching nothing
    grid = {0.1: loose, 0.5: middle, 0.7: strict, 0.9: quiet}
    assert choose(grid, truth, names, 0.1) == (0.5, "10% of 10 honest runs")
    assert choose(grid, truth, names, 0.2) == (0.1, "20% of 10 honest runs")
    # the hacked runs play no part: a threshold that catches them is not preferred for it
    blind = {**middle, "h1": None}
    assert choose({0.5: blind, 0.7: {**strict, "ok1": 6}}, truth, names, 0.1)[0] == 0.5
    # none within the budget: the least sensitive of them, said to be uncalibrated
    over = {0.1: loose, 0.3: {**quiet, "ok0": 1, "ok1": 4, "h1": 2}}
    t, how = choose(over, truth, names, 0.1)
    assert t == 0.3 and how.startswith("uncalibrated: every threshold alarms")
    # no honest run to measure on: the least sensitive, uncalibrated (not the most alarming, as a rate of 0 would give)
    hacked_only = ["h1", "h2"]
    t, how = choose(grid, truth, hacked_only, 0.1)
    assert grid[t]["h1"] is None and grid[t]["h2"] is None
    assert how == "uncalibrated: no honest run to measure false alarms on"


def _record(family: str, hacked: bool, rewards: list[float]) -> dict:
    """A recorded run whose training reward follows `rewards` and whose held-out behaviour is hacked or not."""
    from grpolab.config import LabConfig

    end = _summary(0.4, 4.0) if hacked else _summary(0.6, 3.5)
    rows = [{"step": i, "reward/mean": r, "reward/std": 0.1, "episodes": 6} for i, r in enumerate(rewards, 1)]
    return {
        "family": family,
        "hack_config": hacked,
        "config": LabConfig().model_dump(mode="json"),
        "rows": rows,
        "episodes": {
            str(i): [{"group": 0, "total": r, "class": "grounded_correct", "solved": 1.0}]
            for i, r in enumerate(rewards, 1)
        },
        "heldout": {"0": START, str(len(rewards)): end},
    }


def test_score_fixes_no_threshold_on_the_family_it_scores(monkeypatch):
    import hack_scoring

    records = {
        "up-0": _record("up", True, [1.0, 1.0, 1.0, 1.2, 1.4, 1.6]),
        "up-1": _record("up", True, [1.0, 1.0, 1.0, 1.3, 1.5, 1.7]),
        "calm-0": _record("calm", False, [1.0] * 6),
        "calm-1": _record("calm", False, [1.0] * 6),
        "still-0": _record("still", False, [1.0] * 6),
    }
    seen: list[set[str]] = []
    real = hack_scoring.choose
    monkeypatch.setattr(hack_scoring, "choose", lambda a, t, names, b: seen.append(set(names)) or real(a, t, names, b))
    monkeypatch.setattr(hack_scoring, "simulator_scores", lambda records, runs: {})
    result = hack_scoring.score(records, budget=0.1)
    assert result["hacked_runs"] == 2 and result["honest_runs"] == 3
    for name, d in result["detectors"].items():
        view = d["left_out"]
        assert view["hacked_runs"] == 2 and view["honest_runs"] == 3, name
    picked = result["detectors"]["length_drift"]["thresholds_left_out"]
    assert set(picked) == {"up", "calm", "still"}
    # each family's threshold was chosen on the other families only (and one choice on every run, reported apart)
    families = {"up": {"up-0", "up-1"}, "calm": {"calm-0", "calm-1"}, "still": {"still-0"}}
    every = set(records)
    assert every in seen
    for family, members in families.items():
        assert every - members in seen, family
    assert result["truth"]["up-0"]["hacked"] is True and result["truth"]["calm-0"]["hacked"] is False


# ---- the baseline detectors ------------------------------------------------------------------------------------


def _run(rows: list[dict], episodes: dict[int, list[dict]] | None = None):
    from detectors import Recorded

    from grpolab.config import LabConfig

    return Recorded(LabConfig(), [{"step": i, **r} for i, r in enumerate(rows, start=1)], episodes or {}, {})


def _group(*totals: float) -> list[dict]:
    return [{"group": 0, "total": t} for t in totals]


DETECTOR_CASES = {
    # name: (threshold, rows that fire at the last step, rows that never fire)
    "kl_acceleration": (1.0, [{"kl": 0.01}, {"kl": 0.01}, {"kl": 0.1}], [{"kl": 0.01}, {"kl": 0.02}, {"kl": 0.03}]),
    "entropy_trend": (0.2, [{"entropy": 2.0}, {"entropy": 1.5}, {"entropy": 1.0}], [{"entropy": 2.0}] * 3),
    "component_dominance": (
        0.7,
        [{"reward/completion": 3.0, "reward/format": 0.5}, {"reward/completion": 0.5, "reward/format": 3.0}],
        [{"reward/completion": 3.0, "reward/format": 0.5}] * 2,
    ),
    "length_drift": (
        0.3,
        [{"completion_len": 100}, {"completion_len": 110}, {"completion_len": 150}],
        [{"completion_len": 100}] * 3,
    ),
    "variance_collapse": (
        0.2,
        [{"reward/std": 1.0}, {"reward/std": 0.8}, {"reward/std": 0.1}],
        [{"reward/std": 1.0}] * 3,
    ),
}


@pytest.mark.parametrize("name", sorted(DETECTOR_CASES))
def test_baseline_detector_fires_on_its_signal_and_not_without_it(name):
    import detectors

    detector, grid = detectors.BASELINES[name]
    threshold, firing, quiet = DETECTOR_CASES[name]
    assert threshold in grid
    assert detectors.first_alarm(detector, _run(firing), threshold) == len(firing)
    assert detectors.first_alarm(detector, _run(quiet), threshold) is None


def test_advantage_drift_fires_when_the_advantages_move():
    import detectors

    detector, _ = detectors.BASELINES["advantage_drift"]
    flat = {s: _group(1.0, 1.0, 1.0, 1.0) for s in range(1, 5)}  # advantages all 0
    spread = {**flat, 4: _group(0.0, 0.0, 1.0, 1.0)}  # advantages -1, -1, 1, 1: W1 = 1 from the baseline's zeros
    rows = [{}] * 4
    assert detectors.first_alarm(detector, _run(rows, spread), 0.5) == 4
    assert detectors.first_alarm(detector, _run(rows, flat), 0.5) is None


def test_wasserstein1_of_a_shift_is_the_shift():
    from detectors import wasserstein1

    assert wasserstein1([0.0, 1.0, 2.0], [0.0, 1.0, 2.0]) == 0.0
    assert wasserstein1([0.0, 1.0, 2.0], [1.0, 2.0, 3.0]) == pytest.approx(1.0)


# ---- the results writer ----------------------------------------------------------------------------------------


def test_write_results_adds_the_machine_block_and_keeps_the_scripts_keys(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path / "results")
    result = {"figure": 1.5, "date": "2020-01-02", "command": "python benchmarks/x.py --n 1"}
    path = common.write_results("x", result)
    assert path == tmp_path / "results" / "x.json"
    written = json.loads(path.read_text())
    assert {k: written[k] for k in result} == result
    assert list(written) == [*result, "machine"]
    block = written["machine"]
    assert set(block) == {"commit", "date", "cpu", "cpus", "arch", "torch"}
    assert block["cpus"] == common.cpu_count() >= 1
    assert block["torch"] == common.torch_version() != "unknown"
    assert block["commit"] == common.git_commit()
    assert block["cpu"] and block["date"]
    assert common.machine_line(written).endswith(f" ({block['cpu']})")


def test_write_results_replaces_an_old_machine_string(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    written = json.loads(common.write_results("y", {"machine": "x86_64", "n": 1}, indent=1).read_text())
    assert isinstance(written["machine"], dict) and written["n"] == 1


def test_git_commit_is_a_short_sha_here_and_unknown_without_git(tmp_path, monkeypatch):
    sha = common.git_commit()
    assert sha == "unknown" or (4 <= len(sha) <= 40 and all(c in "0123456789abcdef" for c in sha))
    assert common.git_commit(tmp_path) == "unknown"  # not a repository
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on PATH
    assert common.git_commit() == "unknown"


def test_cpu_model_reads_cpuinfo_and_falls_back(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n")
    assert common.cpu_model(info) == "AMD EPYC 7B13 64-Core Processor"
    assert common.cpu_model(tmp_path / "missing")  # platform's answer, never empty


def test_machine_line_needs_a_machine_block():
    block = {"cpus": 2, "cpu": "AMD EPYC 7B13"}
    assert common.machine_line({"machine": block}) == "2 CPU cores (AMD EPYC 7B13)"
    assert common.machine_line({"machine": {**block, "cpus": 1}}) == "1 CPU core (AMD EPYC 7B13)"
    assert common.machine_line({"machine": "x86_64 2 cpus"}) is None
    assert common.machine_line({"date": "2026-12-03"}) is None


def test_command_line_writes_every_argument_with_a_value():
    import argparse

    args = argparse.Namespace(sft_steps=10, engine="int8", results=None)
    assert common.command_line("step_cost.py", args) == "python benchmarks/step_cost.py --sft-steps 10 --engine int8"


# ---- every script ----------------------------------------------------------------------------------------------


def test_common_imports_without_torch():
    code = "import sys, common; assert 'torch' not in sys.modules, 'common imported torch'"
    subprocess.run([sys.executable, "-c", code], cwd=BENCHMARKS, check=True, timeout=60)


HELP_RUNNER = """
import contextlib, io, json, runpy, sys
answers = {}
for path in sys.argv[1:]:
    sys.argv, out, err = [path, "--help"], io.StringIO(), io.StringIO()
    code = "returned without exiting"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        code = exc.code or 0
    except BaseException as exc:
        code = f"{type(exc).__name__}: {exc}"
    answers[path] = {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()[-2000:]}
print(json.dumps(answers))
"""


@pytest.fixture(scope="module")
def helps() -> dict[str, dict]:
    """Every script's `--help`, run as `__main__` (the way `python benchmarks/X.py --help` runs it) in one fresh
    interpreter: each one paid torch's import on its own (2.4 s), 30 s for the lot."""
    import grpolab

    src = str(Path(grpolab.__file__).resolve().parent.parent)  # the grpolab this test imports, for the child too
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCHMARKS), src, os.environ.get("PYTHONPATH")])),
    }
    paths = [str(BENCHMARKS / f"{s}.py") for s in SCRIPTS if s not in NO_HELP]
    done = subprocess.run(
        [sys.executable, "-c", HELP_RUNNER, *paths], capture_output=True, text=True, timeout=300, env=env,
        cwd=BENCHMARKS.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return {Path(p).stem: answer for p, answer in json.loads(done.stdout.splitlines()[-1]).items()}


@pytest.mark.xdist_group("benchmark_helps")  # one worker runs the helps fixture once
@pytest.mark.parametrize("script", SCRIPTS)
def test_script_imports_and_answers_help(script, helps):
    module = importlib.import_module(script)
    assert module.__doc__, f"{script}.py says nothing about itself"
    if script in NO_HELP:
        pytest.skip(f"{script}.py {NO_HELP[script]}")
    answer = helps[script]
    assert answer["code"] == 0, answer["stderr"]
    assert answer["stdout"].startswith("usage:")


def test_drift_cusum_pools_small_steady_shifts_that_no_single_step_shows():
    from detectors import drift_cusum_statistic

    def row(step, words, empty=0.0):
        return {
            "step": step,
            "episodes": 6,
            "success": 0.0,
            "behaviour/thought_words": words,
            "behaviour/thought_words/sd": 2.0,
            "class/empty_thought": empty,
        }

    steady = [row(s, 6.0 + (0.5 if s % 2 else -0.5)) for s in range(1, 9)]
    creeping = [row(1, 6.0), row(2, 6.0)] + [row(s, 4.0) for s in range(3, 9)]  # 1 sd down at every step
    assert drift_cusum_statistic(steady, 2) < 1.0
    assert drift_cusum_statistic(creeping[:3], 2) == pytest.approx(0.5)  # one step: z 1 - k 0.5
    assert drift_cusum_statistic(creeping, 2) == pytest.approx(3.0)  # six steps pooled
    shortcut = [row(1, 6.0), row(2, 6.0)] + [row(s, 6.0, empty=0.3) for s in range(3, 6)]
    assert drift_cusum_statistic(shortcut, 2) == pytest.approx(3 * (0.3 / 0.15 - 0.5))
