"""Reproductions that once gave a traceback or a wrong answer, each held here: tool output nested thousands deep,
an episode whose close raises, `new-env --into` on what is not a folder of the user's, `lab --config` on a
`module:Class` environment, two reward components with one letter, the shop's `actions` credit for an id with
spaces, and threads left behind by in-process tool calls that time out in C."""

import threading
from pathlib import Path

import pytest

from grpolab.config import load_config
from grpolab.errors import UserError
from grpolab.timelimit import MAX_STUCK_CALLS
from grpolab.tools import Tool, cap_output


def nested(depth: int) -> dict:
    """A dict `depth` levels deep, built without recursion."""
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def returns_deep(depth: int) -> dict:
    """Returns a value nested `depth` levels deep.

    Args:
        depth: How deep.
    """
    return nested(depth)


def raises_deep(depth: int) -> dict:
    """Raises an exception whose argument nests `depth` levels deep (its message is a recursive repr).

    Args:
        depth: How deep.
    """
    raise ValueError(nested(depth))


# ---- 1. tool output nested too deep ------------------------------------------------------------------------------


def test_output_nested_5000_deep_is_an_error_response_in_every_path():
    """Before: cap_output raised RecursionError (a traceback from Tool.run in-process), and the forked child died
    without an answer."""
    assert "nests more than 64 levels" in cap_output(nested(5000))["error"]
    assert "nests more than 64 levels" in cap_output(nested(100))["error"]  # within JSON's reach, beyond the limit
    assert cap_output(nested(10)) == nested(10)
    for isolate in (False, True):  # on a thread, in a child process
        response = Tool(returns_deep, isolate=isolate).run({"depth": 5000})
        assert "nests more than 64 levels" in response["error"], (isolate, response)


@pytest.mark.parametrize("isolate", [False, True])
def test_an_exception_whose_message_cannot_be_made_is_still_a_response(isolate):
    """Before: str(exc) raised RecursionError inside the call's thread (a thread traceback, and the call read as
    timed out) or in the child (no answer)."""
    assert Tool(raises_deep, isolate=isolate).run({"depth": 5000})["error"].startswith("ValueError: ")


# ---- 7. in-process calls stuck in C ------------------------------------------------------------------------------

_release = threading.Event()


def hangs_in_c(x: int) -> dict:
    """Waits on a lock, inside C, until the test lets it go (a timeout's exception cannot reach it there).

    Args:
        x: Anything.
    """
    _release.wait(60)
    return {"x": x}


def test_in_process_calls_stuck_in_c_are_bounded_and_refused_with_why():
    """Before: 20 timed-out calls left 20 threads waiting; now at most MAX_STUCK_CALLS, the rest refused."""
    tool = Tool(hangs_in_c, timeout_s=0.05, isolate=False)
    before = threading.active_count()
    try:
        responses = [tool.run({"x": i}) for i in range(20)]
        assert threading.active_count() - before <= MAX_STUCK_CALLS + 1
        refused = [r for r in responses if "still running" in r["error"]]
        assert len(refused) >= 20 - MAX_STUCK_CALLS - 1
        assert f"{MAX_STUCK_CALLS} earlier calls of hangs_in_c timed out" in refused[-1]["error"]
    finally:
        _release.set()
    for thread in threading.enumerate():
        if thread.name.startswith("grpolab-tool-hangs_in_c"):
            thread.join(30)
    assert tool.run({"x": 1}) == {"x": 1}  # once they ended, the tool runs again


# ---- 2. an episode whose close raises ----------------------------------------------------------------------------

CLOSE_RAISES = '''
from grpolab.envs.base import Environment, EpisodeState, Task, Verdict


def echo(text: str) -> dict:
    """Echo.

    Args:
        text: Anything.
    """
    return {"echo": text}


class CloseRaises(Environment):
    name = "close_raises"
    stateful = True

    def tasks(self, split):
        return [Task("t-" + split, "Say hi.", "hi", "hi", "echo")]

    def start_episode(self, task):
        def close():
            raise OSError("the sandbox is gone")

        return EpisodeState([echo], close=close)

    def verify(self, task, final_answer, evidence):
        return Verdict(True, "ok")
'''


def test_tools_run_names_an_episode_close_that_raises_after_printing_the_response(cli, tmp_path):
    """Before: a traceback from EpisodeState.close, and the tool's response lost."""
    plugin = tmp_path / "hardening_close_env.py"
    plugin.write_text(CLOSE_RAISES)
    env = "hardening_close_env:CloseRaises"
    code, out, err = cli("tools", "run", "echo", '{"text": "hi"}', "--plugin", str(plugin), "--env", env)
    assert code == 2 and '"echo": "hi"' in out
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "close raised OSError: the sandbox is gone" in line and "Traceback" not in err


