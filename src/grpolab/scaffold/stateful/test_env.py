"""Tests of this environment: `pytest` in this folder (grpolab installed). Add your own beside them."""

import gc
import subprocess
import sys
from pathlib import Path

from grpolab import env_for, load_config, score_transcript

HERE = Path(__file__).parent


def _env():
    return env_for(load_config(HERE / "config.toml"))


def test_each_episode_has_its_own_database_removed_after_it():
    env = _env()
    task = next(t for t in env.tasks("train") if t.kind == "cancel")
    name, arguments = next(c for c in task.reference_calls if c[0] == "cancel_order")
    one, two = env.start_episode(task), env.start_episode(task)
    assert one.toolbox.execute(name, arguments)["status"] == "cancelled"
    assert two.toolbox.execute("get_order", {"order_id": arguments["order_id"]})["status"] == "pending"
    folders = [one.state.folder, two.state.folder]
    one.close(), two.close()
    assert not any(folder.exists() for folder in folders)


def test_an_unclosed_episode_is_removed_when_dropped_and_is_private():
    env = _env()
    episode = env.start_episode(env.tasks("train")[0])
    folder = episode.state.folder
    assert folder.stat().st_mode & 0o777 == 0o700  # this user's alone
    del episode
    gc.collect()
    assert not folder.exists()


def test_model_text_is_a_value_never_sql():
    episode = _env().start_episode(_env().tasks("train")[0])
    execute = episode.toolbox.execute
    assert "error" in execute("get_order", {"order_id": "#1001' OR '1'='1"})
    assert "error" in execute("find_customer", {"name": "x' OR 1=1 --"})
    pending = next(o for o in episode.state.query("SELECT order_id FROM orders WHERE status = 'pending'"))
    changed = execute("change_address", {"order_id": f" {pending['order_id']} ", "address": "1 Main St'); DROP TABLE"})
    assert changed["address"] == "1 Main St'); DROP TABLE" and len(episode.state.query("SELECT * FROM orders")) > 1
    episode.close()


def test_the_references_pass_and_a_wrong_write_fails():
    env = _env()
    for task in env.tasks("heldout")[:6]:
        score = score_transcript(env, task, env.reference_transcript(task), count_tokens=len)
        assert score.components["completion"] == 1.0, score.reasons
    task = next(t for t in env.tasks("heldout") if t.kind == "cancel")
    other = next(t for t in env.tasks("train") if t.kind == "cancel" and t.id != task.id)
    wrong = task.__class__(**{**task.__dict__, "reference_calls": other.reference_calls})  # cancels another order
    score = score_transcript(env, task, env.reference_transcript(wrong), count_tokens=len)
    assert score.components["completion"] == 0.0 and "database differs" in score.reasons["completion"]
    silent = task.__class__(**{**task.__dict__, "reference_answer": "Done."})  # the right write, the customer not told
    score = score_transcript(env, task, env.reference_transcript(silent), count_tokens=len)
    assert score.components["completion"] == 0.0 and "does not name order" in score.reasons["completion"]


def test_grpolab_check_passes_on_the_tiny_model():
    """The reward's probes (dummy tags, fabricated tool output, hedged answers...) score below honest work."""
    command = [sys.executable, "-m", "grpolab.cli", "check", "--config", str(HERE / "config.toml"), "--model", "tiny"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
