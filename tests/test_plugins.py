"""Plugins: a user's reward module named in a config (or by --plugin) works in every command, with no wrapper, and
every later command on the run loads it from the run's config.json."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpolab.config import load_config
from grpolab.errors import UserError
from grpolab.plugins import import_plugin, resolve_plugins

SRC = str(Path(__file__).resolve().parents[1] / "src")

REWARD_PLUGIN = '''
from grpolab.rewards.components import register_reward


def polite(replay, task, env, ctx):
    """1 when the model says please."""
    text = replay.generated_text.lower()
    return (1.0, "says please") if "please" in text else (0.0, "no please")


register_reward("polite", polite, letter="P")
'''


def user_folder(tmp_path: Path, module: str = "my_rewards") -> Path:
    """A user's folder: a reward module and a config naming it as a plugin (by module name, found beside it)."""
    folder = tmp_path / "user"
    folder.mkdir()
    (folder / f"{module}.py").write_text(REWARD_PLUGIN)
    (folder / "config.toml").write_text(
        f'plugins = ["{module}"]\nenv = "finance"\nmodel = "tiny"\n'
        "[reward.weights]\nformat = 1.0\nschema = 1.5\ncompletion = 3.0\nlength = -0.05\npolite = 0.5\n"
        "[rollout]\ngroup_size = 2\nmax_new_tokens = 8\n"
        "[train]\nsteps = 2\nprompts_per_step = 1\neval_limit = 2\neval_every = 0\n"
    )
    return folder


def grpolab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in a fresh process from another folder: nothing of the plugin is imported beforehand."""
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run(
        [sys.executable, "-m", "grpolab.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_a_run_records_its_plugin_and_every_later_command_loads_it(tmp_path):
    folder = user_folder(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = elsewhere / "run"
    trained = grpolab("train", "--config", str(folder / "config.toml"), "--out", str(run), "--quiet", cwd=elsewhere)
    assert trained.returncode == 0, trained.stderr
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["plugins"] == [str((folder / "my_rewards.py").resolve())]
    assert recorded["reward"]["weights"]["polite"] == 0.5
    rows = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert rows and all("polite" in r["components"] and "P:" in r["breakdown"] for r in rows)
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all("reward/polite" in m for m in metrics)

    resumed = grpolab("train", "--resume", str(run), "--steps", "3", "--quiet", cwd=elsewhere)
    assert resumed.returncode == 0, resumed.stderr
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 3
    evaluated = grpolab("eval", "--run", str(run), "--limit", "1", "--json", cwd=elsewhere)
    assert evaluated.returncode == 0, evaluated.stderr
    reported = grpolab("report", "--run", str(run), cwd=elsewhere)
    assert reported.returncode == 0, reported.stderr
    assert (run / "report.html").is_file()


def test_check_runs_a_config_with_a_plugin_and_scores_under_its_reward(tmp_path):
    folder = user_folder(tmp_path)
    checked = grpolab("check", "--config", str(folder / "config.toml"), "--prompts", "1", "--json", cwd=tmp_path)
    assert checked.returncode in (0, 1), checked.stderr  # 1: a probe beats honest work (the tiny model is random)
    report = json.loads(checked.stdout)
    assert any("P:" in p["breakdown"] for p in report["probes"])


def test_a_plugin_that_is_not_found_exits_2_naming_it_the_search_and_the_fix(cli, tmp_path):
    code, _, err = cli("config", "--plugin", "no_such_plugin_xyz")
    assert code == 2
    assert "no_such_plugin_xyz" in err and "sys.path" in err and "PYTHONPATH" in err


def test_a_plugin_that_raises_on_import_exits_2_naming_it_and_the_line(cli, tmp_path):
    bad = tmp_path / "broken_plugin_abc.py"
    bad.write_text("x = 1\nraise RuntimeError('boom')\n")
    code, _, err = cli("config", "--plugin", str(bad))
    assert code == 2
    assert "broken_plugin_abc" in err and "RuntimeError: boom" in err and f"{bad}:2" in err
    assert "broken_plugin_abc" not in sys.modules  # nothing half-imported stays behind


def test_a_config_with_a_missing_plugin_file_names_the_path_and_the_folder(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('plugins = ["lib/missing.py"]\n')
    with pytest.raises(UserError, match="missing.py") as info:
        load_config(config)
    assert str(tmp_path) in info.value.fix


def test_plugin_paths_resolve_from_the_config_folder_and_names_from_sys_path(tmp_path):
    (tmp_path / "local_mod.py").write_text("")
    assert resolve_plugins(["local_mod", "./local_mod.py", "json"], tmp_path) == [
        str((tmp_path / "local_mod.py").resolve()),
        "json",
    ]


def test_a_file_plugin_is_importable_by_its_name_for_env_module_class(tmp_path):
    path = tmp_path / "plugin_env_mod_q.py"
    path.write_text("VALUE = 7\n")
    module = import_plugin(str(path))
    import importlib

    assert importlib.import_module("plugin_env_mod_q") is module and module.VALUE == 7


def test_an_env_that_cannot_load_says_pythonpath_and_plugins(cli):
    code, _, err = cli("tasks", "--env", "no_such_module_q:Env")
    assert code == 2 and "PYTHONPATH" in err and "plugin" in err


def test_an_env_without_a_verifier_is_refused(cli, tmp_path):
    (tmp_path / "noverify_env_q.py").write_text(
        "from grpolab.envs.base import Environment, Task\n"
        "from grpolab.tools import ToolBox\n"
        "class NoVerify(Environment):\n"
        "    name = 'noverify'\n"
        "    toolbox = ToolBox([])\n"
        "    def tasks(self, split):\n"
        "        return [Task(id='t', prompt='p', answer='1', truth=1, kind='k')]\n"
    )
    code, _, err = cli("tasks", "--plugin", str(tmp_path / "noverify_env_q.py"), "--env", "noverify_env_q:NoVerify")
    assert code == 2 and "does not define verify" in err
