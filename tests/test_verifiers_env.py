"""verifiers 0.4 environments run in grpolab unchanged (`grpolab.envs.verifiers_env`).

The environments are verifiers' own, built from the package's classes in examples/verifiers_env/ (no grpolab
import there): a unit converter with a toolset and two weighted rewards (what verifiers 0.1-0.3 called a ToolEnv
with a Rubric), a guessing game whose toolset keeps the rollout's state, and a multi-turn env whose environment
speaks user turns (refused). Each test reads what grpolab made of them: tasks, tool schemas, the rubric and its
weights, scores of right and wrong transcripts against verifiers' own scoring, and one rollout group on the tiny
model, teacher-forced.
"""

import asyncio
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytestmark = pytest.mark.xdist_group("test_verifiers_env")  # verifiers, its envs and the tiny policy: loaded once

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "verifiers_env"
UNITS = str(EXAMPLES / "vf_units.py")
GUESS = str(EXAMPLES / "vf_guess.py")
FEEDBACK = str(EXAMPLES / "vf_feedback.py")
WEIGHTS = {"format": 1.0, "schema": 1.5, "completion": 3.0, "length": 0.0}


def words(text: str) -> int:
    return len(text.split())


def test_a_missing_or_other_verifiers_is_named_with_the_install_line(monkeypatch):
    from grpolab.envs.verifiers_env import verifiers_api
    from grpolab.errors import UserError

    monkeypatch.setitem(sys.modules, "verifiers", None)  # as if not installed
    with pytest.raises(UserError) as exc:
        verifiers_api()
    assert "not installed" in str(exc.value) and "pip install 'grpolab[verifiers]'" in str(exc.value)
    monkeypatch.undo()

    vf_root = pytest.importorskip("verifiers")
    monkeypatch.setattr(vf_root, "__version__", "0.3.1")
    with pytest.raises(UserError, match=r"verifiers 0\.4\.0's API .* is 0\.3\.1"):
        verifiers_api()


@pytest.fixture(scope="module")
def vf():
    pytest.importorskip("verifiers", minversion="0.4.0")
    import verifiers.v1

    return verifiers.v1


@pytest.fixture(scope="module")
def units(vf):
    from grpolab.envs.verifiers_env import load

    return load(UNITS)


@pytest.fixture(scope="module")
def guess(vf):
    from grpolab.envs.verifiers_env import load

    return load(GUESS)


def transcript(*parts: str) -> str:
    return "".join(parts)


def units_answer(env, task, final: str, value: float | None = None, unit: str | None = None) -> str:
    """A transcript of the unit converter: one real call, then `final`."""
    from grpolab.protocol import render_thought, render_tool_call, render_tool_response

    info = task.meta["info"]
    number = float(task.prompt.split()[1])
    arguments = {"value": number, "from_unit": info["from_unit"], "to_unit": info["to_unit"]}
    response = env.toolbox.execute("convert", arguments)
    return transcript(
        render_thought("I convert it with the tool."),
        render_tool_call("convert", arguments),
        render_tool_response(response),
        final,
    )


# --- tasks, tools, rubric ----------------------------------------------------------------------------------------


def test_the_rows_become_tasks_with_a_stable_heldout_split(units):
    from grpolab.envs.data.env import heldout_by_hash

    train, heldout = units.tasks("train"), units.tasks("heldout")
    assert len(train) + len(heldout) == 20
    assert [t.id for t in heldout] == [
        f"convert-{i:02d}" for i in range(20) if heldout_by_hash(f"convert-{i:02d}", 0.2)
    ]
    assert heldout and not {t.id for t in train} & {t.id for t in heldout}
    task = units.task("convert-00")
    assert task.prompt == "Convert 3.5 miles to kilometres."
    assert (task.answer, task.truth) == ("5.63", 5.63)
    assert task.meta["answer"] == 5.63 and task.meta["info"] == {"from_unit": "mi", "to_unit": "km"}  # its own fields
    assert task.reference_calls == [("convert", {"value": 3.5, "from_unit": "mi", "to_unit": "km"})]
    assert task.needs_tools and not units.stateful
    prompt = units.system_prompt(task)
    assert prompt.startswith("You convert units. Use the convert tool")  # the row's system prompt
    assert '"name": "convert"' in prompt


