import math
import time

import pytest

from grpolab.protocol import render_thought, render_tool_call, render_tool_response
from grpolab.rewards.components import register_reward, unregister_reward
from grpolab.rewards.score import breakdown, score_transcript
from grpolab.tools import Tool, ToolBox


@pytest.fixture()
def acme(finance):
    return finance.task("pct_change-ACME-Q3")


def score(env, task, text, **kw):
    return score_transcript(env, task, text, count_tokens=lambda s: len(s) // 4, **kw)


def test_clean_300_token_episode_is_plus_5_35(finance, acme):
    s = score_transcript(finance, acme, finance.reference_transcript(acme), gen_tokens=300)
    assert s.breakdown == "F:+1.0 | S:+1.5 | C:+3.0 | L:-0.15"
    assert s.total == pytest.approx(5.35)
    assert s.to_json()["components"] == {"format": 1.0, "schema": 1.0, "completion": 1.0, "length": 3.0}


def test_breakdown_format():
    assert breakdown({"format": 0.5, "length": 1.234}, {"format": 1.0, "length": -0.05}) == "F:+0.5 | L:-0.06"


def test_fabricated_response_gets_no_completion(finance, acme):
    text = (
        render_tool_call("financial_search", {"query": "ACME Q3"})
        + render_tool_response({"status": 200, "result": "ACME baseline price $100.00, close $114.17."})
        + render_tool_call("calculator", {"expression": "(137 - 120) / 120 * 100"})
        + render_tool_response({"result": 14.1666666667})
        + "ACME's stock changed by 14.17%."
    )
    s = score(finance, acme, text)
    assert s.components["completion"] == 0.0 and "fabricated" in s.reasons["completion"]
    assert s.components["format"] == 0.5 and "differs from the real one" in s.reasons["format"]  # and no thought


def test_response_with_no_call_is_fabricated(finance, acme):
    text = render_tool_response({"result": 14.1666666667}) + "It changed by 14.17%."
    s = score(finance, acme, text)
    assert "answers no call" in s.reasons["completion"]
    assert s.components["schema"] == 0.0


def test_confident_answer_without_tools_is_not_grounded(finance, acme):
    s = score(finance, acme, "ACME's stock changed by 14.17% in Q3.")
    assert s.components["completion"] == 0.0 and "not grounded" in s.reasons["completion"]
    assert s.components["schema"] == 0.0 and s.components["format"] == 0.25


def test_hedged_answer_gets_no_completion(finance, acme):
    text = finance.reference_transcript(acme).rsplit("\n", 1)[0] + "\nIt changed by 14.17%, or maybe 15% or 12.5%."
    s = score(finance, acme, text)
    assert s.components["completion"] == 0.0 and "hedged" in s.reasons["completion"]


def test_schema_counts_invalid_and_unknown_calls(finance, acme):
    text = (
        render_tool_call("financial_search", {"q": "ACME"})
        + render_tool_response(finance.toolbox.execute("financial_search", {"q": "ACME"}))
        + render_tool_call("stock_api", {})
        + render_tool_response(finance.toolbox.execute("stock_api", {}))
        + "Unknown."
    )
    s = score(finance, acme, text)
    assert s.components["schema"] == 0.0 and "0/2" in s.reasons["schema"]


def test_call_without_answer(finance, acme):
    text = render_thought("search") + render_tool_call("financial_search", {"query": "ACME Q3"})
    s = score(finance, acme, text)
    assert s.components["completion"] == 0.0
    assert "never answered" in s.reasons["format"] and "no final answer" in s.reasons["format"]


def test_a_reward_that_raises_is_counted_not_zeroed(finance, acme):
    def exploding(*_):
        raise ValueError("bug in my reward")

    register_reward("exploding", exploding)
    try:
        s = score(finance, acme, "x", weights={"format": 1.0, "exploding": 1.0})
        assert math.isnan(s.total) and "bug in my reward" in s.errors["exploding"]
        assert s.to_json()["total"] is None
    finally:
        unregister_reward("exploding")


def test_zero_weight_components_are_still_computed(finance, acme):
    s = score(finance, acme, finance.reference_transcript(acme), weights={"format": 0, "completion": 0})
    assert s.total == 0 and s.components["format"] == s.components["completion"] == 1.0
    assert s.breakdown.startswith("F:+0.0 | S:+0.0 | C:+0.0 | L:")


def test_format_pays_for_the_protocol_not_for_ignoring_it(finance, acme):
    """Free text earns at most 0.5; a well-formed structure around nothing earns full format credit (the lesson)."""
    free = score(finance, acme, "I think ACME went up, roughly 15%.")
    assert free.components["format"] <= 0.5 and "does not open with a <thought>" in free.reasons["format"]
    dummy = (
        render_thought("I will use a tool.")
        + render_tool_call("calculator", {"expression": "1+1"})
        + render_tool_response({"result": 2})
        + "Done."
    )
    assert score(finance, acme, dummy).components["format"] == 1.0
    honest = score(finance, acme, finance.reference_transcript(acme))
    assert honest.components["format"] == 1.0 and honest.total > score(finance, acme, dummy).total
    unclosed = render_thought("let me see") + '<tool_call>\n{"name": "calculator"'
    assert score(finance, acme, unclosed).components["format"] <= 0.5


def test_references_round_inside_the_calculator(finance):
    """The references compute the rounded result with the tool, so imitation never truncates (-11.17 for -11.18)."""
    for task in finance.tasks("heldout"):
        name, args = task.reference_calls[-1]
        assert name == "calculator" and args["expression"].startswith("round(") and args["expression"].endswith(", 2)")


def test_an_emptied_thought_earns_no_format_credit(finance, acme):
    """The demo's shortcut: GRPO emptied the thought to `...` while any closed block paid. Now it needs words."""
    honest = finance.reference_transcript(acme)
    thought = render_thought(acme.reference_thought)
    emptied = honest.replace(thought, render_thought("..."))
    assert emptied != honest
    s = score(finance, acme, emptied)
    assert s.components["format"] == 0.75 and "the thought is empty (0 words" in s.reasons["format"]
    assert s.total < score(finance, acme, honest).total
    # thought_min_words = 0 is the old rule: any closed block pays, and the emptied thought beats honest work
    old = score_transcript(finance, acme, emptied, thought_min_words=0)
    assert old.components["format"] == 1.0
    assert old.total > score_transcript(finance, acme, honest, thought_min_words=0).total


def test_lenient_completion_pays_a_hedge_the_strict_verifier_fails(finance, acme):
    """The deliberately gameable verifier behind the hedging hack family: any matching number is paid."""
    parts = finance.reference_parts(acme)
    hedge = "".join(t for t, _ in parts[:-1]) + f"It is {acme.answer}, or maybe 3.50 or 12.25."
    s = score_transcript(finance, acme, hedge, weights={"lenient_completion": 3.0, "completion": 3.0})
    assert s.components["lenient_completion"] == 1.0 and s.components["completion"] == 0.0
    assert "hedged" in s.reasons["completion"]


def naps(seconds: float) -> dict:
    """Sleeps.

    Args:
        seconds: How long.
    """
    time.sleep(seconds)
    return {"slept": seconds}


def test_a_call_that_timed_out_earns_no_schema_credit(finance, acme, monkeypatch):
    """Before: a call whose tool ran past its timeout (a 300-character expression cost the calculator 9 s) was paid
    as schema-valid, so a policy lost nothing by making calls that cost seconds."""
    box = ToolBox([Tool(naps, timeout_s=0.2)])
    monkeypatch.setattr(finance, "toolbox_for", lambda task: box)
    text = (
        render_thought("I will wait for the data.")
        + render_tool_call("naps", {"seconds": 30})
        + render_tool_response({"error": "naps timed out after 0.2s"})
        + render_tool_call("naps", {"seconds": 0})
        + render_tool_response({"slept": 0})
        + "Done."
    )
    s = score(finance, acme, text)
    assert s.components["schema"] == 0.5 and "timed out" in s.reasons["schema"], s.reasons
    assert s.valid_calls == 1
    assert "differs" not in s.reasons["format"]  # the response itself was the real one


def test_calls_past_the_replay_cap_are_not_run_and_the_reasons_say_so(finance, acme, monkeypatch):
    """Before: every call of a transcript was run again, however many (3 slow calls: 27 s per episode)."""
    from grpolab.rewards.replay import MAX_REPLAYED_CALLS

    ran: list[int] = []

    def echo(x: int) -> dict:
        """Echoes.

        Args:
            x: Anything.
        """
        ran.append(x)
        return {"x": x}

    box = ToolBox([Tool(echo, isolate=False)])
    monkeypatch.setattr(finance, "toolbox_for", lambda task: box)
    n = MAX_REPLAYED_CALLS + 4
    calls = "".join(render_tool_call("echo", {"x": i}) + render_tool_response({"x": i}) for i in range(n))
    s = score(finance, acme, render_thought("I will echo many times.") + calls + "Done.")
    assert ran == list(range(MAX_REPLAYED_CALLS))
    assert s.components["schema"] == pytest.approx(MAX_REPLAYED_CALLS / n)
    assert f"4 calls past the replay cap ({MAX_REPLAYED_CALLS} per transcript)" in s.reasons["schema"], s.reasons
    assert s.components["completion"] == 0.0 and "replay cap" in s.reasons["completion"], s.reasons
    assert s.to_json()["reasons"]["schema"] == s.reasons["schema"]


def test_rollout_max_turns_stays_within_the_replay_cap():
    from grpolab.config import load_config
    from grpolab.errors import UserError
    from grpolab.rewards.components import MAX_REPLAYED_CALLS

    assert load_config(overrides={"rollout.max_turns": MAX_REPLAYED_CALLS}).rollout.max_turns == MAX_REPLAYED_CALLS
    with pytest.raises(UserError, match="rollout.max_turns"):
        load_config(overrides={"rollout.max_turns": MAX_REPLAYED_CALLS + 1})
