"""The no-thought branch (`grpolab.engine.branches`): the policy sampled where its episode cannot open the thought,
and the forecast reading those episodes in place of the edits that reach the same class."""

from __future__ import annotations

import torch

from grpolab.engine.branches import banned_opening, no_thought_chooser
from grpolab.engine.rollout import Episode, SamplingSettings
from grpolab.envs.base import Task
from grpolab.protocol import TOOL_CALL_OPEN
from grpolab.simulator.forecast import Pilot, PilotEpisode, with_branch


def test_the_banned_token_opens_the_thought_and_never_a_tool_call(tokenizer):
    for tag in ("thought", "think"):
        prefix, token = banned_opening(tokenizer, tag)
        assert tokenizer.encode(f"<{tag}>", add_special_tokens=False)[: len(prefix) + 1] == [*prefix, token]
        call = tokenizer.encode(TOOL_CALL_OPEN, add_special_tokens=False)
        assert call[: len(prefix) + 1] != [*prefix, token]


def test_the_chooser_bans_only_the_thought_opening_at_the_start(tokenizer):
    prefix, token = banned_opening(tokenizer, "thought")
    greedy = SamplingSettings(8, 1, 1.0, 1.0, greedy=True)
    choose = no_thought_chooser(tokenizer, "thought", greedy, None)
    task = Task("t", "prompt", "1", 1.0, "k")
    at_start, later = Episode(task, 0, [1], completion_ids=list(prefix)), Episode(task, 0, [1], completion_ids=[5, 6])
    logits = torch.zeros(2, len(tokenizer))
    logits[:, token] = 10.0  # the policy wants to open its thought everywhere
    picked, logp = choose([at_start, later], logits)
    assert picked[0].item() != token and picked[1].item() == token
    assert torch.isfinite(logp).all()


def test_a_tag_that_only_prefixes_the_call_cannot_be_banned(tokenizer):
    assert banned_opening(tokenizer, "tool_call") is None
    assert no_thought_chooser(tokenizer, "tool_call", SamplingSettings(8, 1, 1.0, 1.0), None) is None


def test_branch_episodes_replace_the_edits_of_their_class():
    comps = {"format": 0.0, "schema": 1.0, "completion": 1.0, "length": 0.5}
    edit = PilotEpisode("edit:0", "dropped_thought", {**comps, "completion": 0.0}, 40, reached=True)
    sampled = PilotEpisode("1:0", "wrong_result_call", {**comps, "completion": 0.0}, 60)
    pilot = Pilot([sampled, edit], "pilot")
    rows = [
        {"class": "dropped_thought", "components": comps, "tokens": 30, "group": 0},
        {"class": "hedged_answer", "components": {**comps, "schema": 0.0}, "tokens": 50, "group": 1},
    ]
    out = with_branch(pilot, rows)
    assert [e.group for e in out.episodes] == ["1:0", "branch::0"]
    assert out.episodes[1].reached and out.episodes[1].components["completion"] == 1.0
    assert "1 episode(s) of dropped_thought sampled on the no-thought branch" in out.notes[-1]
    assert with_branch(pilot, rows[1:]) is pilot  # nothing of the branch's classes: the edits stay
