"""A task written for TRL's GRPOTrainer(environment_factory=..., reward_funcs=...) runs in grpolab unchanged: the class
named in the config (`env = "file.py:Class"`) is the environment (its methods the tools, one instance per episode,
reset with the row, get_reward the verifier), and `rewards = ["file.py:fn"]` are its reward functions, called with
TRL's conversational completions and the episodes' instances (`environments`)."""

import importlib.util
import json
import math
import re
import shutil
import sys
from pathlib import Path

import pytest

from grpolab.config import load_config
from grpolab.envs import env_for
from grpolab.envs.trl_env import TrlEnv
from grpolab.rewards.components import registered_components, unregister_reward
from grpolab.rewards.score import score_transcript
from tests.conftest import cut_to_tiny, run_grpolab

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "trl_env"
SRC = str(ROOT / "src")

COUNTER = '''
import math
import random


class Counter:
    """Count up to the row's target; TRL's environment_factory shape, no grpolab import."""

    built = 0

    def __init__(self):
        Counter.built += 1
        self.count = 0
        self.target = None
        self.columns = {}

    def reset(self, target, **kwargs):
        self.count = 0
        self.target = target
        self.columns = {"target": target, **kwargs}
        return f" (start at 0, reach {target})"

    def increment(self, by: int) -> dict:
        """Add to the counter.

        Args:
            by: How much to add.
        """
        self.count += by
        return {"count": self.count}

    def _helper(self):
        return "not a tool"

    def get_reward(self) -> float:
        return float(self.count == self.target)


class Halves(Counter):
    """get_reward gives partial credit, and more than 1 past the target."""

    def get_reward(self) -> float:
        return self.count / 2


class NotANumber(Counter):
    def get_reward(self) -> float:
        return math.nan


class NoReward(Counter):
    get_reward = None


class Dice(Counter):
    """A reset whose text is drawn at random: its episodes would not see the prompt their group was given."""

    def reset(self, target, **kwargs):
        super().reset(target)
        return f" (roll: {random.random()})"


class Undocumented(Counter):
    def decrement(self, by):
        self.count -= by
        return {"count": self.count}
'''
"""A user's TRL environments: the module is written as TRL reads it (reset, typed methods, get_reward)."""

ROWS = [
    {"id": "three", "prompt": "Count to 3.", "answer": 3, "split": "train", "meta": {"target": 3},
     "reference_calls": [{"name": "increment", "arguments": {"by": 3}}], "reference_answer": "The count is 3."},
    {"id": "two", "prompt": "Count to 2.", "answer": 2, "split": "heldout", "meta": {"target": 2},
     "reference_calls": [{"name": "increment", "arguments": {"by": 2}}], "reference_answer": "The count is 2."},
]  # fmt: skip

REWARDS = '''
SEEN = []


def reached(prompts, completions, environments, target, **kwargs):
    """1 when the episode's counter reached the row's target (read from its environment, as TRL passes them)."""
    SEEN.append({"prompts": prompts, "completions": completions, "environments": environments, "target": target})
    return [float(env.count == t) for env, t in zip(environments, target)]


def says_count(prompts, completions, **kwargs):
    """1 when the final message says "count"."""
    return [float("count" in c[-1]["content"].lower()) for c in completions]


def helper(text):
    return text
'''
"""A user's TRL reward functions, written for GRPOTrainer(reward_funcs=[...])."""


def user_folder(tmp_path: Path, env: str = "Counter", extra: str = "", rows: list | None = None) -> Path:
    """A folder with the TRL environment module, its rows, reward functions and a config naming them."""
    folder = tmp_path / "user"
    folder.mkdir(exist_ok=True)
    (folder / "counter.py").write_text(COUNTER)
    (folder / "rewards.py").write_text(REWARDS)
    (folder / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (rows or ROWS)))
    (folder / "config.toml").write_text(f'env = "counter.py:{env}"\ndata = ["tasks.jsonl"]\nmodel = "tiny"\n{extra}')
    return folder


@pytest.fixture()
def user_rewards():
    """Reward components the test registers (through a config's `rewards`) are removed afterwards."""
    before = set(registered_components())
    yield
    for name in set(registered_components()) - before:
        unregister_reward(name)


def counter_env(tmp_path: Path, env: str = "Counter", extra: str = "") -> TrlEnv:
    built = env_for(load_config(user_folder(tmp_path, env, extra) / "config.toml"))
    assert isinstance(built, TrlEnv)
    return built