# ---- 3. new-env --into -------------------------------------------------------------------------------------------


def _into_cases(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """Each refused `new-env` (its arguments) and a word its one-line error must hold."""
    (tmp_path / "a_file").write_text("mine")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "to_dev").symlink_to("/dev/null")  # never a real /dev folder: a regression could write there
    special = "under /dev, /proc or /sys"
    return {
        "into a file": (["env1", "--into", str(tmp_path / "a_file")], "not a folder"),
        "into a path through a file": (["env1", "--into", str(tmp_path / "a_file" / "sub")], "Not a directory"),
        "a dangling symlink name": (["dangling", "--into", str(tmp_path)], "does not exist"),
        "into /proc": (["env1", "--into", "/proc"], special),
        "into /sys": (["env1", "--into", "/sys/kernel"], special),
        "into /dev": (["env1", "--into", "/dev/null"], special),
        "into a link to /dev": (["env1", "--into", str(tmp_path / "to_dev")], special),
        "into a missing folder": (["env1", "--into", str(tmp_path / "not" / "yet" / "there")], "mkdir -p"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "into a file",
        "into a path through a file",
        "a dangling symlink name",
        "into /proc",
        "into /sys",
        "into /dev",
        "into a link to /dev",
        "into a missing folder",
    ],
)
def test_new_env_refuses_what_is_not_a_folder_of_the_users_and_writes_nothing(cli, tmp_path, case):
    """Before: NotADirectoryError, FileExistsError and FileNotFoundError tracebacks, and a missing --into made
    with all its parents (docs/security.md: a missing folder is never created)."""
    args, word = _into_cases(tmp_path)[case]
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = cli("new-env", *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: "), err
    assert word in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before and (tmp_path / "a_file").read_text() == "mine"
    if case == "into a missing folder":
        assert f"mkdir -p {tmp_path / 'not' / 'yet' / 'there'}" in err and "folder " + str(tmp_path / "not") in err


def test_new_env_still_writes_into_an_existing_folder_and_an_empty_one(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    code, _, err = cli("new-env", "empty", "--into", str(tmp_path))
    assert code == 0 and (tmp_path / "empty" / "config.toml").is_file(), err
    code, _, err = cli("new-env", "empty", "--into", str(tmp_path))
    assert code == 2 and "not empty" in err


# ---- 4. lab --config on a module:Class environment ---------------------------------------------------------------


def test_the_lab_over_the_stateful_scaffolds_config_offers_and_runs_its_env(tmp_path, request):
    """Beside test_lab's data-scaffold test: `lab --config shop/config.toml` (env = "shop.py:ShopEnv", its file made
    absolute). Before: every handler said the env was not offered, and the dropdown's choices lacked it."""
    pytest.importorskip("gradio")
    from grpolab.lab import form, handlers
    from grpolab.lab.app import build
    from grpolab.lab.limits import LabLimits
    from grpolab.scaffold import new_env

    folder = new_env("shop", tmp_path, stateful=True)
    base = load_config(folder / "config.toml", {"model": "tiny"})
    shop = f"{(folder / 'shop.py').resolve()}:ShopEnv"
    assert base.env == shop
    form.set_base_config(base)
    request.addfinalizer(lambda: form.set_base_config(None))
    controls = form.controls(base)
    values = {n: c.default(base) for n, c in controls.items()}
    assert values["env"] == shop and "reward.weights.actions" in values
    cfg = form.config_from_form(values)
    assert cfg.env == shop and cfg.reward.weights["actions"] == 0.5
    cards, _, probes = handlers.simulate_view(values)
    assert "lab-error" not in cards + probes and "not offered" not in cards + probes
    script, path = handlers.export_view(tmp_path / "exports", values)
    assert path is not None and shop in script
    names = [n for n in controls if n.startswith(form.WEIGHT)]
    shown = dict(zip(names, handlers.weights_shown(shop, names)))
    assert shown["reward.weights.actions"]["visible"] is True
    LabLimits(base_env=base.env).check_config(cfg)  # what a training job started from the page checks
    with pytest.raises(UserError, match="not offered"):  # a request still names no module:attr of its own
        form.config_from_form({**values, "env": "os:getcwd"})
    page = build(tmp_path / "runs", tmp_path / "work")
    (dropdown,) = [b for b in page.blocks.values() if getattr(b, "label", None) == "environment"]
    assert (shop, shop) in dropdown.choices and dropdown.value == shop
    assert dropdown.preprocess(shop) == shop  # what Gradio refused on every event


# ---- 5. reward letters -------------------------------------------------------------------------------------------


def _reward(r, task, env, ctx):
    return 1.0, "always"


def test_a_registered_component_may_not_take_a_letter_in_use():
    """Before: a plugin's component with letter C printed a second `C:` in every breakdown."""
    from grpolab.rewards.components import register_reward, registered_components, unregister_reward

    with pytest.raises(UserError) as info:
        register_reward("hardening_c", _reward, letter="C")
    message = str(info.value)
    assert "'completion'" in message and "'hardening_c'" in message and "another letter" in message
    assert "hardening_c" not in registered_components()
    register_reward("hardening_q", _reward, letter="Q")
    try:
        with pytest.raises(UserError, match="'hardening_q' and 'hardening_q2'"):
            register_reward("hardening_q2", _reward, letter="Q")
        register_reward("hardening_q", _reward, letter="Q")  # registered again (a plugin imported twice): the same
    finally:
        unregister_reward("hardening_q")


def test_an_envs_own_letters_are_checked_when_added_and_against_the_whole_rubric():
    from grpolab.envs import get_env
    from grpolab.rewards.components import register_reward, unregister_reward
    from grpolab.rewards.rubric import rubric_of

    env = get_env("finance")
    env.rubric.add("hardening_one", _reward, letter="Z")
    with pytest.raises(UserError, match="'hardening_one' and 'hardening_two'"):
        env.rubric.add("hardening_two", _reward, letter="Z")
    env.rubric.add("hardening_one", _reward, letter="Z")  # replacing one's own component is no clash
    clashing = get_env("finance")
    clashing.rubric.add("hardening_c", _reward, letter="C")  # alone in its rubric, until assembled
    with pytest.raises(UserError, match="'completion' and 'hardening_c'"):
        rubric_of(clashing)
    register_reward("hardening_plugin_z", _reward, letter="Z")  # a plugin registered after the env added its own
    try:
        with pytest.raises(UserError, match="'hardening_plugin_z' and 'hardening_one'"):
            rubric_of(env)
    finally:
        unregister_reward("hardening_plugin_z")
    assert rubric_of(env).letter("hardening_one") == "Z"
    nameless = get_env("finance")
    nameless.rubric.add("C2", _reward)  # no letter: it shows its name
    assert rubric_of(nameless).letter("C2") == "C2"


def test_a_plugin_registering_a_taken_letter_exits_2_naming_both(cli, tmp_path):
    plugin = tmp_path / "hardening_letter_c.py"
    plugin.write_text(
        "from grpolab.rewards import register_reward\n\n\n"
        "def twice(prompts, completions, **kwargs):\n    return [1.0 for _ in completions]\n\n\n"
        'register_reward("twice", twice, letter="C")\n'
    )
    code, out, err = cli("config", "--plugin", str(plugin))
    assert code == 2 and err.count("\n") == 1 and "'completion' and 'twice'" in err and "another letter" in err


# ---- 6. the shop's actions credit --------------------------------------------------------------------------------


def test_the_shops_actions_credit_compares_ids_as_the_tools_read_them(tmp_path):
    """Before: an order id given as " #1001" cancelled the right order (completion 1) but earned actions 0/1."""
    from grpolab.envs import env_for
    from grpolab.rewards.score import score_transcript
    from grpolab.scaffold import new_env

    cfg = load_config(new_env("shop", tmp_path, stateful=True) / "config.toml")
    env = env_for(cfg)
    for kind in ("cancel", "address"):
        task = next(t for t in env.tasks("train") if t.kind == kind)
        spaced = [(n, {**a, "order_id": f" {a['order_id']}  "}) for n, a in task.reference_calls]
        if kind == "address":
            spaced = [(n, {**a, "address": f"  {a['address']} "} if "address" in a else a) for n, a in spaced]
        sloppy = task.__class__(**{**task.__dict__, "reference_calls": spaced})
        score = score_transcript(env, task, env.reference_transcript(sloppy), cfg.reward.weights, count_tokens=len)
        assert score.components["completion"] == 1.0, score.reasons
        assert score.components["actions"] == 1.0 and "1/1" in score.reasons["actions"], score.reasons
    other = next(t for t in env.tasks("train") if t.kind == "cancel" and t.id != task.id)
    wrong = task.__class__(**{**task.__dict__, "reference_calls": other.reference_calls})
    score = score_transcript(env, task, env.reference_transcript(wrong), cfg.reward.weights, count_tokens=len)
    assert score.components["actions"] == 0.0  # another order's write still earns nothing
