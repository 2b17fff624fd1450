"""τ²-bench retail: the official tools on a fresh database per episode, its database check as completion, and a
verdict equal to the benchmark's own evaluator on recorded trajectories, right and wrong."""

import random

import pytest

from grpolab.envs import get_env
from grpolab.envs.base import Evidence
from grpolab.envs.tau2.official import official_reward
from grpolab.envs.tau2.tools import response_dict
from grpolab.protocol import render_tool_call, render_tool_response
from grpolab.rewards.score import score_transcript


@pytest.fixture(scope="module")
def retail():
    return get_env("tau2_retail")


def our_verdict(env, task, calls, answer):
    episode = env.start_episode(task)
    for name, arguments in calls:
        episode.toolbox.execute(name, arguments)
    return env.verify(task, answer, Evidence(task.prompt, calls, [], episode.state)).passed


def test_the_split_and_the_tasks(retail):
    assert len(retail.tasks("train")) == 74 and len(retail.tasks("heldout")) == 40
    assert not {t.id for t in retail.tasks("train")} & {t.id for t in retail.tasks("heldout")}
    task = retail.tasks("heldout")[0]
    assert "no further conversation" in task.prompt and task.reference_calls
    assert "find_user_id_by_name_zip" in retail.system_prompt(task) and "Retail agent policy" in retail.instructions
    assert '"title"' not in retail.system_prompt(task)  # pydantic's titles repeat the names: left out


def test_each_episode_has_its_own_database(retail):
    task = next(t for t in retail.tasks("heldout") if any(n.startswith("cancel") for n, _ in t.reference_calls))
    name, arguments = next((n, a) for n, a in task.reference_calls if n.startswith("cancel"))
    one, two = retail.start_episode(task), retail.start_episode(task)
    assert one.toolbox.execute(name, arguments)["status"] == "cancelled"
    order = {"order_id": arguments["order_id"]}
    assert one.toolbox.execute("get_order_details", order)["status"] == "cancelled"
    assert two.toolbox.execute("get_order_details", order)["status"] != "cancelled"  # the other episode's db
    assert retail.start_episode(task).toolbox.execute("get_order_details", order)["status"] != "cancelled"


def test_a_fresh_database_is_the_benchmarks_own_and_shares_nothing(retail):
    """Episodes validate their database from one dump: it must equal what tau2 loads from db.json, and no dict or
    list of one episode's database may be another's (a write in place would leak between episodes)."""
    from pydantic import BaseModel
    from tau2.domains.retail.environment import get_environment

    def containers(value, seen):
        if isinstance(value, BaseModel | dict | list):
            seen.add(id(value))
            inner = value.__dict__.values() if isinstance(value, BaseModel) else value
            for item in inner.values() if isinstance(inner, dict) else inner:
                containers(item, seen)
        return seen

    one, two = retail.fresh_environment(), retail.fresh_environment()
    assert one.get_db_hash() == get_environment().get_db_hash()
    assert not containers(one.tools.db, set()) & containers(two.tools.db, set())


def test_the_tools_answer_bad_calls_with_errors(retail):
    tools = retail.start_episode(retail.tasks("train")[0]).toolbox
    assert "error" in tools.execute("get_order_details", {"order_id": "#W0000000"})
    assert "invalid arguments" in tools.execute("get_order_details", {"order": 1})["error"]
    assert tools.execute("calculate", {"expression": "(2 + 3) * 4.5"}) == {"result": "22.5"}
    assert "error" in tools.execute("calculate", {"expression": "__import__('os')"})
    assert "error" in tools.execute("calculate", {"expression": "9 ** 9 ** 9 ** 9"})  # no eval: refused, bounded
    assert response_dict('"plain text"', False) == {"result": "plain text"}
    assert response_dict("Error: boom", True) == {"error": "Error: boom"}


