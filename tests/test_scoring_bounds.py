"""Scoring always ends and every score is in range: user verifiers, regexes and reward functions run under a time
limit per episode; a Verdict's score is checked as a plain number is; code that ends the process is a named error."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpolab.config import DataEnvConfig
from grpolab.envs.data.env import DataEnv
from grpolab.rewards import register_reward, unregister_reward
from grpolab.rewards.score import score_transcript

ANSWER = "<thought>I know this one by heart</thought>{answer}"
"""A transcript with no tool call: a thought, then the final answer."""


def rows_file(folder: Path, answer: str, reference: str) -> Path:
    rows = [
        {"prompt": f"Say it ({split}).", "answer": answer, "reference_answer": reference, "split": split}
        for split in ("train", "heldout")
    ]
    path = folder / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def timed_score(env, text: str, timeout_s: float = 5.0):
    task = env.tasks("train")[0]
    start = time.monotonic()
    score = score_transcript(env, task, text, count_tokens=len, timeout_s=timeout_s)
    return score, time.monotonic() - start


def test_a_backtracking_pattern_on_repeated_letters_fails_in_bounded_time(tmp_path):
    # the pattern: with `re`, 30 letters took 39 s; the regex engine answers at once
    env = DataEnv([str(rows_file(tmp_path, "^(a+)+b$", "aab"))], DataEnvConfig(verifier="regex"))
    score, seconds = timed_score(env, ANSWER.format(answer="a" * 30))
    assert score.components["completion"] == 0.0 and seconds < 3
    # and one that even the regex engine backtracks on is stopped at its timeout, with the reason
    env = DataEnv([str(rows_file(tmp_path, "a", "aa"))], DataEnvConfig(verifier="regex", pattern="^(a|aa)+$"))
    score, seconds = timed_score(env, ANSWER.format(answer="a" * 60 + "b"))
    assert score.components["completion"] == 0.0 and seconds < 4
    assert "timed out after 1 s" in score.reasons["completion"]


LOOPING_VERIFIER = """
from grpolab.envs import Verdict


def loops(answer, task, evidence):
    while True:
        pass


def out_of_range(answer, task, evidence):
    return Verdict(False, "partial", score=float(answer.split()[-1]))
"""


def user_env(tmp_path: Path, function: str) -> DataEnv:
    (tmp_path / "checks.py").write_text(LOOPING_VERIFIER)
    rows = rows_file(tmp_path, "red", "red")
    return DataEnv([str(rows)], DataEnvConfig(verifier=f"{tmp_path / 'checks.py'}:{function}"))


def test_a_verifier_that_loops_is_stopped_and_the_episode_fails_with_the_reason(tmp_path):
    score, seconds = timed_score(user_env(tmp_path, "loops"), ANSWER.format(answer="red"), timeout_s=0.5)
    assert seconds < 3
    assert score.components["completion"] == 0.0
    assert score.reasons["completion"] == "verifier timed out after 0.5 s"
    assert "completion" in score.errors  # counted as reward/errors, while the step goes on (a finite total)
    assert score.total == score.total


@pytest.mark.parametrize("value", ["5.0", "1e308", "-50", "nan", "inf"])
def test_a_verdicts_score_outside_zero_to_one_is_an_error_not_a_reward(tmp_path, value):
    score, _ = timed_score(user_env(tmp_path, "out_of_range"), ANSWER.format(answer=f"score {value}"))
    assert score.components["completion"] != score.components["completion"]  # NaN: the step is skipped
    assert "must be a finite number in [0, 1]" in score.errors["completion"]
    ok, _ = timed_score(user_env(tmp_path, "out_of_range"), ANSWER.format(answer="score 0.25"))
    assert ok.components["completion"] == 0.25


def test_a_batched_reward_that_hangs_is_stopped(finance):
    def hangs(prompts, completions, **kwargs):
        while True:
            pass

    register_reward("hangs", hangs, letter="Z", weight=1.0, shape="trl")
    try:
        task = finance.tasks("train")[0]
        start = time.monotonic()
        score = score_transcript(finance, task, finance.reference_transcript(task), count_tokens=len, timeout_s=0.3)
        assert time.monotonic() - start < 3
        assert score.components["hangs"] == 0.0 and score.reasons["hangs"] == "reward hangs timed out after 0.3 s"
        assert score.components["completion"] == 1.0  # the verifier's own verdict stands
    finally:
        unregister_reward("hangs")


def test_reward_score_ends_on_a_looping_verifier(tmp_path, cli):
    env = user_env(tmp_path, "loops")
    (tmp_path / "config.toml").write_text(
        'env = "data"\ndata = ["rows.jsonl"]\n[data_env]\nverifier = "checks.py:loops"\n[reward]\ntimeout_s = 0.5\n'
    )
    completion = tmp_path / "answer.txt"
    completion.write_text(ANSWER.format(answer="red"))
    task = env.tasks("train")[0].id
    code, out, err = cli(
        "reward", "score", "--config", str(tmp_path / "config.toml"), "--task", task, "--completion", str(completion)
    )
    assert code == 0, err
    assert "verifier timed out after 0.5 s" in out


EXITING_ENV = """
import os, signal, tempfile
from pathlib import Path

