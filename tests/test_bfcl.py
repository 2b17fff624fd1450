"""BFCL: schema conversion, the AST checker (one case per error type), the environment on the shared data."""

import pytest

from grpolab.envs.bfcl.checker import check_call, check_calls, normalize
from grpolab.envs.bfcl.env import to_json_schema
from grpolab.rewards.score import score_transcript

FUNCS = {
    "calc_area": {
        "name": "calc_area",
        "parameters": {
            "type": "dict",
            "properties": {"base": {"type": "integer"}, "height": {"type": "float"}, "unit": {"type": "string"}},
            "required": ["base", "height"],
        },
    },
}
TRUTH = {"calc_area": {"base": [10], "height": [5.0], "unit": ["cm", ""]}}


@pytest.mark.parametrize(
    "name,args,ok,error",
    [
        ("calc_area", {"base": 10, "height": 5}, True, "matches"),  # int accepted for float; optional omitted
        ("calc_area", {"base": 10, "height": 5.0, "unit": "CM"}, True, "matches"),  # string normalisation
        ("area", {"base": 10, "height": 5}, False, "wrong_func_name"),
        ("calc_area", {"base": 10}, False, "missing_required"),
        ("calc_area", {"base": 10, "height": 5, "color": "red"}, False, "unexpected_param"),
        ("calc_area", {"base": "10", "height": 5}, False, "type_error"),
        ("calc_area", {"base": 11, "height": 5}, False, "value_error"),
        ("calc_area", {"base": True, "height": 5}, False, "type_error"),
    ],
)
def test_checker_error_types(name, args, ok, error):
    passed, why = check_call(name, args, TRUTH, FUNCS)
    assert passed is ok and error in why


def test_optional_without_empty_marker_must_be_given():
    ok, why = check_call(
        "calc_area", {"base": 10, "height": 5}, {"calc_area": {**TRUTH["calc_area"], "unit": ["cm"]}}, FUNCS
    )
    assert not ok and "missing_optional" in why


def test_parallel_calls_match_in_any_order_and_count():
    truth = [{"calc_area": {"base": [1], "height": [2.0]}}, {"calc_area": {"base": [3], "height": [4.0]}}]
    calls = [("calc_area", {"base": 3, "height": 4}), ("calc_area", {"base": 1, "height": 2})]
    assert check_calls(calls, truth, FUNCS)[0]
    ok, why = check_calls(calls[:1], truth, FUNCS)
    assert not ok and "wrong_count" in why
    assert check_calls([], truth, FUNCS) == (False, "no call made")


def test_nested_dict_answers():
    funcs = {
        "q": {"name": "q", "parameters": {"type": "dict", "properties": {"info": {"type": "dict"}}, "required": []}}
    }
    truth = {"q": {"info": [{"name": ["John"], "email": ["a@b.com", ""]}]}}
    assert check_call("q", {"info": {"name": "john"}}, truth, funcs)[0]
    assert not check_call("q", {"info": {"name": "Jane"}}, truth, funcs)[0]


def test_normalize_like_bfcl():
    assert normalize("New York, NY.") == "newyorkny"


def test_schema_dialect_is_converted():
    s = to_json_schema(
        {
            "type": "dict",
            "properties": {
                "x": {"type": "float"},
                "t": {"type": "tuple", "items": {"type": "any"}},
                "type": {"type": "string"},
            },
        }
    )
    assert s["type"] == "object" and s["properties"]["x"]["type"] == "number"
    assert s["properties"]["t"] == {"type": "array", "items": {}}
    assert s["properties"]["type"]["type"] == "string"  # a parameter named "type" is a parameter, not a keyword


@pytest.fixture(scope="module")
def bfcl():
    from grpolab.envs import get_env

    return get_env("bfcl")


def test_shared_data_loads_with_a_heldout_split(bfcl):
    train, heldout = bfcl.tasks("train"), bfcl.tasks("heldout")
    assert len(train) + len(heldout) == 800
    assert not {t.id for t in train} & {t.id for t in heldout}
    assert {t.kind for t in heldout} == {"simple_python", "multiple", "parallel"}


def test_reference_calls_pass_the_checker(bfcl):
    tasks = bfcl.tasks("train") + bfcl.tasks("heldout")
    passed = sum(
        score_transcript(bfcl, t, bfcl.reference_transcript(t), count_tokens=len).components["completion"] == 1.0
        for t in tasks
    )
    assert passed >= 799  # simple_python_307's ground truth gives a bool for a string parameter


def test_a_wrong_call_scores_zero_completion_but_full_format(bfcl):
    task = bfcl.tasks("heldout")[0]
    text = '<tool_call>\n{"name": "nonexistent", "arguments": {}}\n</tool_call>'
    s = score_transcript(bfcl, task, text, count_tokens=len)
    assert s.components["completion"] == 0.0 and s.components["format"] == 1.0 and s.components["schema"] == 0.0


def test_missing_data_file_is_a_user_error(cli):
    code, _, err = cli("eval", "--env", "bfcl", "--data", "/nonexistent.json", "--model", "tiny")
    assert code == 2 and "BFCL data file not found" in err


def test_probes_find_nothing_gameable_on_bfcl(bfcl):
    from grpolab.trust.preflight import _spread
    from grpolab.trust.probes import gameable_lines, run_probes

    weights = {"format": 1.0, "schema": 1.5, "completion": 3.0, "length": -0.05}
    tasks = _spread(bfcl.tasks("train"), 9)
    assert gameable_lines(run_probes(bfcl, tasks, weights, 100, len)) == []
