"""`rollout.stop_at_answer`: an episode ends with the answer sentence the environment declares, not at the budget."""

from dataclasses import replace

import pytest
import torch

from grpolab.config import load_config
from grpolab.engine import rollout
from grpolab.engine.policy import build_policy
from grpolab.engine.sft import reference_tokens
from grpolab.envs.numeric import numbered_sentence_end
from grpolab.protocol import parse_transcript
from grpolab.rewards.score import score_transcript

ACME = "ACME's stock changed by 14.17% in Q3 (from $120.00 to $137.00)."


@pytest.mark.parametrize(
    "text,end",
    [
        (ACME + " This close is about $137 - $2", len(ACME)),
        (ACME, None),  # no whitespace after the point yet: the next token may still be a digit
        ("The result is 14.", None),
        ("The result is 14.17", None),
        ("The result is 14.17%\nand more", len("The result is 14.17%")),
        ("Done. The result is 42! Then", len("Done. The result is 42!")),
        ("I looked it up. It went up.\n", None),  # no number stated: not an answer yet
    ],
)
def test_the_answer_ends_with_the_first_sentence_that_states_a_number(text, end):
    assert numbered_sentence_end(text) == end


RESTATED = "PINN (Pinnacle Dynamics) Q4 2025 report: revenue $9.3B; EPS $0.09 vs estimate $0.39, missing estimates. "
RESULT = "PINN missed its EPS estimate by $0.30 per share."


@pytest.mark.parametrize(
    "restated,end",
    [
        ([2025, 9.3, 0.09, 0.39], len(RESTATED + RESULT)),  # the report restated first: the result sentence ends it
        ([2025, 9.3, 0.09], len(RESTATED) - 1),  # 0.39 was never looked up: the first sentence states a new number
        ([], len(RESTATED) - 1),
    ],
)
def test_a_sentence_that_only_restates_inputs_is_not_the_answer(restated, end):
    assert numbered_sentence_end(RESTATED + RESULT + " More", restated) == end


@pytest.fixture(scope="module")
def tiny():
    cfg = load_config(None, {"model": "tiny", "rollout.max_new_tokens": 400})
    model, tok, _ = build_policy(cfg)
    return cfg, model, tok


def _forced(tok, env, task, answer):
    """Teacher forcing: the reference calls and responses, then `answer` as the final turn (a literal rambling)."""
    task = replace(task, reference_answer=answer)
    _, ids, _ = reference_tokens(tok, env, task)

    def choose(episodes, logits):
        picked = torch.tensor([ids[len(e.completion_ids)] for e in episodes])
        return picked, torch.log_softmax(logits, -1).gather(-1, picked[:, None]).squeeze(-1)

    return choose


RAMBLING = ACME + " This close is about 5% above the 131.5 average, so maybe 15%."


@pytest.mark.parametrize("stop_at_answer", [True, False])
def test_a_rambling_answer_is_cut_after_its_sentence_and_scored_on_it(tiny, finance, stop_at_answer):
    cfg, model, tok = tiny
    task = finance.task("pct_change-ACME-Q3")
    s = replace(rollout.sampling_settings(cfg, greedy=True), stop_at_answer=stop_at_answer)
    [e] = rollout.run_episodes(model, tok, finance, [task], 1, s, choose=_forced(tok, finance, task, RAMBLING))
    assert e.turns == 2  # the thought + call turns after the first response were never cut
    answer = parse_transcript(e.text).final_answer
    score = score_transcript(finance, task, e.text, count_tokens=len)
    if stop_at_answer:
        assert e.stop_reason == "answer" and answer == ACME  # " This" opened the rambling and was taken back
        assert len(e.completion_ids) == len(e.mask) == len(e.logprobs)
        assert score.components["completion"] == 1.0, score.reasons
    else:
        assert e.stop_reason == "eos" and answer == RAMBLING
        assert score.components["completion"] == 0.0 and "hedged" in score.reasons["completion"]


def test_a_number_inside_the_final_thought_does_not_end_the_answer(tiny, finance):
    cfg, model, tok = tiny
    task = finance.task("pct_change-ACME-Q3")
    final = "<thought>The tool says 14.17. Now I answer.</thought>\n" + ACME + " More"
    s = rollout.sampling_settings(cfg, greedy=True)
    assert s.stop_at_answer  # the default
    [e] = rollout.run_episodes(model, tok, finance, [task], 1, s, choose=_forced(tok, finance, task, final))
    assert e.stop_reason == "answer" and e.text.endswith(ACME)


def test_the_code_env_declares_no_answer_end():
    """Its answer is a code block, which a sentence with a number must not cut."""
    from grpolab.envs import get_env
    from grpolab.envs.base import Evidence

    assert get_env("code").answer_end("The result is 14.17. More", Evidence("Compute", [], [])) is None


def test_a_restated_report_before_the_result_does_not_end_the_answer(tiny, finance):
    """The seed-1 demo failure (PINN): the answer restated the looked-up report first and was cut before the result.
    The numbers the search returned are inputs, as the verifier counts them; the sentence with the result ends it."""
    cfg, model, tok = tiny
    task = finance.task("eps_surprise-ACME-Q3")
    report = finance.report("ACME", 3)
    restated = f"ACME Q3 report: EPS ${report.eps:.2f} vs estimate ${report.eps_estimate:.2f}. "
    final = restated + task.reference_answer + " So it may be more."
    s = rollout.sampling_settings(cfg, greedy=True)
    [e] = rollout.run_episodes(model, tok, finance, [task], 1, s, choose=_forced(tok, finance, task, final))
    assert e.stop_reason == "answer"
    assert parse_transcript(e.text).final_answer == restated + task.reference_answer
    assert score_transcript(finance, task, e.text, count_tokens=len).components["completion"] == 1.0


def test_a_run_made_before_the_rule_keeps_running_without_it(tmp_path):
    """Resuming, evaluating or chatting with a run recorded before `rollout.stop_at_answer` existed must not switch
    the rule on (its config.json has no such key); a run that recorded the key keeps what it recorded."""
    import json

    from grpolab.rundir import RunDir

    cfg = load_config(None, {"model": "tiny"})
    data = cfg.model_dump(mode="json")
    assert data["rollout"]["stop_at_answer"] is True
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert RunDir(tmp_path).read_config().rollout.stop_at_answer is True
    del data["rollout"]["stop_at_answer"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert RunDir(tmp_path).read_config().rollout.stop_at_answer is False
