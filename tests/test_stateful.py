"""Tools with state: one environment per episode, scoring from the recorded traffic, forgeries still caught.

The environments here are a user's: a cart kept per episode (stateful) and a ticket desk whose tool returns a fresh
id every call (non-deterministic). Episodes are teacher-forced through the real rollout (tiny model), so every tool
response is the one the environment inserted while the episode ran.
"""

import gc
import json
import time
import uuid

import pytest
import torch

from grpolab.config import load_config
from grpolab.engine import rollout
from grpolab.engine.policy import build_policy
from grpolab.envs.base import Environment, EpisodeState, Evidence, Task, Verdict
from grpolab.protocol import render_tool_call, render_tool_response
from grpolab.rewards.score import score_episodes, score_transcript
from grpolab.tools import Tool, ToolBox

WEIGHTS = {"format": 0.0, "schema": 1.0, "completion": 1.0, "length": 0.0}


class CartEnv(Environment):
    """Put the asked items in the cart; the verifier reads the episode's final cart, not the answer."""

    name = "cart"
    instructions = "Add every item the user asks for to the cart, then say done."
    stateful = True
    thought_required = False

    def __init__(self):
        self.opened = self.closed = 0

    def tasks(self, split):
        return [
            Task("ab", "Buy a and b.", "a, b", ["a", "b"], "cart", reference_calls=[("add_to_cart", {"item": "a"})]),
            Task("c", "Buy c.", "c", ["c"], "cart"),
        ]

    def start_episode(self, task):
        self.opened += 1
        cart: list[str] = []

        def add_to_cart(item: str) -> dict:
            """Add an item to the cart.

            Args:
                item: The item's name.
            """
            if item == "boom":
                raise RuntimeError("the cart service crashed")
            while item == "hang":
                pass
            cart.append(item)
            return {"cart": list(cart)}

        def closing():
            self.closed += 1

        return EpisodeState([Tool(add_to_cart, timeout_s=0.5)], state=cart, close=closing)

    def verify(self, task, final_answer, evidence: Evidence):
        return Verdict(evidence.state == task.truth, f"cart {evidence.state} (expected {task.truth})")


class TicketEnv(Environment):
    """Open a ticket and tell the user its id: the tool answers with a new id every time."""

    name = "tickets"
    instructions = "Open a ticket and give its id."
    deterministic_tools = False
    thought_required = False

    def __init__(self):
        self.toolbox = ToolBox([Tool(open_ticket)])

    def tasks(self, split):
        return [Task("t", "My printer is broken.", "", None, "ticket")]

    def verify(self, task, final_answer, evidence):
        ids = [r["id"] for name, r in evidence.responses if name == "open_ticket" and "id" in r]
        return Verdict(bool(ids) and ids[-1] in final_answer, f"ticket ids {ids}")


def open_ticket(summary: str) -> dict:
    """Open a support ticket.

    Args:
        summary: What the problem is.
    """
    return {"id": uuid.uuid4().hex[:8]}


def call(name, **arguments):
    return render_tool_call(name, arguments)


@pytest.fixture(scope="module")
def tiny():
    cfg = load_config(None, {"model": "tiny", "rollout.max_new_tokens": 300})
    model, tok, _ = build_policy(cfg)
    return cfg, model, tok


def forced(tok, turns_by_task):
    """Teacher forcing by turn: episode e writes turns_by_task[task id][e.turns] (a turn that ends with a tool
    call gets the environment's response spliced in by the rollout), then end of turn."""
    encoded = {k: [tok(t, add_special_tokens=False).input_ids for t in v] for k, v in turns_by_task.items()}

    def choose(episodes, logits):
        picked = []
        for e in episodes:
            turn = encoded[e.task.id][min(e.turns, len(encoded[e.task.id]) - 1)]
            pos = len(e.completion_ids) - e.turn_start
            picked.append(turn[pos] if pos < len(turn) else tok.eos_token_id)
        ids = torch.tensor(picked)
        return ids, torch.log_softmax(logits, -1).gather(-1, ids[:, None]).squeeze(-1)

    return choose


def run(tiny, env, tasks, group, turns):
    cfg, model, tok = tiny
    settings = rollout.sampling_settings(cfg, greedy=True, max_turns=4)
    return rollout.run_episodes(model, tok, env, tasks, group, settings, choose=forced(tok, turns))