def test_the_toolset_is_a_tool_with_mcps_schema(units):
    [schema] = units.toolbox.schemas
    assert schema == {
        "type": "function",
        "function": {
            "name": "convert",  # TOOL_PREFIX = None: bare, as verifiers' chat loop advertises it
            "description": "Convert a quantity between units of length (km, mi, m, ft) or of mass (kg, lb).",
            "parameters": {
                "properties": {
                    "value": {"type": "number"},
                    "from_unit": {"enum": ["km", "mi", "kg", "lb", "m", "ft"], "type": "string"},
                    "to_unit": {"enum": ["km", "mi", "kg", "lb", "m", "ft"], "type": "string"},
                },
                "required": ["value", "from_unit", "to_unit"],
                "type": "object",
            },
        },
    }
    run = units.toolbox.execute
    assert run("convert", {"value": 10, "from_unit": "mi", "to_unit": "km"}) == {"value": 16.0934, "unit": "km"}
    assert run("convert", {"value": 1, "from_unit": "mi", "to_unit": "kg"}) == {
        "error": "ValueError: cannot convert length to mass"
    }
    assert "invalid arguments" in run("convert", {"value": 1, "from_unit": "parsec", "to_unit": "km"})["error"]


def test_the_rubric_weights_arrive_and_the_verifier_is_the_heaviest_reward(vf, units):
    from grpolab.envs.verifiers_env import load, verifiers_weights
    from grpolab.errors import UserError
    from grpolab.rewards.rubric import rubric_of

    assert units.vf_weights == {"correct": 1.0, "names_unit": 0.2}
    assert units.verifier == "correct"
    own = units.rubric.own
    assert list(own) == ["correct", "names_unit"]
    assert own["names_unit"].default_weight == 0.2 and own["correct"].default_weight == 0.0  # paid through C
    assert "the verifier" in own["correct"].description and "1 in verifiers" in own["correct"].description
    weights = rubric_of(units).default_weights()
    assert weights["names_unit"] == 0.2 and weights["completion"] == 3.0
    assert verifiers_weights(units) == {
        "format": 0.0,
        "schema": 0.0,
        "completion": 0.0,
        "length": 0.0,
        "correct": 1.0,
        "names_unit": 0.2,
    }
    # a weight set in verifiers' own config (TaskConfig.rewards, `--env.taskset.task.rewards.NAME.weight`) arrives
    heavier = load(UNITS, args={"num_tasks": 20, "task": {"rewards": {"names_unit": {"weight": 2.5}}}})
    assert heavier.vf_weights["names_unit"] == 2.5 and heavier.verifier == "names_unit"
    chosen = load(UNITS, verifier="names_unit")
    assert chosen.verifier == "names_unit" and chosen.rubric.own["correct"].default_weight == 1.0
    with pytest.raises(UserError, match="has no reward 'exact'.*correct, names_unit"):
        load(UNITS, verifier="exact")


# --- scoring -----------------------------------------------------------------------------------------------------


