"""`capitals`: the retention check (a skill the base model has), scored on literal answers."""

import pytest

from grpolab.envs import get_env
from grpolab.rewards.score import score_transcript


@pytest.fixture(scope="module")
def capitals():
    return get_env("capitals")


@pytest.mark.parametrize(
    "task_id,answer,passed",
    [
        ("capital-france", "The capital of France is Paris.", True),
        ("capital-brazil", "The capital of Brazil is Brasília.", True),  # accents do not matter
        ("capital-turkey", "The capital of Turkey is Istanbul.", False),
        ("capital-canada", "It is Ottawa or maybe Lima.", False),  # two capitals named: a guess list
        ("capital-australia", "Canberra, with a mild climate.", True),  # "climate" does not name Lima
        ("capital-peru", "Peru has a mild climate.", False),
        ("capital-mexico", "Mexico City.", True),
    ],
)
def test_the_verifier_wants_the_capital_and_no_other(capitals, task_id, answer, passed):
    task = capitals.task(task_id)
    score = score_transcript(capitals, task, answer, count_tokens=len)
    assert (score.components["completion"] == 1.0) is passed, score.reasons["completion"]


def test_a_plain_answer_is_well_formed_and_a_tool_call_is_not_needed(capitals):
    task = capitals.task("capital-france")
    score = score_transcript(capitals, task, "The capital of France is Paris.", count_tokens=len)
    assert score.components["format"] == 1.0, score.reasons
    called = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
    assert score_transcript(capitals, task, called, count_tokens=len).components["completion"] == 0.0


def test_the_question_is_asked_as_a_person_would(capitals):
    task = capitals.task("capital-japan")
    assert capitals.messages(task) == [{"role": "user", "content": "What is the capital of Japan?"}]
    assert len(capitals.tasks("heldout")) == 40 and not {t.id for t in capitals.tasks("train")} & {
        t.id for t in capitals.tasks("heldout")
    }