def test_a_cart_keeps_its_state_within_an_episode_and_never_across_episodes(tiny):
    env = CartEnv()
    ab, c = env.task("ab"), env.task("c")
    turns = {
        "ab": [call("add_to_cart", item="a"), call("add_to_cart", item="b"), "Done."],
        "c": [call("add_to_cart", item="c"), "Done."],
    }
    episodes = run(tiny, env, [ab, c], 2, turns)  # four episodes in one batch, two per task
    responses = [[r.response for r in e.results] for e in episodes]
    assert responses[0] == responses[1] == [{"cart": ["a"]}, {"cart": ["a", "b"]}]  # before: ['a'] then ['b']
    assert responses[2] == responses[3] == [{"cart": ["c"]}]
    assert len({id(e.episode_state.state) for e in episodes}) == 4  # each episode its own cart
    score_episodes(env, episodes, WEIGHTS, 64)
    assert [e.score.components["completion"] for e in episodes] == [1.0] * 4
    assert [e.score.components["schema"] for e in episodes] == [1.0] * 4
    gc.collect()  # the episodes lent out for the prompts' tool schemas too
    assert env.closed == env.opened >= 4  # every episode released once scored

    again = run(tiny, env, [c], 1, turns)  # a later step starts from an empty cart
    assert [r.response for r in again[0].results] == [{"cart": ["c"]}]


def test_a_fresh_id_per_call_is_what_happened_not_a_fabrication(tiny):
    """Before: scoring ran open_ticket again, got another id and said `fabricated tool output` (C: +0.0)."""
    env = TicketEnv()
    task = env.task("t")
    cfg, model, tok = tiny
    settings = rollout.sampling_settings(cfg, greedy=True, max_turns=4)
    first = tok(call("open_ticket", summary="printer"), add_special_tokens=False).input_ids

    def choose(episodes, logits):
        picked = []
        for e in episodes:
            if e.turns == 0:
                turn = first
            else:  # the answer names the id the environment just inserted
                turn = tok(f"Your ticket is {e.results[0].response['id']}.", add_special_tokens=False).input_ids
            pos = len(e.completion_ids) - e.turn_start
            picked.append(turn[pos] if pos < len(turn) else tok.eos_token_id)
        ids = torch.tensor(picked)
        return ids, torch.log_softmax(logits, -1).gather(-1, ids[:, None]).squeeze(-1)

    episodes = rollout.run_episodes(model, tok, env, [task], 3, settings, choose=choose)
    assert len({e.results[0].response["id"] for e in episodes}) == 3  # three episodes, three fresh ids
    score_episodes(env, episodes, WEIGHTS, 64)
    assert [e.score.components["completion"] for e in episodes] == [1.0] * 3
    assert all(not e.score.reasons["completion"].startswith("fabricated") for e in episodes)
    # plain text (`reward score`) has no record: its call runs again and gets another id, the only evidence there is
    replayed = score_transcript(env, task, episodes[0].text, WEIGHTS, count_tokens=len)
    assert replayed.components["completion"] == 0.0 and "differs from the real one" in replayed.reasons["completion"]


def test_a_response_the_model_wrote_itself_is_still_a_fabrication(tiny):
    env = CartEnv()
    forged = render_tool_response({"cart": ["a", "b"]})
    turns = {"ab": [call("add_to_cart", item="a"), forged + "Done."]}
    [e] = run(tiny, env, [env.task("ab")], 1, turns)
    assert len(e.results) == 1  # the environment inserted one response; the second is the model's
    score_episodes(env, [e], WEIGHTS, 64)
    assert e.score.components["completion"] == 0.0
    assert "answers no call" in e.score.reasons["completion"]

    text = call("add_to_cart", item="a") + render_tool_response({"cart": ["a", "z"]}) + "Done."
    replayed = score_transcript(env, env.task("ab"), text, WEIGHTS, count_tokens=len)  # plain text: a fresh cart
    assert replayed.components["completion"] == 0.0 and "differs from the real one" in replayed.reasons["completion"]
    honest = call("add_to_cart", item="a") + render_tool_response({"cart": ["a"]})
    honest += call("add_to_cart", item="b") + render_tool_response({"cart": ["a", "b"]}) + "Done."
    assert score_transcript(env, env.task("ab"), honest, WEIGHTS, count_tokens=len).components["completion"] == 1.0