def test_a_right_and_a_wrong_transcript(units):
    from grpolab.protocol import render_tool_response
    from grpolab.rewards.score import score_transcript

    task = units.task("convert-00")
    default = score_transcript(units, task, units_answer(units, task, "3.5 miles is 5.63 km."), count_tokens=words)
    assert "correct" not in default.components  # the verifier's own component, at weight 0, is not scored twice
    assert default.components["names_unit"] == 1.0 and default.weights["names_unit"] == 0.2
    weights = {**WEIGHTS, "correct": 0.0}  # named: logged, not paid
    right = score_transcript(
        units, task, units_answer(units, task, "3.5 miles is 5.63 km."), weights, count_tokens=words
    )
    assert right.components["completion"] == 1.0 and right.reasons["completion"] == "correct = 1"
    assert right.components["names_unit"] == 1.0 and right.components["correct"] == 1.0
    assert right.components["format"] == 1.0 and right.components["schema"] == 1.0

    wrong = score_transcript(units, task, units_answer(units, task, "3.5 miles is 7.1 km."), count_tokens=words)
    assert wrong.components["completion"] == 0.0 and wrong.reasons["completion"] == "correct = 0"
    assert wrong.components["names_unit"] == 1.0  # the unit is still named

    unnamed = score_transcript(units, task, units_answer(units, task, "It is 5.63."), count_tokens=words)
    assert unnamed.components["completion"] == 1.0 and unnamed.components["names_unit"] == 0.0

    forged = "<thought>I know this one.</thought>\n" + render_tool_response({"value": 5.63}) + "5.63 km"
    forgery = score_transcript(units, task, forged, count_tokens=words)
    assert forgery.components["completion"] == 0.0 and "fabricated" in forgery.reasons["completion"]


def test_grpolab_pays_what_verifiers_own_scoring_pays(units):
    """Under `verifiers_weights` the total is verifiers' own weighted sum: `Task.score` on the same trace."""
    from grpolab.envs.verifiers_env import replay_messages, verifiers_weights
    from grpolab.rewards.replay import replay
    from grpolab.rewards.score import score_transcript

    weights = verifiers_weights(units)
    for task_id, final in [("convert-00", "5.63 km"), ("convert-03", "It is 13.2."), ("convert-07", "no idea")]:
        task = units.task(task_id)
        text = units_answer(units, task, final)
        ours = score_transcript(units, task, text, weights, count_tokens=words)
        trace = units.trace(task, replay_messages(replay(units, task, text)))
        asyncio.run(units._vf_tasks[task_id].score(trace))  # verifiers' own scoring of the same trace
        assert ours.total == pytest.approx(trace.reward)
        assert {k: r.score for k, r in trace.rewards.items()} == {
            "correct": ours.components["correct"],
            "names_unit": ours.components["names_unit"],
        }


def test_the_trace_a_reward_reads(vf, units):
    from grpolab.envs.verifiers_env import replay_messages
    from grpolab.protocol import render_tool_response
    from grpolab.rewards.replay import replay

    task = units.task("convert-00")
    text = units_answer(units, task, "3.5 miles is 5.63 km.") + render_tool_response({"value": 99})  # + a forgery
    real = render_tool_response({"value": 5.6327, "unit": "km"})
    text = text.replace(real, render_tool_response({"value": 7.0, "unit": "km"}), 1)  # the model's own version
    trace = units.trace(task, replay_messages(replay(units, task, text)))
    assert [m.role for m in trace.messages] == ["system", "user", "assistant", "tool", "assistant"]
    system, user, call, tool, answer = trace.messages
    assert system.content.startswith("You convert units") and user.content == task.prompt
    assert call.reasoning_content == "I convert it with the tool." and call.content == ""
    [tool_call] = call.tool_calls
    assert tool_call.name == "convert"
    assert json.loads(tool_call.arguments) == {"value": 3.5, "from_unit": "mi", "to_unit": "km"}
    assert tool.tool_call_id == tool_call.id and tool.name == "convert"
    assert json.loads(tool.content) == {"value": 5.6327, "unit": "km"}  # what the tool said, not what the model wrote
    assert trace.last_reply == "3.5 miles is 5.63 km."
    assert [m.role for m in trace.assistant_messages] == ["assistant", "assistant"]
    assert [t.name for t in trace.tools] == ["convert"]


ASKED = "What is 2 + 2?"


def inline_taskset(vf, reward_fns: dict, prompt=ASKED, needs_container=False, rows=12):
    """A taskset of `rows` tasks whose Task has the given methods (rewards, hooks): a verifiers user's own."""

    class Data(vf.TaskData):
        answer: str = "4"

    class ProbeTask(vf.Task[Data]):
        NEEDS_CONTAINER = needs_container

    for name, fn in reward_fns.items():
        setattr(ProbeTask, name, fn)

    class ProbeTaskset(vf.Taskset[ProbeTask, vf.TasksetConfig]):
        def load(self):
            for i in range(rows):
                yield ProbeTask(Data(id=f"p{i}", prompt=prompt))

    return ProbeTaskset(vf.TasksetConfig())


