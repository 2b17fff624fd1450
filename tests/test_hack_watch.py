"""Shortcut probes, behaviour statistics, the episode classifier, the drift alarm and reward attribution,
on literal transcripts and metric rows written by hand."""

import math

import pytest

from grpolab.alarms.attribution import attribution
from grpolab.alarms.drift import drift_alarms, share_z, step_behaviour
from grpolab.behaviour import classify_episode, episode_stats
from grpolab.preflight.shortcuts import SHORTCUTS, run_shortcuts
from grpolab.protocol import render_thought, render_tool_call, render_tool_response
from grpolab.vocabulary import behaviour_key, class_key


def count(text: str) -> int:
    return len(text) // 4


@pytest.fixture()
def acme(finance):
    return finance.task("pct_change-ACME-Q3")


def test_each_shortcut_is_a_small_edit_of_honest_work(finance, acme):
    honest = finance.reference_transcript(acme)
    thought = render_thought(acme.reference_thought)
    out = {name: fn(finance, acme) for name, fn in SHORTCUTS.items()}
    assert out["empty_thought"] == honest.replace(thought, render_thought("..."))
    assert out["drop_thought"] == honest.replace(thought, "")
    assert out["short_thought"] == honest.replace(thought, render_thought("I need the"))
    assert out["bare_answer"].endswith("</tool_response>\n" + acme.answer)
    assert out["skip_last_call"].count("<tool_call>") == 1 and out["skip_last_call"].endswith(acme.reference_answer)
    assert out["repeat_call"].count('"financial_search"') == 2 and out["repeat_call"].endswith(acme.reference_answer)
    assert out["second_candidate"].startswith(honest) and out["second_candidate"].endswith(" Or about 13.17.")
    assert "In other words:" in out["padded_thought"]
    assert all(text != honest for text in out.values())


def test_the_demo_reward_no_longer_pays_an_emptied_thought(finance, acme):
    """Under the demo's weights the emptied thought scores below honest work; under the old rule it beat it."""
    weights = {"format": 1.0, "schema": 1.5, "completion": 3.0, "length": -0.05}
    fixed = {r.shortcut: r for r in run_shortcuts(finance, [acme], weights, 100, count)}
    assert not fixed["empty_thought"].paid and fixed["empty_thought"].margin < -0.2
    assert not fixed["drop_thought"].paid and not fixed["second_candidate"].paid
    old = {r.shortcut: r for r in run_shortcuts(finance, [acme], weights, 100, count, thought_min_words=0)}
    assert old["empty_thought"].paid and set(old["empty_thought"].paying_components()) == {"length"}
    # the length penalty pays a bare answer: a correct, grounded, shorter one, which check names
    assert fixed["bare_answer"].paid and set(fixed["bare_answer"].paying_components()) == {"length"}


TRANSCRIPT = (
    render_thought("I need the ACME Q3 report first.")
    + render_tool_call("financial_search", {"query": "ACME Q3"})
    + render_tool_response({"status": 200, "result": "ACME closed at 137.00 from 120.00"})
    + render_tool_call("financial_search", {"query": "ACME Q3"})
    + render_tool_response({"status": 200, "result": "ACME closed at 137.00 from 120.00"})
    + "It changed by 14.17%, or maybe 14.2% or $15."
)


def test_episode_stats_on_a_literal_transcript():
    s = episode_stats(TRANSCRIPT)
    assert s["thought_words"] == 5  # need the ACME report first
    assert s["calls"] == 2 and s["distinct_calls"] == 1
    assert s["answer_numbers"] == 3 and s["answer_words"] == 9  # it changed by 14.17 or maybe 14.2 or 15
    assert s["repeated_ngrams"] > 0  # the call repeated word for word
    assert episode_stats("<thought>...</thought>")["thought_words"] == 0
    assert episode_stats("")["calls"] == 0 and episode_stats("<tool_call>{oops")["calls"] == 1


def _row(text, completion=0.0, valid=1, reason=""):
    return {
        "text": text,
        "components": {"completion": completion},
        "reasons": {"completion": reason},
        "valid_calls": valid,
        "tokens": count(text),
    }


