"""Plugins: a user's reward module named in a config (or by --plugin) works in every command, with no wrapper, and
every later command on the run loads it from the run's config.json."""

import json
import sys
from pathlib import Path

import pytest

from grpolab.config import load_config
from grpolab.errors import UserError
from grpolab.plugins import import_plugin, resolve_plugins
from tests.conftest import run_grpolab

REWARD_PLUGIN = '''
from grpolab.rewards import register_reward


def polite(prompts, completions, **kwargs):
    """TRL's shape, unchanged: 1 when the model says please."""
    return [float("please" in c.lower()) for c in completions]


register_reward("polite", polite, letter="P")
'''
"""A user's reward module, written for TRL (batched), as docs/plugins.md shows it."""


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


grpolab = run_grpolab  # the CLI as its own process (tests.conftest): nothing of the plugin is imported beforehand


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
    compared = grpolab("compare", "--run", str(run), "--limit", "1", "--json", cwd=elsewhere)
    assert compared.returncode == 0, compared.stderr
    assert "polite" in json.loads(compared.stdout)["right"]["episodes"][0]["components"]
    reported = grpolab("report", "--run", str(run), cwd=elsewhere)
    assert reported.returncode == 0, reported.stderr
    assert "reward/polite" in (run / "report.html").read_text()  # its curve, beside the built-ins'


def test_export_trl_imports_the_plugin_and_standalone_refuses_it(cli, tmp_path, request):
    from grpolab.rewards import unregister_reward

    request.addfinalizer(lambda: unregister_reward("polite"))  # the plugin registered it in this process
    folder = user_folder(tmp_path, module="trl_export_rewards_q")
    script = tmp_path / "train_grpo.py"
    code, _, err = cli("export-trl", "--config", str(folder / "config.toml"), "-o", str(script))
    assert code == 0, err
    assert str(folder / "trl_export_rewards_q.py") in script.read_text()  # LAB_CONFIG's plugins: imported first
    assert "'polite': 0.5" in script.read_text()
    code, _, err = cli("export-trl", "--config", str(folder / "config.toml"), "-o", str(script), "--standalone")
    assert code == 2 and "--standalone" in err and "trl_export_rewards_q" in err


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


def test_a_file_plugin_has_a_private_name_and_env_module_class_finds_it_by_its_stem(tmp_path):
    from grpolab.envs import get_env

    path = tmp_path / "plugin_env_mod_q.py"
    path.write_text("from grpolab.envs.arithmetic import ArithmeticEnv as Env\nVALUE = 7\n")
    module = import_plugin(str(path))
    assert module.__name__ == "grpolab_user.plugin_env_mod_q" and module.VALUE == 7
    assert "plugin_env_mod_q" not in sys.modules  # never the bare stem: a user's datasets.py is not `datasets`
    assert get_env("plugin_env_mod_q:Env", plugins=[str(path)]).name == "arithmetic"


def test_two_folders_plugin_files_of_one_name_both_load_and_neither_replaces_the_other(tmp_path):
    # two `new-env` folders each hold rewards.py; the lab (and a test session) reads both runs in one process
    first, second = tmp_path / "a" / "same_name_plugin_q.py", tmp_path / "b" / "same_name_plugin_q.py"
    for path, value in ((first, 1), (second, 2)):
        path.parent.mkdir()
        path.write_text(f"VALUE = {value}\n")
    one, two = import_plugin(str(first)), import_plugin(str(second))
    assert (one.VALUE, two.VALUE) == (1, 2) and one.__name__ == "grpolab_user.same_name_plugin_q"
    assert two.__name__.startswith("grpolab_user.same_name_plugin_q_")
    assert import_plugin(str(second)) is two


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


# ---- rewards owned by the environment ----------------------------------------------------------------------------


def polite_grpolab(replay, task, env, ctx):
    """grpolab's shape: one transcript, (value, reason)."""
    return (1.0 if "please" in replay.generated_text.lower() else 0.0), "checked"


def polite_trl(prompts, completions, **kwargs):
    """TRL's shape: batched, a float (or None) per completion; a task kind it does not apply to gets None."""
    return [None if kind == "skip" else float("please" in c.lower()) for c, kind in zip(completions, kwargs["kind"])]


def polite_env(fn, name: str = "polite"):
    from grpolab.envs import get_env

    env = get_env("finance")
    env.rubric.add(name, fn, letter="P", weight=0.5)
    return env


