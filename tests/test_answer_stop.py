"""`rollout.stop_at_answer`: an episode ends with the answer sentence the environment declares, not at the budget."""

from dataclasses import replace

import pytest
import torch

from grpolab.config import load_config
from grpolab.engine import rollout
from grpolab.engine.policy import build_policy
from grpolab.engine.sft import reference_tokens
from grpolab.envs.numeric import result_sentence_end
from grpolab.protocol import parse_transcript
from grpolab.rewards.score import score_transcript

ACME = "ACME's stock changed by 14.17% in Q3 (from $120.00 to $137.00)."


@pytest.mark.parametrize(
    "text,end",
    [
        (ACME + " This close is about $137 - $2", len(ACME)),
        (ACME, None),  # nothing after the point yet: the next token may still be a digit
        (ACME + " ", None),  # what follows decides: a tag would make it a step before a call
        ("The result is 14.", None),
        ("The result is 14.17", None),
        ("The result is 14.17%\nand more", len("The result is 14.17%")),
        ("Done. The result is 14.1667! Then", len("Done. The result is 14.1667!")),
        ("I looked it up. It went up.\nMore", None),  # no number stated
        ("The close was $137.00. The change is 14.17%. More", len("The close was $137.00. The change is 14.17%.")),
        ("The result is 14.2%. More", None),  # not the calculator's result at two decimals: it runs on
        ("The change is 14.17.\n<tool_call>", None),  # a step before another call, not the answer
    ],
)
def test_the_answer_ends_with_the_first_sentence_that_states_the_calculated_result(text, end):
    assert result_sentence_end(text, [14.166667]) == end


RESTATED = "PINN (Pinnacle Dynamics) Q4 2025 report: revenue $9.3B; EPS $0.09 vs estimate $0.39, missing estimates. "
RESULT = "PINN missed its EPS estimate by $0.30 per share."


def test_a_sentence_that_restates_looked_up_facts_is_not_the_answer():
    """The seed-1 demo failures (PINN): the first version ended on any number, here after the restated report."""
    assert result_sentence_end(RESTATED + RESULT + " More", [-0.3]) == len(RESTATED + RESULT)
    assert result_sentence_end(RESTATED + "It missed. More", [-0.3]) is None


def test_a_result_that_equals_an_input_still_ends_the_answer():
    """ "round(6 / 3, 2)" returned 2: the 2 is an argument too, and still the answer."""
    assert result_sentence_end("The result is 2.00. More", [2.0]) == len("The result is 2.00.")


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


def test_an_export_made_before_the_rule_keeps_chatting_without_it(tmp_path):
    from grpolab.agent.export import MANIFEST, exported_config

    data = load_config(None, {"model": "tiny"}).model_dump(mode="json")
    del data["rollout"]["stop_at_answer"]
    (tmp_path / MANIFEST).write_text(__import__("json").dumps({"config": data}))
    cfg = exported_config(tmp_path)
    assert cfg is not None and cfg.rollout.stop_at_answer is False