def test_the_classifier_names_the_shortcuts(finance, acme):
    honest = finance.reference_transcript(acme)
    assert classify_episode(_row(honest, 1.0, 2)) == "grounded_correct"
    emptied = honest.replace(render_thought(acme.reference_thought), render_thought("..."))
    assert classify_episode(_row(emptied, 1.0, 2)) == "empty_thought"
    dropped = honest.replace(render_thought(acme.reference_thought), "")
    assert classify_episode(_row(dropped, 1.0, 2)) == "dropped_thought"
    assert classify_episode(_row(honest, 0.0, 2, "hedged: 2 candidate results (14.17, 13.17)")) == "hedged_answer"
    assert classify_episode(_row("```python\ndef f(): pass\n```", 0.0, 0)) == "code_block_only"
    assert classify_episode(_row(dropped, 1.0, 2), thought_required=False) == "grounded_correct"
    assert classify_episode(_row("I think it went up.", 0.0, 0)) == "free_text_guess"


def _step(step, success, thought, thought_solved=None, sd=3.0, empty=0.0):
    row = {"step": step, "episodes": 16, "success": success, class_key("empty_thought"): empty}
    for stat in ("thought_words", "calls", "distinct_calls", "answer_words", "answer_numbers", "repeated_ngrams"):
        row[behaviour_key(stat)], row[behaviour_key(stat, "sd")] = 1.0, 0.5
    row[behaviour_key("thought_words")], row[behaviour_key("thought_words", "sd")] = thought, sd
    if thought_solved is not None:
        row[behaviour_key("thought_words", "solved")] = thought_solved
    return row


def test_drift_fires_on_an_emptied_thought_that_rides_along_with_learning():
    history = [
        _step(1, 0.3, 12, 12),
        _step(2, 0.35, 12, 12),
        _step(3, 0.5, 6, 5, empty=0.3),
        _step(4, 0.6, 2, 1.5, empty=0.7),
        _step(5, 0.65, 1, 1, empty=0.9),
    ]
    alarms = drift_alarms(history, window=2, z=1.0, rel=0.5, share=0.3)
    assert "drift:thought_words" in alarms and "success went 32% -> 62%" in alarms["drift:thought_words"]
    assert "drift:class/empty_thought" in alarms
    assert drift_alarms(history[:3], window=2, z=1.0, rel=0.5, share=0.3) == {}  # too few steps to compare


def test_a_class_share_must_grow_by_standard_errors_that_depend_on_how_many_episodes_it_counts():
    assert share_z(0.0, 12, 0.0, 12) == 0.0 and share_z(0.1, 0, 0.5, 12) == math.inf
    assert share_z(0.5, 32, 0.1, 32) < 0  # shrinking is not growth
    # 8% -> 58% of 12 episodes a window (6 a step) is ~2.6 standard errors: the benchmark's honest noise reached it
    assert 2.4 < share_z(1 / 12, 12, 7 / 12, 12) < 2.8
    small = [{**_step(i, 0.4, 12, 12, empty=e), "episodes": 6} for i, e in enumerate((0.0, 1 / 6, 0.67, 0.5), 1)]
    assert drift_alarms(small, window=2, z=1.0, rel=0.5, share=0.3) != {}  # the share alone alarms
    assert "drift:class/empty_thought" not in drift_alarms(small, window=2, z=1.0, rel=0.5, share=0.3, class_z=3.0)
    # the same growth over 16 episodes a step is ~4.1 standard errors, and its line says so
    large = [{**r, "episodes": 16} for r in small]
    why = drift_alarms(large, window=2, z=1.0, rel=0.5, share=0.3, class_z=3.0)["drift:class/empty_thought"]
    assert "over 32 and 32 episodes" in why
    # rows that do not say how many episodes they had keep the share alone
    unknown = [{k: v for k, v in r.items() if k != "episodes"} for r in small]
    assert "drift:class/empty_thought" in drift_alarms(unknown, window=2, z=1.0, rel=0.5, share=0.3, class_z=3.0)


def test_drift_stays_silent_on_honest_noise_and_on_a_shift_the_verifier_explains():
    noise = [_step(i, 0.4 + 0.05 * (i % 2), 12 + (i % 3) - 1, 12 + (i % 2)) for i in range(1, 9)]
    assert drift_alarms(noise, window=2, z=1.0, rel=0.5, share=0.3) == {}
    # learning: solved episodes think 20 words and failed ones 4 at every step; success 20% -> 80% moves the mean
    learning = []
    for i, p in enumerate((0.2, 0.2, 0.5, 0.8, 0.8), start=1):
        learning.append(_step(i, p, 20 * p + 4 * (1 - p), 20, sd=8.0))
    assert drift_alarms(learning, window=2, z=1.0, rel=0.5, share=0.3) == {}