def test_an_env_owns_its_components_and_other_envs_do_not_see_them():
    from grpolab.envs import get_env
    from grpolab.rewards.rubric import rubric_of

    env = polite_env(polite_grpolab)
    assert "polite" in rubric_of(env) and "polite" not in rubric_of(get_env("finance"))
    assert rubric_of(env)["polite"].shape == "grpolab" and rubric_of(env).default_weights()["polite"] == 0.5
    assert "completion" in rubric_of(env) and list(env.rubric) == ["polite"]  # the env holds only its own


def test_a_trl_style_reward_gives_the_same_breakdown_as_the_grpolab_style_one():
    from grpolab.rewards.score import score_transcripts

    ours, theirs = polite_env(polite_grpolab), polite_env(polite_trl)
    assert theirs.rubric["polite"].shape == "trl"
    tasks = ours.tasks("train")[:3]
    texts = [
        ours.reference_transcript(tasks[0]),
        "<thought>I will ask politely please</thought>Please: 12.5",
        "no tags at all",
    ]
    items = [(t, x, 10) for t, x in zip(tasks, texts)]
    a = score_transcripts(ours, items, length_unit=100)
    b = score_transcripts(theirs, items, length_unit=100)
    assert [s.breakdown for s in a] == [s.breakdown for s in b]
    assert [s.components["polite"] for s in b] == [0.0, 1.0, 0.0]
    assert a[1].breakdown.endswith(" | P:+0.5") and a[0].breakdown.endswith(" | P:+0.0")
    assert a[1].total == b[1].total


def test_a_trl_style_reward_is_called_once_per_batch_with_the_task_columns():
    from grpolab.rewards.score import score_transcripts

    calls = []

    def spy(prompts, completions, answer, task_id, **kwargs):
        calls.append((len(completions), answer, task_id, sorted(kwargs)))
        return [1.0] * len(completions)

    env = polite_env(spy, "spy")
    tasks = env.tasks("train")[:4]
    score_transcripts(env, [(t, "x", 1) for t in tasks], length_unit=100)
    assert len(calls) == 1
    n, answers, ids, others = calls[0]
    assert n == 4 and answers == [t.answer for t in tasks] and ids == [t.id for t in tasks]
    assert {"truth", "kind"} <= set(others)


def test_none_from_a_trl_style_reward_is_not_applicable_and_a_bad_return_is_an_error():
    from grpolab.rewards.score import score_transcripts

    env = polite_env(polite_trl)
    task = env.tasks("train")[0]
    task = type(task)(**{**task.__dict__, "kind": "skip"})
    (s,) = score_transcripts(env, [(task, "please", 1)], length_unit=100)
    assert s.components["polite"] == 0.0 and "not applicable" in s.reasons["polite"] and not s.errors
    broken = polite_env(lambda prompts, completions, **kw: [1.0], "broken")  # one value for two completions
    scores = score_transcripts(broken, [(task, "a", 1), (task, "b", 1)], {"broken": 1.0}, length_unit=100)
    assert all("broken" in s.errors and s.components["broken"] != s.components["broken"] for s in scores)  # NaN


def test_an_unknown_weight_names_the_key_the_known_ones_and_how_to_add_one():
    from grpolab.envs import env_for
    from grpolab.rewards.rubric import check_weights

    cfg = load_config(None, {"reward.weights": {"completion": 1.0, "politeness": 1.0}})
    with pytest.raises(UserError) as info:
        check_weights(cfg, env_for(cfg))
    message = str(info.value)
    assert "'politeness'" in message and "completion" in message and "plugin" in message
    assert "register_reward" in message and "rubric" in message


def test_an_env_components_default_weight_applies_unless_the_config_names_it():
    from grpolab.rewards.rubric import check_weights

    env = polite_env(polite_grpolab)
    cfg = load_config(None, {"reward.weights": {"completion": 1.0}})
    check_weights(cfg, env)
    assert cfg.reward.weights == {"completion": 1.0, "polite": 0.5}
    cfg = load_config(None, {"reward.weights": {"completion": 1.0, "polite": 0.0}})
    check_weights(cfg, env)
    assert cfg.reward.weights["polite"] == 0.0


def test_register_reward_adds_to_every_env_and_is_removed_again():
    from grpolab.envs import get_env
    from grpolab.rewards.components import register_reward, unregister_reward
    from grpolab.rewards.rubric import rubric_of

    env = get_env("arithmetic")
    register_reward("plugin_wide_q", polite_grpolab)
    try:
        assert "plugin_wide_q" in rubric_of(env) and "plugin_wide_q" in rubric_of(get_env("finance"))
    finally:
        unregister_reward("plugin_wide_q")
    assert "plugin_wide_q" not in rubric_of(env)