def test_a_crash_or_hang_in_one_episode_leaves_the_others_intact(tiny):
    env = CartEnv()
    ab, c = env.task("ab"), env.task("c")
    turns = {
        "ab": [call("add_to_cart", item="a"), call("add_to_cart", item="boom"), call("add_to_cart", item="b"), "D"],
        "c": [call("add_to_cart", item="hang"), call("add_to_cart", item="c"), "Done."],
    }
    start = time.monotonic()
    episodes = run(tiny, env, [ab, c], 1, turns)
    assert time.monotonic() - start < 30  # the hang was stopped at its 0.5 s timeout
    crashed, hung = ([r.response for r in e.results] for e in episodes)
    assert crashed == [{"cart": ["a"]}, {"error": "RuntimeError: the cart service crashed"}, {"cart": ["a", "b"]}]
    assert "timed out" in hung[0]["error"] and hung[1] == {"cart": ["c"]}
    score_episodes(env, episodes, WEIGHTS, 64)
    assert [e.score.components["completion"] for e in episodes] == [1.0, 1.0]  # each cart as its episode left it


def test_reference_transcripts_run_in_one_episode():
    env = CartEnv()
    task = env.task("ab")
    task.reference_calls = [("add_to_cart", {"item": "a"}), ("add_to_cart", {"item": "b"})]
    text = env.reference_transcript(task)
    assert render_tool_response({"cart": ["a", "b"]}) in text  # the second call saw the first one's item
    assert env.closed == env.opened == 1
    tools = env.toolbox_for(task)  # the schemas, read from an episode closed at once (once per task)
    assert env.closed == env.opened == 2 and env.toolbox_for(task).schemas == tools.schemas and env.opened == 2
    assert tools.execute("add_to_cart", {"item": "z"}) == {"cart": ["z"]}  # the first call starts an episode
    assert tools.execute("add_to_cart", {"item": "y"}) == {"cart": ["z", "y"]} and env.opened == 3 and env.closed == 2
    del tools  # released when dropped
    gc.collect()
    assert env.closed == env.opened == 3


def test_built_in_environments_still_replay(finance, arithmetic):
    assert not finance.scores_recorded_traffic and not arithmetic.scores_recorded_traffic
    assert CartEnv().scores_recorded_traffic and TicketEnv().scores_recorded_traffic


def test_the_commands_take_a_stateful_env(cli):
    env = "tests.test_stateful:CartEnv"
    code, out, err = cli("tools", "run", "add_to_cart", '{"item": "a"}', "--env", env, "--json")
    assert code == 0 and json.loads(out) == {"cart": ["a"]} and "fresh episode" in err, err
    code, out, err = cli("eval", "--env", env, "--model", "tiny", "--split", "train", "--json")
    assert code == 0, err
    rows = json.loads(out)["tasks"]
    assert sorted(r["task_id"] for r in rows) == ["ab", "c"] and all(r["solved"] is False for r in rows)
    code, out, err = cli("tasks", "--env", env, "--json")
    assert code == 0 and '{\\"cart\\": [\\"a\\"]}' in json.loads(out)[0]["reference_transcript"].replace('"', '\\"')


class NoEpisodes(CartEnv):
    start_episode = Environment.start_episode  # stateful, but says nowhere how an episode starts


def test_a_stateful_env_without_start_episode_is_refused(cli):
    code, _, err = cli("tasks", "--env", "tests.test_stateful:NoEpisodes")
    assert code == 2 and "does not define start_episode" in err and "docs/stateful.md" in err


def test_probes_on_a_stateful_env_are_built_in_one_episode():
    from grpolab.preflight.probes import run_probes

    env = CartEnv()
    task = env.task("ab")
    task.reference_calls = [("add_to_cart", {"item": "a"}), ("add_to_cart", {"item": "b"})]
    task.reference_answer = "Done."
    results = {r.probe: r for r in run_probes(env, [task], WEIGHTS, 64, len)}
    assert results["call_loop"].honest.components["completion"] == 1.0
    loop = results["call_loop"].score
    assert "fabricated" not in loop.reasons["completion"] and loop.components["completion"] == 0.0  # cart a x7, b
    assert "fabricated" in results["fabricated_response"].score.reasons["completion"]