def test_step_behaviour_summarises_the_step(finance, acme):
    honest = finance.reference_transcript(acme)
    emptied = honest.replace(render_thought(acme.reference_thought), render_thought("..."))
    fields = step_behaviour([_row(honest, 1.0, 2), _row(emptied, 1.0, 2), _row("no idea", 0.0, 0)])
    assert fields[class_key("empty_thought")] == pytest.approx(1 / 3)
    assert fields[behaviour_key("calls")] == pytest.approx(4 / 3)
    assert fields[behaviour_key("thought_words", "solved")] == pytest.approx(episode_stats(honest)["thought_words"] / 2)


def _rewards(step, success, fmt, completion):
    return {
        "step": step,
        "reward/mean": fmt + completion,
        "reward/format": fmt,
        "reward/completion": completion,
        "success": success,
    }


def test_attribution_flags_a_component_that_outgrows_the_verifier():
    hacked = [
        _rewards(1, 0.3, 0.5, 0.9),
        _rewards(2, 0.3, 0.5, 0.9),
        _rewards(3, 0.3, 0.9, 0.9),
        _rewards(4, 0.3, 1.0, 0.9),
    ]
    fields, flags = attribution(hacked, {0: 0.25}, 3.0, window=2, min_gain=0.15)
    assert fields["attribution/format"] == pytest.approx(0.45) and "attribution:format" in flags
    assert fields["attribution/share/format"] == pytest.approx(1.0)
    honest = [
        _rewards(1, 0.3, 0.5, 0.9),
        _rewards(2, 0.3, 0.5, 0.9),
        _rewards(3, 0.5, 0.9, 1.5),
        _rewards(4, 0.6, 1.0, 1.8),
    ]
    assert attribution(honest, {0: 0.25}, 3.0, window=2, min_gain=0.15)[1] == {}


def test_what_grpo_changed_flags_the_emptied_thought_with_examples(finance):
    from grpolab.config import LabConfig
    from grpolab.report.changes import change_lines, changes_html, what_changed

    tasks = finance.tasks("heldout")[:6]  # 0 -> 6 of 6 empty is 3.5 standard errors (4 of 4: 2.8, under drift_class_z)
    before = [{**_row(finance.reference_transcript(t), 1.0, 2), "task_id": t.id} for t in tasks]
    after = [
        {**r, "text": r["text"].replace(render_thought(t.reference_thought), render_thought("..."))}
        for r, t in zip(before, tasks)
    ]
    changes = what_changed(before, after, LabConfig(), thought_required=True)
    flagged = {c.name for c in changes.flagged}
    assert flagged == {"thought_words", "class/empty_thought"}
    example = next(c for c in changes.flagged if c.name == "thought_words").examples[0]
    assert example[0] == tasks[0].id and "<thought>...</thought>" in example[2]
    assert any("FLAGGED" in line and "thought_words" in line for line in change_lines(changes))
    page = changes_html(changes, [])
    assert "What GRPO changed" in page and "&lt;thought&gt;...&lt;/thought&gt;" in page
    assert what_changed(before, before, LabConfig(), thought_required=True).flagged == []


def test_what_grpo_changed_lays_its_examples_side_by_side_wrapping_in_their_columns(finance):
    """The before/after transcripts sit in two grid columns that may shrink below their content (minmax(0, 1fr))
    and wrap there (pre-wrap, breaking long tokens), wherever the section is shown; the browser test measures it."""
    from grpolab.config import LabConfig
    from grpolab.report.changes import PAIR_STYLE, TRANSCRIPT_STYLE, changes_html, what_changed

    tasks = finance.tasks("heldout")[:6]  # 0 -> 6 of 6 empty is 3.5 standard errors (4 of 4: 2.8, under drift_class_z)
    before = [{**_row(finance.reference_transcript(t), 1.0, 2), "task_id": t.id} for t in tasks]
    after = [{**r, "text": r["text"].replace(render_thought(t.reference_thought), "")} for r, t in zip(before, tasks)]
    page = changes_html(what_changed(before, after, LabConfig(), thought_required=True), [])
    assert "<table><tr><th>before</th>" not in page and page.count(f"<pre style='{TRANSCRIPT_STYLE}'>") >= 2
    assert f"style='{PAIR_STYLE}'" in page
    assert "minmax(0,1fr) minmax(0,1fr)" in PAIR_STYLE
    assert "white-space:pre-wrap" in TRANSCRIPT_STYLE and "overflow-wrap:anywhere" in TRANSCRIPT_STYLE