def test_reference_solutions_pass_and_wrong_ones_fail(retail):
    for task in retail.tasks("heldout")[:6]:
        score = score_transcript(retail, task, retail.reference_transcript(task), count_tokens=len)
        assert score.components["completion"] == 1.0 and score.components["actions"] == 1.0, score.reasons
    task = next(t for t in retail.tasks("heldout") if len(t.reference_calls) >= 3)
    name, arguments = task.reference_calls[0]  # the first look-up only: no action that writes
    response = retail.start_episode(task).toolbox.execute(name, arguments)
    text = render_tool_call(name, arguments) + render_tool_response(response) + task.reference_answer
    score = score_transcript(retail, task, text, count_tokens=len)
    assert score.components["completion"] == 0.0 and "database differs" in score.reasons["completion"]
    assert 0 < score.components["actions"] < 1 and score.breakdown.endswith(" | A:+0.2")  # 1 of 5 actions


def test_our_verdict_equals_the_benchmarks_on_recorded_trajectories(retail):
    """Parity on 24 trajectories: ten tasks' references (right), and wrong ones: a reference without the information
    the customer must be told, without its last write, another task's actions, or a new item swapped for another
    available variant of its product (every call succeeds, the database ends wrong)."""
    rng = random.Random(0)
    tasks = retail.tasks("heldout")
    products = list(retail.fresh_environment().tools.db.products.values())
    told = [t for t in tasks if t.meta["communicate_info"]][:3]
    swapped = [(t, c) for t in tasks for c in [with_another_variant(products, t.reference_calls)] if c][:4]
    right = [(t, list(t.reference_calls), t.reference_answer) for t in tasks[:10]]
    wrong = [(t, list(t.reference_calls), "Done.") for t in told]
    served = [t for t in tasks if "transfer_to_human_agents" not in dict(t.reference_calls)][:4]  # (1)
    wrong += [(t, without_last_write(t.reference_calls), t.reference_answer) for t in served]
    wrong += [(t, list(rng.choice(tasks[10:]).reference_calls), t.reference_answer) for t in tasks[7:10]]
    wrong += [(t, calls, t.reference_answer) for t, calls in swapped]
    assert len(told) == 3 and len(served) == 4 and len(swapped) == 4

    def verdicts(cases):
        return [
            (our_verdict(retail, t, c, a), official_reward(retail.fresh_environment, t.truth, c, a) == 1.0)
            for t, c, a in cases
        ]

    # (1) a task that ends with a hand-off may have a reference write that fails (task 12 refunds to a method the
    # policy refuses): without it the database is the same, and both verdicts pass
    assert verdicts(right) == [(True, True)] * len(right)
    assert verdicts(wrong) == [(False, False)] * len(wrong)


def with_another_variant(products, calls):
    """`calls` with the first new item of its first exchange or modification replaced by another available
    variant of the same product (of tau2's `products`), or None when no call has one."""
    for i, (name, arguments) in enumerate(calls):
        for position, item in enumerate(arguments.get("new_item_ids") or []):
            product = next(p for p in products if item in p.variants)
            other = next((v for v in product.variants if v != item and product.variants[v].available), None)
            if other:
                new_items = list(arguments["new_item_ids"])
                new_items[position] = other
                return calls[:i] + [(name, {**arguments, "new_item_ids": new_items})] + calls[i + 1 :]
    return None


def without_last_write(calls):
    """`calls` without the last one that changes the database (look-ups and the hand-off to a human change none)."""
    reads = ("get_", "find_", "list_", "calculate", "transfer_")
    last = max(i for i, (name, _) in enumerate(calls) if not name.startswith(reads))
    return calls[:last] + calls[last + 1 :]


def test_calls_with_missing_arguments_earn_no_action_credit(retail):
    """tau2's matcher compares only the keys a call has: `cancel_pending_order({})` would match every cancellation."""
    task = next(t for t in retail.tasks("heldout") if any(n == "cancel_pending_order" for n, _ in t.reference_calls))
    tools = retail.start_episode(task).toolbox
    text = "".join(
        render_tool_call(name, {}) + render_tool_response(tools.execute(name, {}))
        for name in sorted({n for n, _ in task.reference_calls})
    )
    score = score_transcript(retail, task, text + task.reference_answer, count_tokens=len)
    assert score.components["actions"] == 0.0 and score.components["completion"] == 0.0, score.reasons
