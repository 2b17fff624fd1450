"""`grpolab new-env`: the folder it writes is a working environment, and it never overwrites a user's files."""

import json
import subprocess
import sys

from grpolab.config import load_config
from grpolab.envs import env_for
from grpolab.rewards.rubric import rubric_of
from grpolab.scaffold import shop_seed, shop_tasks, unit_tasks


def test_new_env_writes_a_folder_whose_own_tests_pass(tmp_path, cli):
    code, out, _ = cli("new-env", "my_env", "--into", str(tmp_path))
    assert code == 0 and "grpolab check" in out
    folder = tmp_path / "my_env"
    assert {p.name for p in folder.iterdir()} >= {"tools.py", "rewards.py", "config.toml", "tasks.jsonl", "README.md"}
    # its tests: the tool, the rows, and `grpolab check --model tiny` (the probes score below honest work)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder / "test_my_env.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "3 passed" in done.stdout


def test_the_new_env_loads_its_tasks_tools_and_reward(tmp_path, cli):
    cli("new-env", "units", "--into", str(tmp_path))
    cfg = load_config(tmp_path / "units" / "config.toml")
    env = env_for(cfg)
    assert len(env.tasks("train")) == 96 and len(env.tasks("heldout")) == 24
    assert list(env.toolbox.tools) == ["convert"]
    assert "names_unit" in rubric_of(env).components and cfg.reward.weights["names_unit"] == 0.5
    call = env.tasks("heldout")[0].reference_calls[0]
    assert env.toolbox.tools["convert"].run(call[1])["value"] == env.tasks("heldout")[0].truth


def test_new_env_refuses_a_folder_with_files_and_a_name_that_is_a_path(tmp_path, cli):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("keep me")
    code, _, err = cli("new-env", "taken", "--into", str(tmp_path))
    assert code == 2 and "not empty" in err
    assert (tmp_path / "taken" / "mine.txt").read_text() == "keep me"
    code, _, err = cli("new-env", "../escape", "--into", str(tmp_path))
    assert code == 2 and "plain folder name" in err


def test_generated_rows_are_the_same_for_a_seed_and_hold_out_every_fifth():
    rows = unit_tasks(30, seed=3)
    assert json.dumps(rows) == json.dumps(unit_tasks(30, seed=3)) != json.dumps(unit_tasks(30, seed=4))
    assert len({r["id"] for r in rows}) == 30
    assert [i for i, r in enumerate(rows) if r["split"] == "heldout"] == [4, 9, 14, 19, 24, 29]


def test_the_stateful_env_has_a_database_per_episode_and_leaves_none_behind(tmp_path, cli):
    import gc
    import tempfile
    from pathlib import Path

    from grpolab.engine import rollout
    from grpolab.engine.policy import build_policy
    from grpolab.rewards.score import score_episodes

    code, out, _ = cli("new-env", "desk", "--into", str(tmp_path), "--stateful")
    assert code == 0 and "shop.py" in out
    folder = tmp_path / "desk"
    assert {p.name for p in folder.iterdir()} >= {"shop.py", "schema.sql", "seed.sql", "tasks.jsonl", "test_desk.py"}
    before = set(Path(tempfile.gettempdir()).glob("shop-episode-*"))
    cfg = load_config(folder / "config.toml", {"model": "tiny", "rollout.max_new_tokens": 8})
    env = env_for(cfg)
    assert env.stateful and len(env.tasks("heldout")) == 19
    model, tok, _ = build_policy(cfg)
    episodes = rollout.run_episodes(model, tok, env, env.tasks("heldout")[:2], 2, rollout.sampling_settings(cfg))
    folders = {e.episode_state.state.folder for e in episodes}
    assert len(folders) == 4 and all(f.exists() for f in folders)  # one database each while they run
    score_episodes(env, episodes, cfg.reward.weights, cfg.reward.length_unit)
    gc.collect()
    assert not any(f.exists() for f in folders)
    assert set(Path(tempfile.gettempdir()).glob("shop-episode-*")) <= before  # nothing left, the prompts' too
    # its own tests: a database per episode, the references pass, a wrong write fails, `grpolab check` passes
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder / "test_desk.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=900,
    )
    assert done.returncode == 0 and "5 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]


def test_the_shop_rows_are_the_same_for_a_seed_and_an_order_status_is_not_read_off_its_id():
    data = shop_seed()
    rows = shop_tasks(data)
    assert json.dumps(rows) == json.dumps(shop_tasks(shop_seed())) and len({r["id"] for r in rows}) == len(rows) == 96
    assert {r["kind"] for r in rows} == {"cancel", "address", "status"}
    assert [i for i, r in enumerate(rows) if r["split"] == "heldout"][:3] == [4, 9, 14]
    by_parity = {(int(o["order_id"][1:]) % 4, o["status"]) for o in data["orders"]}
    assert len(by_parity) > 8  # the same residue holds several statuses: only get_order tells which


def test_two_stateful_folders_in_one_process_each_load_their_own_shop(tmp_path, cli):
    """Both folders hold shop.py and say env = "shop.py:ShopEnv": the second one's config must get its own file, not
    the module of that name the first one imported."""
    from pathlib import Path

    names = ("desk_a", "desk_b")
    for name in names:
        assert cli("new-env", name, "--into", str(tmp_path), "--stateful")[0] == 0
    loaded = []
    for name in names:
        env = env_for(load_config(tmp_path / name / "config.toml", {"model": "tiny"}))
        loaded.append(Path(sys.modules[type(env).__module__].__file__).resolve())
    assert loaded == [(tmp_path / name / "shop.py").resolve() for name in names]