def test_the_class_named_by_its_file_is_the_environment_with_its_public_methods_as_tools(tmp_path, monkeypatch):
    folder = user_folder(tmp_path)
    monkeypatch.chdir(tmp_path)  # the config's paths start at its own folder, not the working directory
    cfg = load_config(folder / "config.toml")
    assert cfg.env == f"{folder / 'counter.py'}:Counter"
    env = env_for(cfg)
    assert isinstance(env, TrlEnv) and env.stateful
    assert [t.id for t in env.tasks("train")] == ["three"] and [t.id for t in env.tasks("heldout")] == ["two"]
    assert list(env.toolbox.tools) == ["increment"]  # reset, get_reward and _helper are not tools, as in TRL
    schema = env.toolbox.get("increment").schema["function"]
    assert schema["description"] == "Add to the counter."
    assert schema["parameters"]["properties"]["by"] == {"type": "integer", "description": "How much to add."}

    task = env.tasks("train")[0]
    counter = type(env.start_episode(task).state)
    built = counter.built
    for t in env.tasks("train") + env.tasks("heldout"):  # prompts and their schemas: read once, not per episode
        assert "increment" in env.system_prompt(t)
        assert [s["function"]["name"] for s in env.toolbox_for(t).schemas] == ["increment"]
    assert counter.built == built


def test_each_episode_has_its_own_instance_reset_with_its_row(tmp_path):
    env = counter_env(tmp_path)
    task = env.tasks("train")[0]
    one, two = env.start_episode(task), env.start_episode(task)
    assert one.state is not two.state
    assert one.toolbox.execute("increment", {"by": 2}) == {"count": 2}
    assert one.toolbox.execute("increment", {"by": 2}) == {"count": 4}  # its state lives from call to call
    assert two.state.count == 0 and two.toolbox.execute("increment", {"by": 1}) == {"count": 1}
    # reset got the row's columns as TRL passes a dataset's: the conversational prompt, the answer, each meta key
    assert one.state.columns == {"target": 3, "prompt": [{"role": "user", "content": "Count to 3."}], "answer": 3}

    used = one.state
    one.close()  # back to the pool, as TRL reuses its instances: the next episode resets it
    three = env.start_episode(env.tasks("heldout")[0])
    assert three.state is used and three.state.count == 0 and three.state.target == 2
    assert two.state.count == 1  # untouched by the episodes around it
    for episode in (two, three):
        episode.close()


def test_what_reset_returns_is_appended_to_the_prompt_and_must_not_change(tmp_path, cli):
    env = counter_env(tmp_path)
    task = env.task("three")
    assert task.prompt == "Count to 3. (start at 0, reach 3)"  # TRL appends it to the last user message
    assert env.messages(task)[-1] == {"role": "user", "content": "Count to 3. (start at 0, reach 3)"}

    code, _, err = cli("tasks", "--config", str(user_folder(tmp_path, "Dice") / "config.toml"))
    assert code == 2 and "reset() returned" in err and "share one prompt" in err and "seed" in err


def test_get_reward_is_the_verifier_clamped_to_one_and_passed_at_one(tmp_path):
    env = counter_env(tmp_path)
    task = env.task("three")
    honest = score_transcript(env, task, env.reference_transcript(task))
    assert honest.components["completion"] == 1.0 and honest.solved
    assert honest.reasons["completion"] == "get_reward() = 1"
    wrong = env.reference_transcript(task).replace('"by": 3', '"by": 1').replace('"count": 3', '"count": 1')
    assert score_transcript(env, task, wrong).components["completion"] == 0.0  # a fresh episode: count 1, not 3
    assert score_transcript(env, task, task.reference_answer).components["completion"] == 0.0  # no call, no count

    halves = counter_env(tmp_path, "Halves")
    task = halves.task("three")
    over = score_transcript(halves, task, halves.reference_transcript(task))  # 3 / 2 = 1.5: solved, clamped
    assert over.components["completion"] == 1.0 and over.reasons["completion"] == "get_reward() = 1.5"
    part = halves.reference_transcript(task).replace('"by": 3', '"by": 1').replace('"count": 3', '"count": 1')
    partial = score_transcript(halves, task, part)
    assert partial.components["completion"] == 0.5 and not partial.solved

    nan = counter_env(tmp_path, "NotANumber")
    task = nan.task("three")
    broken = score_transcript(nan, task, nan.reference_transcript(task))
    assert math.isnan(broken.components["completion"]) and "finite float" in broken.errors["completion"]


def test_a_verifier_the_config_sets_is_used_instead_of_get_reward(tmp_path):
    env = counter_env(tmp_path, extra='[data_env]\nverifier = "numeric"\n')
    task = env.task("three")
    assert score_transcript(env, task, env.reference_transcript(task)).components["completion"] == 1.0
    other = env.reference_transcript(task).replace("The count is 3.", "The count is 4.")
    assert score_transcript(env, task, other).components["completion"] == 0.0  # get_reward would have paid