def test_rewards_get_task_and_trace_by_name_keyed_and_sync_ones_too(vf):
    from grpolab.envs.verifiers_env import from_verifiers
    from grpolab.rewards.score import score_transcript

    seen = {}

    @vf.reward(weight=2.0)
    async def exact(self, task, trace) -> float:
        seen["task"], seen["trace"] = task, trace
        return float(trace.last_reply == task.answer)

    @vf.reward(weight=0.5)
    async def parts(self, trace) -> dict:
        return {"short": float(len(trace.last_reply) < 3), "digit": float(trace.last_reply.isdigit())}

    @vf.reward(weight=0.1)
    def plain(self, trace) -> float:  # verifiers itself awaits every reward; a sync one works here too
        return 0.25

    env = from_verifiers(inline_taskset(vf, {"exact": exact, "parts": parts, "plain": plain}), thought_required=False)
    assert env.verifier == "exact" and env.vf_weights == {"exact": 2.0, "parts": 0.5, "plain": 0.1}
    task = env.tasks("train")[0]
    score = score_transcript(env, task, "4", {"completion": 1.0, "parts": 1.0, "plain": 1.0}, count_tokens=words)
    assert score.components["completion"] == 1.0
    assert score.components["parts"] == 2.0 and score.reasons["parts"] == "short = 1, digit = 1"
    assert score.components["plain"] == 0.25
    assert seen["task"] is env._vf_tasks[task.id].data and seen["trace"].last_reply == "4"
    assert score_transcript(env, task, "5", {"completion": 1.0}, count_tokens=words).components["completion"] == 0.0


def test_a_few_shot_prompt_goes_to_the_instructions(vf):
    from grpolab.envs.verifiers_env import from_verifiers

    @vf.reward
    async def exact(self, trace) -> float:
        return float(trace.last_reply == "4")

    shots = [
        vf.SystemMessage(content="Answer with a number."),
        vf.UserMessage(content="What is 1 + 1?"),
        vf.AssistantMessage(content="2"),
        vf.UserMessage(content="What is 2 + 2?"),
    ]
    env = from_verifiers(inline_taskset(vf, {"exact": exact}, prompt=shots))
    task = env.tasks("train")[0]
    assert task.prompt == "What is 2 + 2?"
    assert env.system_prompt(task).startswith("Answer with a number.\n\nExample:\nUser: What is 1 + 1?\nAssistant: 2")
    trace = env.trace(task, [])
    assert [m.role for m in trace.messages] == ["system", "user", "assistant", "user"]  # the row's messages as given


def test_what_needs_a_sandbox_a_judge_or_a_user_is_refused(vf):
    from grpolab.envs.verifiers_env import from_verifiers
    from grpolab.errors import UserError

    @vf.reward
    async def exact(self, trace) -> float:
        return 1.0

    @vf.reward
    async def in_box(self, trace, runtime) -> float:
        return 1.0

    with pytest.raises(UserError, match="in_box takes a runtime"):
        from_verifiers(inline_taskset(vf, {"exact": exact, "in_box": in_box}))
    with pytest.raises(UserError, match="needs a container"):
        from_verifiers(inline_taskset(vf, {"exact": exact}, needs_container=True))

    async def setup(self, trace, runtime):
        return None

    with pytest.raises(UserError, match=r"defines setup\(trace, runtime\)"):
        from_verifiers(inline_taskset(vf, {"exact": exact, "setup": setup}))
    with pytest.raises(UserError, match="has no @vf.reward"):
        from_verifiers(inline_taskset(vf, {}))
    with pytest.raises(UserError, match="has no prompt .* simulated user"):
        from_verifiers(inline_taskset(vf, {"exact": exact}, prompt=None))