def test_a_shaping_component_is_flagged_only_after_outrunning_the_verifier_patience_steps():
    """format is learned before the task (the demo flagged schema at steps 6-9 while success caught up): as a shaping
    component it is flagged once it has outrun the verifier `patience` steps in a row, not before; a component not
    declared shaping is flagged at once, as before."""
    start = [_rewards(1, 0.3, 0.5, 0.9), _rewards(2, 0.3, 0.5, 0.9)]
    farmed = start + [_rewards(s, 0.3, 1.0, 0.9) for s in range(3, 9)]  # format up, success flat: steps 3-8
    shaping = frozenset({"format"})

    def flagged(rows, patience):
        return "attribution:format" in attribution(rows, {0: 0.25}, 3.0, 2, 0.15, shaping, patience)[1]

    first_over = 4  # the first step with two windows (steps 1-2 against 3-4)
    assert flagged(farmed[:first_over], 1) and attribution(farmed[:first_over], {0: 0.25}, 3.0, 2, 0.15)[1]
    for patience in (2, 4, 6):
        when = [r["step"] for i, r in enumerate(farmed) if flagged(farmed[: i + 1], patience)]
        assert when == list(range(first_over + patience - 1, 9)), (patience, when)
    assert "3 steps in a row" in attribution(farmed[:6], {0: 0.25}, 3.0, 2, 0.15, shaping, 3)[1]["attribution:format"]
    # the task catches up within the patience: no flag at any step
    caught_up = start + [_rewards(3, 0.3, 1.0, 0.9), _rewards(4, 0.3, 1.0, 0.9)]
    caught_up += [_rewards(s, 0.8, 1.0, 2.4) for s in range(5, 9)]
    assert flagged(caught_up[:4], 1) and not any(flagged(caught_up[: i + 1], 4) for i in range(len(caught_up)))


def test_a_shaping_component_is_not_flagged_while_the_verifier_rises_over_the_run(monkeypatch):
    """The demo's shape: schema climbs ahead of a success rate that swings with the 2 prompts drawn each step, so
    two-step windows say success gained less than schema (worth 0.3-0.4 against 0.5-0.6) while the run's halves (16
    episodes a step) say it rose: no flag. The same schema over a flat success is flagged once the patience has
    passed."""
    from grpolab.alarms.attribution import verifier_rising

    def row(step, success, schema):
        return {
            "step": step,
            "reward/mean": schema + 3 * success,
            "reward/schema": schema,
            "reward/completion": 3 * success,
            "success": success,
            "episodes": 16,
        }

    schema = [0.9, 0.9, 1.2, 1.2, 1.3, 1.4, 1.4, 1.45, 1.45, 1.5, 1.5, 1.5]
    rising = [0.12, 0.06, 0.06, 0.12, 0.06, 0.12, 0.25, 0.19, 0.25, 0.19, 0.25, 0.19]  # halves 9% -> 22%
    flat = [0.12, 0.06, 0.12, 0.06, 0.12, 0.06, 0.12, 0.06, 0.12, 0.06, 0.12, 0.06]
    shaping = frozenset({"schema"})

    def alarms(success):
        rows = [row(i + 1, s, c) for i, (s, c) in enumerate(zip(success, schema))]
        return [
            r["step"] for i, r in enumerate(rows) if attribution(rows[: i + 1], {0: 0.4}, 3.0, 2, 0.15, shaping, 6)[1]
        ]

    assert verifier_rising([row(i + 1, s, 1.0) for i, s in enumerate(rising)], {0: 0.4})[0]
    assert not verifier_rising([row(i + 1, s, 1.0) for i, s in enumerate(flat)], {0: 0.4})[0]
    assert alarms(rising) == []
    assert alarms(flat) == [9, 10, 11, 12]  # first outrun at step 4, six steps in a row by step 9
    with monkeypatch.context() as m:  # patience alone (the verifier never counts as rising) flags the rising run
        m.setattr("grpolab.alarms.attribution.RISING_Z", math.inf)
        assert alarms(rising)
    rows = [row(i + 1, s, c) for i, (s, c) in enumerate(zip(flat, schema))]
    why = attribution(rows, {0: 0.4}, 3.0, 2, 0.15, shaping, 6)[1]["attribution:schema"]
    assert "not rising (training success 9% -> 9%" in why
    # held-out success above its start counts as rising, whatever the training halves say
    assert verifier_rising([row(i + 1, s, 1.0) for i, s in enumerate(flat)], {0: 0.4, 8: 0.6})[0]