def test_trl_reward_functions_get_conversational_completions_and_the_episodes_environments(tmp_path, user_rewards):
    cfg = load_config(user_folder(tmp_path, extra='rewards = ["rewards.py:*"]\n') / "config.toml")
    assert cfg.rewards == [f"{tmp_path / 'user' / 'rewards.py'}:*"]
    assert cfg.reward.weights["reached"] == cfg.reward.weights["says_count"] == 1.0  # as TRL weighs them
    assert "helper" not in registered_components()  # not TRL-shaped: no component
    env = env_for(cfg)
    task = env.task("three")
    score = score_transcript(env, task, env.reference_transcript(task), cfg.reward.weights)
    assert score.components["reached"] == 1.0 and score.components["says_count"] == 1.0

    seen = sys.modules[registered_components()["reached"].fn.__module__].SEEN[-1]
    assert seen["prompts"] == [[{"role": "user", "content": task.prompt}]]
    assert seen["target"] == [3]
    assert [type(e).__name__ for e in seen["environments"]] == ["Counter"] and seen["environments"][0].count == 3
    completion = seen["completions"][0]
    assert [m["role"] for m in completion] == ["assistant", "tool", "assistant"]
    call = completion[0]["tool_calls"][0]
    assert call == {"type": "function", "function": {"name": "increment", "arguments": {"by": 3}}}
    assert completion[0]["reasoning_content"] == task.reference_thought  # a thought is reasoning, as TRL parses it
    assert json.loads(completion[1]["content"]) == {"count": 3} and completion[1]["name"] == "increment"
    assert completion[2] == {"role": "assistant", "content": "The count is 3."}

    unpaid = score_transcript(env, task, "The count is 3.", cfg.reward.weights)
    assert unpaid.components["reached"] == 0.0  # its own fresh instance: nothing counted


@pytest.mark.parametrize(
    ("env", "extra", "rows", "said"),
    [
        ("Counter", "", [], "no tasks"),  # an empty file
        ("NoReward", "", None, "data_env.verifier"),
        ("Undocumented", "", None, "Args:"),
        ("Missing", "", None, "has no 'Missing'"),
        ("Counter", '[data_env]\ntools = "counter.py"\n', None, "data_env.tools"),
        ("Counter", 'rewards = ["rewards.py:nope"]\n', None, "no function 'nope'"),
        ("Counter", 'rewards = ["rewards.py:helper"]\n', None, "not a TRL reward function"),
        ("Counter", 'rewards = ["rewards.py"]\n', None, "field 'rewards"),
        ("Counter", "", [{**ROWS[0], "meta": {}}, ROWS[1]], "reset() of env"),  # no target column
    ],
)
def test_bad_input_exits_2_naming_it_and_the_fix(tmp_path, cli, user_rewards, env, extra, rows, said):
    folder = user_folder(tmp_path, env, extra, rows)
    if rows == []:
        (folder / "tasks.jsonl").write_text("")
    code, _, err = cli("tasks", "--config", str(folder / "config.toml"))
    assert code == 2, err
    assert said in err and "Traceback" not in err


def test_a_trl_env_without_data_is_refused_naming_the_field(tmp_path, cli):
    folder = user_folder(tmp_path)
    (folder / "config.toml").write_text('env = "counter.py:Counter"\n')
    code, _, err = cli("tasks", "--config", str(folder / "config.toml"))
    assert code == 2 and "TRL environment class and has no tasks" in err and 'data = ["tasks.jsonl"]' in err


def test_the_example_is_plain_trl_and_resets_with_the_columns_its_trl_script_gives(user_rewards):
    for name in ("shop.py", "rewards.py", "train_trl.py"):
        assert not re.search(r"^\s*(import|from)\s+grpolab", (EXAMPLE / name).read_text(), re.M), name
    spec = importlib.util.spec_from_file_location("example_train_trl", EXAMPLE / "train_trl.py")
    script = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(script)  # imports trl, as a TRL user's script does, and its siblings
        trl_rows = {row["prompt"][0]["content"]: row for row in script.dataset("train")}
    finally:
        sys.path.remove(str(EXAMPLE))
        for name in ("rewards", "shop"):
            sys.modules.pop(name, None)

    env = env_for(load_config(EXAMPLE / "config.toml"))
    for task in env.tasks("train"):
        episode = env.start_episode(task)
        try:
            columns = env.reset_columns(task)
            assert columns == trl_rows[columns["prompt"][0]["content"]]  # what reset gets under TRL, here too
            row = trl_rows[columns["prompt"][0]["content"]]
            assert episode.state.goal["order_id"] == row["order_id"]
        finally:
            episode.close()