def test_an_env_that_speaks_user_turns_is_refused_and_says_why(vf):
    from grpolab.envs.verifiers_env import from_verifiers, load
    from grpolab.errors import UserError

    with pytest.raises(UserError) as exc:
        load(FEEDBACK)  # its load_environment: the FeedbackEnv it bundles
    message = str(exc.value)
    assert "FeedbackEnv.run()" in message and "no place for a user turn" in message
    assert "examples/verifiers_env/vf_guess.py" in message  # the way it can run: the user's side as a tool
    with pytest.raises(UserError, match="FeedbackEnv.run()"):
        load(f"{FEEDBACK}:SumTaskset")  # the taskset alone: what its package would run it under
    user_sim = vf.resolve_env_config({"id": "user-sim", "taskset": {"id": "vf_units"}})
    with pytest.raises(UserError, match="UserSimEnv.run()"):
        from_verifiers(user_sim)


def test_load_takes_a_path_a_module_an_attribute_and_arguments(vf, units):
    from grpolab.envs.verifiers_env import from_config, load
    from grpolab.errors import UserError

    assert len(load(UNITS, args={"num_tasks": 30}).all_tasks()) == 30  # load_environment(**args)
    assert len(load(f"{UNITS}:ConvertTaskset", args={"num_tasks": 10}).all_tasks()) == 10  # a Taskset class
    assert load("vf_units:load_environment").label == "vf_units"  # a module on sys.path (the file's folder)
    with pytest.raises(UserError, match="no verifiers environment file"):
        load("examples/verifiers_env/nothing.py", base_dir=EXAMPLES.parents[1])
    with pytest.raises(UserError, match="has no attribute 'nope'"):
        load(f"{UNITS}:nope")
    with pytest.raises(UserError, match="not a verifiers environment"):
        load(f"{UNITS}:rows", args={"n": 3})
    # a config's section, read by attribute (`env = "verifiers"`)
    section = SimpleNamespace(env=UNITS, args={"num_tasks": 20}, verifier="names_unit", heldout_fraction=0.5)
    env = from_config(section)
    assert env.verifier == "names_unit" and len(env.tasks("heldout")) > len(units.tasks("heldout"))
    with pytest.raises(UserError, match="names no verifiers environment"):
        from_config(SimpleNamespace(env=""))


def test_reference_fields_of_a_row_make_a_reference_solution(vf, units):
    import vf_units  # loaded from its file by the units fixture

    from grpolab.envs.verifiers_env import from_verifiers
    from grpolab.rewards.score import score_transcript

    class RefData(vf_units.ConvertData):
        reference_calls: list[dict] = []
        reference_answer: str = ""

    class RefTaskset(vf.Taskset[vf_units.ConvertTask, vf_units.ConvertConfig]):
        def load(self):
            for row in vf_units.rows(self.config.num_tasks):
                info = row["info"]
                value = float(row["question"].split()[1])
                call = {"name": "convert", "arguments": {"value": value, **info}}
                data = RefData(
                    id=row["id"],
                    prompt=row["question"],
                    answer=row["answer"],
                    info=info,
                    reference_calls=[call],
                    reference_answer=f"That is {row['answer']} {vf_units.NAMES[info['to_unit']]}.",
                )
                yield vf_units.ConvertTask(data, self.config.task)

    env = from_verifiers(RefTaskset(vf_units.ConvertConfig()))
    task = env.task("convert-00")
    assert task.reference_calls == [("convert", {"value": 3.5, "from_unit": "mi", "to_unit": "km"})]
    text = env.reference_transcript(task)
    assert text.startswith("<thought>I will call convert to work out the answer.</thought>")
    assert '{"value": 5.6327, "unit": "km"}' in text and text.endswith("That is 5.63 kilometres.")
    score = score_transcript(env, task, text, count_tokens=words)
    assert score.components["completion"] == 1.0 and score.components["format"] == 1.0
    assert score.components["schema"] == 1.0 and score.components["names_unit"] == 1.0


# --- state -------------------------------------------------------------------------------------------------------