from grpolab.envs.base import Environment, EpisodeState, Task, Verdict
from grpolab.tools import Tool


class ExitEnv(Environment):
    name = "exits"
    instructions = "Add the item, then say done."
    stateful = True
    thought_required = False

    def tasks(self, split):
        return [Task("t", "Buy a.", "a", ["a"], "cart", reference_calls=[("add_to_cart", {"item": "a"})])]

    def start_episode(self, task):
        folder = tempfile.mkdtemp(prefix="episode-")
        Path(RECORD).write_text(folder)

        def add_to_cart(item: str) -> dict:
            \"\"\"Add an item.

            Args:
                item: The item.
            \"\"\"
            if item == "exit":
                os._exit(0)
            os.kill(os.getpid(), signal.SIGKILL)

        return EpisodeState([Tool(add_to_cart)], state=folder)

    def verify(self, task, final_answer, evidence):
        return Verdict(True, "ok")
"""


@pytest.mark.parametrize(
    ("item", "code", "said"),
    [("exit", 2, "ended abruptly (exit status 0, no result)"), ("kill", 137, "was killed by SIGKILL")],
)
def test_code_that_ends_the_process_is_a_named_error_and_its_temp_dirs_go(tmp_path, item, code, said):
    record = tmp_path / "episode-folder.txt"
    (tmp_path / "exits.py").write_text(EXITING_ENV.replace("RECORD", repr(str(record))))
    (tmp_path / "config.toml").write_text('plugins = ["exits.py"]\nenv = "exits:ExitEnv"\nmodel = "tiny"\n')
    args = ["tools", "run", "--config", str(tmp_path / "config.toml"), "add_to_cart", json.dumps({"item": item})]
    done = subprocess.run(
        [sys.executable, "-m", "grpolab.cli", *args], capture_output=True, text=True, timeout=300, env=dict(os.environ)
    )
    assert done.returncode == code, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: grpolab tools ") and said in last
    assert record.is_file() and not Path(record.read_text()).exists()


def test_a_sigterm_sent_to_grpolab_is_named_as_coming_from_outside(tmp_path):
    """A SIGTERM sent to the supervisor is passed on; the child it kills is not blamed on the user's code."""
    import signal
    import time

    ready = tmp_path / "ready"
    plugin = tmp_path / "waits.py"  # holds the command (in its child) until the signal comes; SIGTERM kills it there
    plugin.write_text(f"import time\nopen({str(ready)!r}, 'w').close()\ntime.sleep(120)\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpolab.cli", "config", "--plugin", str(plugin)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    last = err.strip().splitlines()[-1]
    assert "was killed by SIGTERM" in last and "sent to grpolab itself" in last and "run it by hand" not in last


def test_a_supervised_command_keeps_its_own_exit_code_and_error(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "grpolab.cli", "config", "--env", "no_such_env"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: unknown env 'no_such_env'") and "abruptly" not in done.stderr


def test_a_command_started_by_another_keeps_its_scratch_folder_beside_its_starters(tmp_path):
    # a lab's training job outlives the lab, whose supervisor removes its own scratch folder when it ends
    base, inherited = tmp_path / "base", tmp_path / "starters-scratch"
    base.mkdir()
    inherited.mkdir()
    record = tmp_path / "where.txt"
    plugin = tmp_path / "where.py"
    plugin.write_text(f"import tempfile\nopen({str(record)!r}, 'w').write(tempfile.gettempdir())\n")
    env = {**os.environ, "GRPOLAB_SCRATCH_BASE": str(base), "TMPDIR": str(inherited)}
    done = subprocess.run(
        [sys.executable, "-m", "grpolab.cli", "config", "--plugin", str(plugin)], env=env, capture_output=True
    )
    assert done.returncode == 0, done.stderr
    scratch = Path(record.read_text())
    assert scratch.parent == base and scratch.name.startswith("grpolab-run-")
    assert not scratch.exists()  # removed when the command ended
