"""The code environment and its sandbox: partial credit per assert, hostile code contained and scored 0."""

import os
from pathlib import Path

import pytest

from grpolab.config import load_config
from grpolab.envs import get_env
from grpolab.envs.code.sandbox import Limits, isolation_name, run_tests
from grpolab.envs.code.tasks import split_check
from grpolab.protocol import code_blocks
from grpolab.rewards.score import score_transcript
from grpolab.trust.probes import run_probes

ADD_TESTS = [
    ("assert candidate(1, 2) == 3", True),
    ("assert candidate(2, 2) == 4", True),
    ("assert candidate(-1, 1) == 0", True),
]
ADD = "def add(a, b):\n    return a + b\n"
FAST = Limits(wall_s=2.0, cpu_s=2)
PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env():
    return get_env("code")


def test_every_reference_solution_passes_all_its_tests(env):
    every = env.tasks("train") + env.tasks("heldout")  # all of HumanEval (incl. tests that call prompt helpers)
    tasks = [t for t in every if t.kind == "humaneval"] + [t for t in every if t.kind == "easy"][::5]
    for t in tasks:
        s = score_transcript(env, t, env.reference_transcript(t), count_tokens=len)
        assert s.components["completion"] == 1.0 and s.solved, (t.id, s.reasons["completion"])


def test_splits_and_kinds(env):
    train, held = env.tasks("train"), env.tasks("heldout")
    assert {t.kind for t in train} == {"easy", "humaneval"}
    assert sum(t.kind == "humaneval" for t in train + held) == 164
    assert not {t.id for t in train} & {t.id for t in held}
    assert not {t.meta["entry_point"] for t in train if t.kind == "easy"} & {
        t.meta["entry_point"] for t in held if t.kind == "easy"
    }


def test_partial_credit_per_assert():
    r = run_tests("def add(a, b):\n    return 3\n", ADD_TESTS, "add", limits=FAST)
    assert (r.passed, r.total) == (1, 3) and abs(r.fraction - 1 / 3) < 1e-9
    assert run_tests(ADD, ADD_TESTS, "add", limits=FAST).fraction == 1.0


def test_humaneval_check_split_ignores_constant_asserts():
    setup, tests = split_check(
        "import math\n\ndef check(candidate):\n    x = 2\n    assert candidate(x) == 4\n"
        "    assert True, 'debug'\n    for i in range(3):\n        assert candidate(i) >= 0\n"
    )
    assert setup == "import math"
    assert [c for _, c in tests] == [False, True, False, True]


def test_code_block_extraction():
    assert code_blocks("text\n```python\nx = 1\n```\nmore") == ["x = 1\n"]
    assert code_blocks("```py\ny = 2") == ["y = 2"]  # unclosed fence runs to the end
    assert code_blocks("no code here") == []


HOSTILE = {
    "reads_outside": "open('/etc/passwd').read()\n" + ADD,
    "opens_socket": "import socket\nsocket.socket().connect(('127.0.0.1', 22))\n" + ADD,
    "fork_bomb": "import os\nwhile True:\n    os.fork()\n" + ADD,
    "allocates_10gb": "x = bytearray(10 * 1024 ** 3)\n" + ADD,
    "sleeps_forever": "import time\ntime.sleep(10 ** 6)\n" + ADD,
    "writes_project": f"open({str(PROJECT / 'SANDBOX_ESCAPE')!r}, 'w').write('x')\n" + ADD,
    "signals_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + ADD,
    "signals_group": "import os, signal\nos.killpg(0, signal.SIGKILL)\n" + ADD,
    "spawns_shell": "import subprocess\nsubprocess.run(['sh', '-c', 'echo hi > /tmp/escaped'])\n" + ADD,
    "burns_cpu": "while True:\n    pass\n" + ADD,
    "floods_output": "print('x' * 50_000_000)\n" + ADD,
    "exits_early": "import sys\nsys.exit(0)\n" + ADD,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_code_is_contained_and_scores_zero(name):
    r = run_tests(HOSTILE[name], ADD_TESTS, "add", limits=FAST)
    assert r.passed == 0 and r.error, (name, r)
    assert len(r.output) <= FAST.max_output
    assert not (PROJECT / "SANDBOX_ESCAPE").exists()
    os.kill(os.getpid(), 0)  # this process is still alive


def test_sandbox_reports_its_isolation():
    assert "rlimits" in isolation_name() and "audit hook" in isolation_name()


def test_training_continues_after_hostile_episodes(tmp_path):
    """A GRPO step whose rollouts are replaced by hostile answers: scored 0, the step completes."""
    from grpolab.engine.rollout import Episode
    from grpolab.rewards.score import score_episodes

    cfg = load_config(None, {"model": "tiny", "env": "code", "task_kinds": ["easy"]})
    env = get_env("code", ["easy"])
    task = env.tasks("train")[0]
    fn = task.meta["entry_point"]
    eps = [
        Episode(
            task=task,
            group=0,
            prompt_ids=[1],
            completion_ids=[2],
            mask=[1],
            text=f"```python\n{code.replace('def add(a, b)', f'def {fn}(*a)')}```",
        )
        for code in (HOSTILE["fork_bomb"], HOSTILE["allocates_10gb"], HOSTILE["signals_parent"])
    ]
    eps.append(
        Episode(task=task, group=0, prompt_ids=[1], completion_ids=[2], mask=[1], text=env.reference_transcript(task))
    )
    score_episodes(env, eps, cfg.reward.weights, cfg.reward.length_unit)
    assert [e.score.components["completion"] for e in eps] == [0.0, 0.0, 0.0, 1.0]


def test_code_block_reward_is_gameable_and_check_says_so(env):
    hack = {"code_block": 1.0, "format": 0.0, "schema": 0.0, "completion": 0.0, "length": 0.0}
    tasks = env.tasks("train")[:2]
    gameable = {r.probe for r in run_probes(env, tasks, hack, 100, len) if r.gameable}
    assert "stub_function" in gameable
    safe = {r.probe for r in run_probes(env, tasks, load_config().reward.weights, 100, len) if r.gameable}
    assert not safe, safe


def test_exit_before_tests_probe_is_not_paid(env):
    task = env.tasks("train")[0]
    text = env.probes["exit_before_tests"](env, task)
    assert score_transcript(env, task, text, count_tokens=len).components["completion"] == 0.0


def _harness_processes() -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and b"sandbox_harness" in (d / "cmdline").read_bytes():
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def test_sandbox_timeout_kills_the_whole_group():
    code = "import time\ntime.sleep(10 ** 6)\n" + ADD
    r = run_tests(code, ADD_TESTS, "add", limits=Limits(wall_s=1.0))
    assert r.timed_out and r.passed == 0 and "timed out" in r.error
    assert _harness_processes() == []  # the whole group was killed, nothing left running


def test_task_mix_keeps_kinds_with_signal():
    from grpolab.trust.preflight import task_mix

    kinds = {
        "easy": {"prompts": 2, "mean_completion": 0.6, "solve_rate": 0.4, "frac_zero_std": 0.0},
        "humaneval": {"prompts": 2, "mean_completion": 0.0, "solve_rate": 0.0, "frac_zero_std": 1.0},
    }
    advice = task_mix(kinds)
    assert "task_kinds = ['easy']" in advice and "drop ['humaneval']" in advice
    assert task_mix({"easy": kinds["easy"]}) == ""