def tiny_example(tmp_path: Path) -> Path:
    """The example folder with its config cut to the tiny model's size (the rest as written)."""
    folder = tmp_path / "shop"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    cut_to_tiny(folder / "config.toml", steps=1)
    return folder


grpolab = run_grpolab  # the CLI in a fresh interpreter (tests.conftest)


def test_the_example_checks_trains_and_evaluates_with_no_change(tmp_path):
    folder = tiny_example(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    config, run = str(folder / "config.toml"), elsewhere / "run"

    checked = grpolab("check", "--config", config, "--prompts", "1", "--json", cwd=elsewhere)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr
    report = json.loads(checked.stdout)
    reference = report["dry_run"]["references"][0]
    assert reference["components"]["completion"] == 1.0  # ShopEnv.get_reward() on the reference's episode
    assert reference["components"]["names_order"] == 1.0 and reference["components"]["no_stray_writes"] == 1.0
    assert not report["gameable"]

    trained = grpolab("train", "--config", config, "--out", str(run), "--quiet", cwd=elsewhere)
    assert trained.returncode == 0, trained.stderr
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["env"] == f"{folder / 'shop.py'}:ShopEnv"
    assert recorded["rewards"] == [f"{folder / 'rewards.py'}:*"]
    rows = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert rows and all(isinstance(r["components"]["no_stray_writes"], float) for r in rows)  # environments given
    assert all("[Signed in as" in r["prompt"] for r in rows)  # reset's text, in the prompt the episodes saw
    metrics = [json.loads(m) for m in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 1 and "reward/names_order" in metrics[0]

    evaluated = grpolab("eval", "--run", str(run), "--limit", "1", "--json", cwd=elsewhere)
    assert evaluated.returncode == 0, evaluated.stderr
    assert str(folder / "rewards.py") in evaluated.stderr  # the run's reward functions, named as they are imported


def test_the_trl_backend_trains_the_stateful_example_scoring_each_episode_in_its_rollout(tmp_path):
    """`train --backend trl` on a TRL environment (state per episode): grpolab's rollout scores each episode from the
    traffic it recorded and TRL's reward functions read those scores, so TRL's per-component rewards are the lab's
    episode scores (it was refused: a transcript alone cannot be re-run on a state that is gone)."""
    pytest.importorskip("trl")
    folder = tiny_example(tmp_path)
    run = tmp_path / "run"
    trained = grpolab(
        "train", "--config", str(folder / "config.toml"), "--backend", "trl", "--out", str(run), "--quiet", cwd=tmp_path
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    weights = json.loads((run / "config.json").read_text())["reward"]["weights"]
    (metrics,) = [json.loads(m) for m in (run / "metrics.jsonl").read_text().splitlines()]
    episodes = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert metrics["backend"] == "trl" and len(episodes) == 4  # every episode of the step is logged
    for name in ("format", "length", "names_order", "no_stray_writes"):
        lab = sum(e["components"][name] for e in episodes) / len(episodes) * weights.get(name, 1.0)
        assert metrics[f"reward/{name}"] == pytest.approx(lab, abs=1e-6), name


def test_chat_asks_in_a_rows_episode_when_reset_needs_its_columns(tmp_path, tokenizer, user_rewards):
    """`grpolab chat --task ID` on a TRL class whose reset needs more than the prompt: the question is asked in
    that row's episode (reset with its columns, its sign-in text after the question), and the calls change that
    episode's state; without --task the error names the flag."""
    from grpolab.agent.chat import ChatSession
    from grpolab.errors import UserError
    from grpolab.formats import checked_format

    from .test_agent import ScriptedLM

    env = env_for(load_config(tiny_example(tmp_path) / "config.toml"))
    task = env.all_tasks()["cancel-1001"]
    _, ids, _ = checked_format(tokenizer, env, "inline").reference_tokens(env, task)  # what a perfect agent writes
    session = ChatSession(ScriptedLM(ids, len(tokenizer)), tokenizer, env, task_id="cancel-1001")
    assert session.question("Cancel my lamp, please.").prompt.startswith("Cancel my lamp, please.\n\n[Signed in as Ada")
    events = list(session.send("Cancel my lamp, please."))
    assert [e.kind for e in events if e.kind == "tool_call"] == ["tool_call", "tool_call"]
    assert session._state.state.orders["#1001"]["status"] == "cancelled"  # this episode's own shop
    with pytest.raises(UserError, match="--task ID"):
        list(ChatSession(ScriptedLM(ids, len(tokenizer)), tokenizer, env).send("Cancel my lamp."))
    with pytest.raises(UserError, match="no task 'nope'"):
        ChatSession(ScriptedLM(ids, len(tokenizer)), tokenizer, env, task_id="nope")