def test_a_component_may_not_take_a_built_in_name():
    from grpolab.rewards.components import register_reward
    from grpolab.rewards.rubric import rubric_of

    with pytest.raises(UserError, match="built in"):
        rubric_of(polite_env(polite_grpolab, "completion"))
    with pytest.raises(UserError, match="built in"):
        register_reward("format", polite_grpolab)


# ---- --weights name=value ----------------------------------------------------------------------------------------


def test_weights_by_name_are_set_over_the_config_weights(cli, tmp_path):
    code, out, err = cli("config", "--weights", "completion=2,length=0", "--json")
    assert code == 0, err
    weights = json.loads(out)["reward"]["weights"]
    assert weights == {"format": 1.0, "schema": 1.5, "completion": 2.0, "length": 0.0}


def test_positional_weights_still_replace_them(cli):
    code, out, _ = cli("config", "--weights", "0,0,1,0", "--json")
    assert code == 0 and json.loads(out)["reward"]["weights"] == {
        "format": 0.0,
        "schema": 0.0,
        "completion": 1.0,
        "length": 0.0,
    }


@pytest.mark.parametrize(
    "text, problem",
    [("completion=x", "not a number"), ("1,completion=2", "mixes"), ("completion=inf", "not finite"), ("1,2", "4")],
)
def test_bad_weights_exit_2(cli, text, problem):
    code, _, err = cli("config", "--weights", text)
    assert code == 2 and problem in err


def test_an_unknown_weight_by_name_is_refused_with_the_fix(cli):
    code, _, err = cli("config", "--weights", "politeness=1")
    assert code == 2 and "'politeness'" in err and "plugin" in err


# ---- the alarms and the simulator on a user's component --------------------------------------------------------------


def test_drift_watches_a_user_component_by_name():
    from grpolab.alarms.drift import drift_alarms, step_behaviour
    from grpolab.vocabulary import behaviour_key

    def step(n: int, polite_share: float) -> dict:
        rows = [
            {"text": "The answer is 12.", "components": {"completion": 0.0, "polite": float(i < 10 * polite_share)}}
            for i in range(10)
        ]
        return {"step": n, "episodes": 10, "success": 0.0, **step_behaviour(rows)}

    history = [step(1, 0.0), step(2, 0.1), step(3, 0.6), step(4, 0.9), step(5, 1.0)]
    assert history[-1][behaviour_key("component:polite")] == 1.0
    assert behaviour_key("component:completion") not in history[-1]  # built-ins are watched through behaviour
    alarms = drift_alarms(history, window=2, z=1.0, rel=0.5, share=0.3)
    assert "drift:component:polite" in alarms and "0.05 -> 0.95" in alarms["drift:component:polite"]
    steady = [step(i, 0.5) for i in range(1, 6)]
    assert "drift:component:polite" not in drift_alarms(steady, window=2, z=1.0, rel=0.5, share=0.3)


def test_attribution_names_a_user_component():
    from grpolab.alarms.attribution import component_changes
    from grpolab.vocabulary import REWARD_MEAN, reward_key

    rows = [{REWARD_MEAN: 1.0 + s, reward_key("completion"): 1.0, reward_key("polite"): 0.2 * s} for s in range(4)]
    assert component_changes(rows, 2) == {"completion": 0.0, "polite": pytest.approx(0.4)}


def test_the_simulator_measures_its_classes_under_a_user_component():
    from grpolab.behaviour import CLASSES
    from grpolab.simulator.simulate import class_rewards, measure_profiles

    env = polite_env(polite_trl)  # default weight 0.5: measured though the weights leave it out
    profiles = measure_profiles(env, lambda text: len(text.split()), 100, n_tasks=2, weights={"completion": 3.0})
    assert all("polite" in p.components for p in profiles.values())
    weights = {"completion": 0.0, "polite": 1.0}
    assert class_rewards(profiles, weights)[:, -1].tolist() == [profiles[c].components["polite"] for c in CLASSES]


def test_check_and_export_trl_refuse_an_unknown_weight_before_any_work(cli, tmp_path):
    for argv in (("check", "--model", "tiny"), ("export-trl", "-o", str(tmp_path / "s.py"))):
        code, _, err = cli(*argv, "--weights", "politeness=1")
        assert code == 2 and "'politeness'" in err, argv
    assert not (tmp_path / "s.py").exists()