def test_a_toolset_with_state_makes_a_stateful_env(guess):
    from grpolab.protocol import render_tool_call, render_tool_response
    from grpolab.rewards.score import score_transcript

    assert guess.stateful and guess._state_cls.__name__ == "GuessState"
    assert [s["function"]["name"] for s in guess.toolbox.schemas] == ["game_guess"]  # TOOL_PREFIX = "game"
    assert guess.vf_weights == {"efficient": 0.5, "found": 1.0} and guess.verifier == "found"
    task = guess.task("guess-00")  # the secret is 1
    one, two = guess.start_episode(task), guess.start_episode(task)
    assert one.toolbox.execute("game_guess", {"number": 50}) == {"result": "lower"}
    assert one.toolbox.execute("game_guess", {"number": task.truth}) == {"result": "correct"}
    assert one.state.guesses == [50, task.truth] and two.state.guesses == []  # each episode its own state
    one.close(), two.close()
    fresh = guess.toolbox_for(task)  # what `grpolab tools run` and the probes call: a working episode of its own
    assert fresh.execute("game_guess", {"number": task.truth}) == {"result": "correct"}

    calls = [(50, "lower"), (task.truth, "correct")]
    text = "".join(
        f"<thought>Guess {n} next.</thought>\n"
        + render_tool_call("game_guess", {"number": n})
        + render_tool_response({"result": r})
        for n, r in calls
    )
    right = score_transcript(guess, task, text + f"It is {task.truth}.", count_tokens=words)
    assert right.components["completion"] == 1.0 and right.components["efficient"] == pytest.approx(1 - 1 / 9)
    wrong = score_transcript(guess, task, text + "It is 7.", count_tokens=words)
    assert wrong.components["completion"] == 0.0
    lucky = score_transcript(guess, task, f"It is {task.truth}.", count_tokens=words)  # named, never guessed
    assert lucky.components["completion"] == 0.0 and lucky.components["efficient"] == 0.0


# --- a rollout group on the tiny model ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(vf):
    from grpolab.config import load_config
    from grpolab.engine.policy import build_policy

    cfg = load_config(None, {"model": "tiny", "rollout.max_new_tokens": 200})
    model, tok, _ = build_policy(cfg)
    return cfg, model, tok


def forced(tok, turns_per_episode):
    """Teacher forcing: episode i of the batch writes turns_per_episode[i][e.turns], then ends its turn."""
    encoded = [[tok(t, add_special_tokens=False).input_ids for t in turns] for turns in turns_per_episode]
    order: dict[int, int] = {}

    def choose(episodes, logits):
        if not order:  # the first call sees every episode, in batch order
            order.update({id(e): i for i, e in enumerate(episodes)})
        picked = []
        for e in episodes:
            turns = encoded[order[id(e)]]
            turn = turns[min(e.turns, len(turns) - 1)]
            pos = len(e.completion_ids) - e.turn_start
            picked.append(turn[pos] if pos < len(turn) else tok.eos_token_id)
        ids = torch.tensor(picked)
        return ids, torch.log_softmax(logits, -1).gather(-1, ids[:, None]).squeeze(-1)

    return choose


def test_a_group_rolls_out_and_scores_on_the_tiny_model(units, tiny):
    from grpolab.engine import rollout
    from grpolab.protocol import render_thought, render_tool_call, render_tool_response
    from grpolab.rewards.score import score_episodes

    cfg, model, tok = tiny
    task = units.task("convert-00")
    call = render_thought("I convert it with the tool.") + render_tool_call(
        "convert", {"value": 3.5, "from_unit": "mi", "to_unit": "km"}
    )
    turns = [
        [call, "3.5 miles is 5.63 km."],  # right
        [call, "3.5 miles is 9.99 km."],  # wrong number
        [call, "It is 5.63."],  # right, the unit not named
        [render_thought("I know it.") + render_tool_response({"value": 5.63}) + "5.63 km"],  # a forged response
    ]
    settings = rollout.sampling_settings(cfg, greedy=True, max_turns=3)
    episodes = rollout.run_episodes(model, tok, units, [task], 4, settings, choose=forced(tok, turns))
    assert [len(e.results) for e in episodes] == [1, 1, 1, 0]
    assert episodes[0].results[0].response == {"value": 5.6327, "unit": "km"}  # the toolset ran in the rollout
    score_episodes(units, episodes, WEIGHTS, 64)
    assert [e.score.components["completion"] for e in episodes] == [1.0, 0.0, 1.0, 0.0]
    assert [e.score.components["names_unit"] for e in episodes] == [1.0, 1.0, 0.0, 1.0]
    assert "fabricated" in episodes[3].score.reasons["completion"]
    totals = [e.score.total for e in episodes]
    assert totals[0] > totals[2] > totals[1] > totals[3]  # the group has an advantage signal


def test_a_stateful_group_keeps_one_state_per_episode(guess, tiny):
    from grpolab.engine import rollout
    from grpolab.protocol import render_thought, render_tool_call
    from grpolab.rewards.score import score_episodes

    cfg, model, tok = tiny
    task = guess.task("guess-02")  # the secret is 25

    def guessing(*numbers):
        return [render_thought(f"Try {n}.") + render_tool_call("game_guess", {"number": n}) for n in numbers]

    turns = [
        [*guessing(task.truth), f"The number is {task.truth}."],
        [*guessing(50, 1, task.truth), f"The number is {task.truth}."],
        [*guessing(50), "The number is 49."],
    ]
    settings = rollout.sampling_settings(cfg, greedy=True, max_turns=4)
    episodes = rollout.run_episodes(model, tok, guess, [task], 3, settings, choose=forced(tok, turns))
    assert [e.episode_state.state.guesses for e in episodes] == [[task.truth], [50, 1, task.truth], [50]]
    assert episodes[0].results[0].response == {"result": "correct"}
    score_episodes(guess, episodes, WEIGHTS, 64)  # scored from the recorded traffic and each episode's state
    assert [e.score.components["completion"] for e in episodes] == [1.0, 1.0, 0.0]
    assert [e.score.components["efficient"] for e in episodes] == pytest.approx([1.0, 1 - 2 / 9, 1.0])


# --- the config's two routes, and the command line ------------------------------------------------------------------


def test_a_config_names_a_verifiers_env_either_way(vf, tmp_path):
    """`env = "file.py:load_environment"` and `env = "verifiers"` + [verifiers] build the same env, the file found
    from the config's folder and the section's arguments passed to load_environment."""
    from grpolab.config import load_config
    from grpolab.envs import env_for
    from grpolab.errors import UserError

    (tmp_path / "by_entry.toml").write_text('env = "my_units.py:load_environment"\n')
    (tmp_path / "by_section.toml").write_text('env = "verifiers"\n[verifiers]\nenv = "my_units.py"\n')
    (tmp_path / "my_units.py").write_text(Path(UNITS).read_text())  # its own name: verifiers imports it by its stem
    by_entry = env_for(load_config(str(tmp_path / "by_entry.toml")))
    by_section = env_for(load_config(str(tmp_path / "by_section.toml")))
    assert [t.id for t in by_entry.tasks("train")] == [t.id for t in by_section.tasks("train")]
    assert set(by_entry.toolbox.tools) == set(by_section.toolbox.tools) == {"convert"}
    (tmp_path / "empty.toml").write_text('env = "verifiers"\n')
    with pytest.raises(UserError, match="names no verifiers environment"):
        env_for(load_config(str(tmp_path / "empty.toml")))


def test_the_example_config_is_checked_on_the_tiny_model(vf, tmp_path):
    """`grpolab check` runs the example's verifiers env unchanged: probes under its rubric, references solved."""
    import json

    from tests.conftest import run_grpolab

    done = run_grpolab(
        "check", "--config", str(EXAMPLES / "config.toml"), "--model", "tiny", "--prompts", "1", "--json", cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["dry_run"]["references"][0]["components"]["completion"] == 1.0
