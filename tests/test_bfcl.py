"""BFCL: the AST checker (BFCL's rules and quirks), data from the installed bfcl-eval package, irrelevance scoring,
the live categories held out, user files with --data, schema conversion."""

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpolab.envs.bfcl.checker import check_call, check_calls, check_output, standardize
from grpolab.envs.bfcl.data import CATEGORIES, is_live, package_data_dir, package_sources
from grpolab.envs.bfcl.env import BFCLEnv
from grpolab.envs.bfcl.schema import to_json_schema
from grpolab.errors import UserError
from grpolab.rewards.score import score_transcript

AREA = {
    "name": "calc_area",
    "parameters": {
        "type": "dict",
        "required": ["base", "height"],
        "properties": {"base": {"type": "integer"}, "height": {"type": "float"}, "unit": {"type": "string"}},
    },
}
TRUTH = {"calc_area": {"base": [10], "height": [5.0], "unit": ["cm", ""]}}


@pytest.mark.parametrize(
    "name,args,ok,error",
    [
        ("calc_area", {"base": 10, "height": 5}, True, "matches"),  # int accepted for float; optional omitted
        ("calc_area", {"base": 10, "height": 5.0, "unit": "C.M"}, True, "matches"),  # string standardisation
        ("calc_area", {"base": 10.0, "height": 5}, False, "type_error"),  # no float for an integer
        ("calc_area", {"base": True, "height": 5}, False, "type_error"),  # a bool is not an integer
        ("calc_area", {"base": "10", "height": 5}, False, "type_error"),
        ("area", {"base": 10, "height": 5}, False, "wrong_func_name"),
        ("calc.area", {"base": 10, "height": 5}, False, "wrong_func_name"),  # names match exactly, as in BFCL
        ("calc_area", {"base": 10}, False, "missing_required"),
        ("calc_area", {"base": 10, "height": 5, "color": "red"}, False, "unexpected_param"),
        ("calc_area", {"base": 11, "height": 5}, False, "value_error"),
    ],
)
def test_checker_error_types(name, args, ok, error):
    passed, why = check_call(name, args, TRUTH, AREA)
    assert passed is ok and error in why


def test_optional_without_empty_marker_must_be_given():
    ok, why = check_call(
        "calc_area", {"base": 10, "height": 5}, {"calc_area": {**TRUTH["calc_area"], "unit": ["cm"]}}, AREA
    )
    assert not ok and "missing_optional" in why


def test_a_declared_parameter_missing_from_the_answer_is_unexpected():
    truth = {"calc_area": {"base": [10], "height": [5.0]}}
    ok, why = check_call("calc_area", {"base": 10, "height": 5, "unit": "cm"}, truth, AREA)
    assert not ok and "unexpected_param" in why


def test_bfcl_type_quirks():
    f = {
        "name": "f",
        "parameters": {
            "type": "dict",
            "required": [],
            "properties": {
                "v": {"type": "string"},
                "a": {"type": "any"},
                "xs": {"type": "array", "items": {"type": "float"}},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
        },
    }
    # the answer gives a bool for a string parameter: a bool is then accepted (BFCL's "variable" rule)
    assert check_call("f", {"v": True}, {"f": {"v": [True]}}, f)[0]
    assert not check_call("f", {"a": 3}, {"f": {"a": ["3"]}}, f)[0]  # "any" is a string in BFCL
    assert not check_call("f", {"xs": [1, 2]}, {"f": {"xs": [[1.0, 2.0]]}}, f)[0]  # no int-to-float inside arrays
    assert check_call("f", {"xs": [1.0, 2.0]}, {"f": {"xs": [[1.0, 2.0]]}}, f)[0]
    assert check_call("f", {"tags": ["New York"]}, {"f": {"tags": [["new york"], ""]}}, f)[0]
    assert check_call("f", {"tags": []}, {"f": {"tags": [["a"], ""]}}, f)[0]  # [] matches "may be omitted"


def test_dict_and_list_of_dict_answers():
    f = {
        "name": "q",
        "parameters": {
            "type": "dict",
            "required": [],
            "properties": {"info": {"type": "dict"}, "rows": {"type": "array", "items": {"type": "dict"}}},
        },
    }
    truth = {"q": {"info": [{"name": ["John"], "email": ["a@b.com", ""]}], "rows": [[{"k": [1]}, {"k": [2]}], ""]}}
    assert check_call("q", {"info": {"name": "john"}}, truth, f)[0]
    assert not check_call("q", {"info": {"name": "Jane"}}, truth, f)[0]
    assert not check_call("q", {"info": {"name": "John", "age": 3}}, truth, f)[0]  # unexpected key
    assert not check_call("q", {"info": {"email": "a@b.com"}}, truth, f)[0]  # missing key
    assert check_call("q", {"info": {"name": "John"}, "rows": [{"k": 1}, {"k": 2}]}, truth, f)[0]
    assert not check_call("q", {"info": {"name": "John"}, "rows": [{"k": 2}, {"k": 1}]}, truth, f)[0]  # in order


def test_categories_dispatch_count_and_order():
    funcs = [AREA]
    one = [{"calc_area": {"base": [1], "height": [2.0]}}]
    two = one + [{"calc_area": {"base": [3], "height": [4.0]}}]
    calls = [("calc_area", {"base": 3, "height": 4}), ("calc_area", {"base": 1, "height": 2})]
    assert check_calls(calls, two, funcs, "parallel")[0]  # any order
    ok, why = check_calls(calls[:1], two, funcs, "parallel_multiple")
    assert not ok and "wrong_count" in why
    ok, why = check_calls(calls, one, funcs, "simple_python")
    assert not ok and "simple_function_checker:wrong_count" in why
    assert check_calls(calls[1:], one, funcs, "live_multiple")[0]
    assert check_output([], True, one, funcs, "simple_python") == (False, "no call made")
    ok, why = check_output(calls[1:], False, one, funcs, "simple_python")  # another call was malformed
    assert not ok and "decoder_failed" in why


def test_parallel_matching_is_greedy_like_bfcl():
    # expected call 1 takes the first output call it accepts, even if expected call 2 needed it: BFCL fails this
    f = {"name": "f", "parameters": {"type": "dict", "required": ["x"], "properties": {"x": {"type": "integer"}}}}
    truth = [{"f": {"x": [1, 2]}}, {"f": {"x": [1]}}]
    assert not check_calls([("f", {"x": 1}), ("f", {"x": 2})], truth, [f], "parallel")[0]
    assert check_calls([("f", {"x": 2}), ("f", {"x": 1})], truth, [f], "parallel")[0]


def test_relevance_categories():
    calls = [("calc_area", {"base": 1})]
    assert check_output([], True, [], [AREA], "irrelevance")[0]
    assert not check_output(calls, True, [], [AREA], "live_irrelevance")[0]
    assert check_output(calls, False, [], [AREA], "irrelevance")[0]  # undecodable output: no call, as in BFCL
    assert check_output(calls, True, [], [AREA], "live_relevance")[0]
    assert not check_output([], True, [], [AREA], "live_relevance")[0]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    args=st.dictionaries(st.sampled_from(["base", "height", "unit", "x"]), json_values, max_size=4), answer=json_values
)
def test_checker_never_raises(args, answer):
    f = {
        "name": "calc_area",
        "parameters": {
            "type": "dict",
            "required": [],
            "properties": {
                "base": {"type": "array", "items": {"type": "dict"}},
                "height": {"type": "dict"},
                "unit": {"type": "tuple"},
                "x": {"type": "weird"},
            },
        },
    }
    truth = [{"calc_area": {"base": [answer], "height": [answer, ""], "unit": answer, "x": [answer]}}]
    for category in ("simple_python", "parallel", "multiple"):
        ok, why = check_output([("calc_area", args)], True, truth, [f], category)
        assert isinstance(ok, bool) and isinstance(why, str)


def test_standardize_like_bfcl():
    assert standardize("New York, NY.") == "newyorkny"
    assert standardize("it's") == 'it"s'


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
    # BFCL puts an array's allowed item values on the array
    arr = to_json_schema({"type": "array", "items": {"type": "string"}, "enum": ["a", "b"]})
    assert arr == {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}


# ---- data from the installed bfcl-eval package ----------------------------------------------------------------

COUNTS = {
    "simple_python": 400,
    "multiple": 200,
    "parallel": 200,
    "parallel_multiple": 200,
    "irrelevance": 240,
    "live_simple": 258,
    "live_multiple": 1053,
    "live_parallel": 16,
    "live_parallel_multiple": 24,
    "live_irrelevance": 884,
    "live_relevance": 16,
}


@pytest.fixture(scope="module")
def bfcl():
    from grpolab.envs import get_env

    return get_env("bfcl")


def test_every_single_turn_category_loads_from_the_package(bfcl):
    train, heldout = bfcl.tasks("train"), bfcl.tasks("heldout")
    assert bfcl.kinds == list(CATEGORIES)
    for kind, n in COUNTS.items():
        n_train = sum(t.kind == kind for t in train)
        assert n_train + sum(t.kind == kind for t in heldout) == n, kind
        assert n_train == (0 if is_live(kind) else n - n // 5), kind  # live: all held out; otherwise 20% held out
    assert not {t.id for t in train} & {t.id for t in heldout}


def test_data_is_read_from_the_installed_package_only():
    root = package_data_dir()
    assert root.parts[-2:] == ("bfcl_eval", "data")
    for source in package_sources().values():
        assert source.questions.parent == root and (
            source.answers is None or source.answers.parent == root / "possible_answer"
        )


def test_a_missing_package_is_a_user_error(monkeypatch):
    import grpolab.envs.bfcl.data as data

    monkeypatch.setattr(data, "find_spec", lambda name: None)
    with pytest.raises(UserError, match="bfcl-eval package is not installed"):
        BFCLEnv()


def test_categories_are_task_kinds_and_load_lazily():
    from grpolab.envs import get_env

    env = BFCLEnv(task_kinds=["irrelevance", "live_simple"])
    assert {t.kind for t in env.tasks("train")} == {"irrelevance"}  # live_simple is never trained on
    assert len(env.tasks("heldout")) == 48 + 258
    assert set(env._tasks) == {"irrelevance", "live_simple"}  # nothing else was read
    env = get_env("bfcl", task_kinds=["live_simple"])
    assert env.tasks("train") == [] and len(env.tasks("heldout")) == 258
    with pytest.raises(UserError, match="unknown"):
        BFCLEnv(task_kinds=["simple"])


def test_reference_calls_pass_the_checker(bfcl):
    tasks = bfcl.tasks("train") + bfcl.tasks("heldout")
    failed = {
        t.id
        for t in tasks
        if score_transcript(bfcl, t, bfcl.reference_transcript(t), count_tokens=len).components["completion"] != 1.0
    }
    # BFCL's own answers fail BFCL's own checker here (undeclared or missing required parameters)
    assert failed == {
        "parallel_multiple_26",
        "live_simple_106-63-0",
        "live_simple_112-68-0",
        "live_multiple_507-149-4",
        "live_multiple_862-181-3",
        "live_multiple_964-207-0",
    }


def test_irrelevance_is_correct_without_a_call(bfcl):
    task = bfcl.task("irrelevance_0")
    assert task.truth == [] and not task.needs_tools
    no_call = score_transcript(bfcl, task, "None of these functions can do that.", count_tokens=len)
    assert no_call.components["completion"] == 1.0 and no_call.components["schema"] == 1.0
    name = task.meta["functions"][0]["name"]
    call = score_transcript(
        bfcl, task, f'<tool_call>\n{{"name": "{name}", "arguments": {{}}}}\n</tool_call>', count_tokens=len
    )
    assert call.components["completion"] == 0.0 and "irrelevance_error" in call.reasons["completion"]
    assert (
        score_transcript(bfcl, task, bfcl.reference_transcript(task), count_tokens=len).components["completion"] == 1.0
    )


def test_a_wrong_call_scores_zero_completion_but_full_format(bfcl):
    task = bfcl.task("simple_python_0")
    text = '<tool_call>\n{"name": "nonexistent", "arguments": {}}\n</tool_call>'
    s = score_transcript(bfcl, task, text, count_tokens=len)
    assert s.components["completion"] == 0.0 and s.components["format"] == 1.0 and s.components["schema"] == 0.0


def test_the_task_system_message_and_history_reach_the_prompt(bfcl):
    task = next(t for t in bfcl.tasks("heldout") if t.meta["history"])
    messages = bfcl.messages(task)
    assert messages[0]["role"] == "system" and task.meta["history"][0]["content"] in messages[0]["content"]
    assert messages[-1] == {"role": "user", "content": task.prompt}


def test_probes_find_nothing_gameable_on_bfcl(bfcl):
    from grpolab.preflight.check import _spread
    from grpolab.preflight.probes import gameable_lines, run_probes

    weights = {"format": 1.0, "schema": 1.5, "completion": 3.0, "length": -0.05}
    tasks = _spread(bfcl.tasks("train"), 10)
    assert "irrelevance" in {t.kind for t in tasks}
    assert gameable_lines(run_probes(bfcl, tasks, weights, 100, len)) == []


def test_shipped_config_trains_on_package_categories_and_never_on_live():
    from pathlib import Path

    from grpolab.config import load_config

    cfg = load_config(Path(__file__).parent.parent / "src" / "grpolab" / "configs" / "bfcl.toml")
    assert cfg.env == "bfcl" and not cfg.data
    assert set(cfg.task_kinds) == {k for k in CATEGORIES if not is_live(k)}


BFCL_RECIPE = Path(__file__).parent.parent / "src" / "grpolab" / "configs" / "bfcl.toml"


def _recipe_sft_draw():
    from grpolab.config import load_config
    from grpolab.engine.sft import sft_batches
    from grpolab.envs import env_for

    cfg = load_config(BFCL_RECIPE)
    env, t = env_for(cfg), cfg.train
    batches = sft_batches(env.tasks("train"), t.sft_steps, t.sft_batch_size, cfg.seed, t.sft_mix)
    return cfg, env, [task for batch in batches for task in batch]


def test_the_shipped_recipe_seeds_on_answers_that_end_after_their_call():
    """Issue 26: drawn by task count, the five-category recipe's warm start held 15 simple_python transcripts of 60
    (the simple-only recipe that reached 57.5% had 120), and after a closed call the reference went on with another
    call 42% of the time; seeded so, the model kept calling until the token budget cut its last call."""
    _, _, drawn = _recipe_sft_draw()
    kinds = Counter(t.kind for t in drawn)
    assert kinds["simple_python"] >= max(60, len(drawn) / 2), kinds
    after_a_call = Counter(
        "another call" if i < len(t.reference_calls) - 1 else "end"
        for t in drawn
        for i in range(len(t.reference_calls))
    )
    assert after_a_call["another call"] <= 0.1 * sum(after_a_call.values()), after_a_call
    # irrelevance's no-call references taught the warm-started model not to call (15 of 33 tasks that needed one)
    assert all(t.reference_calls for t in drawn), kinds


def test_every_transcript_the_recipe_seeds_on_fits_its_token_budget():
    """A reference longer than rollout.max_new_tokens teaches an answer that no rollout or evaluation can finish:
    the budget cuts its last call, which scores as malformed."""
    from grpolab.formats import InlineFormat
    from grpolab.models import load_tokenizer

    cfg, env, drawn = _recipe_sft_draw()
    fmt = InlineFormat(load_tokenizer(cfg.model))
    lengths = {t.id: sum(fmt.reference_tokens(env, t)[2]) for t in drawn}
    assert max(lengths.values()) <= cfg.rollout.max_new_tokens, sorted(lengths.items(), key=lambda x: -x[1])[:3]


def test_the_prompt_says_the_calls_are_the_answer_and_to_end_after_them(bfcl, finance):
    """The lab's protocol text promised a <tool_response> and asked for a final plain-text answer, neither of which
    BFCL has, and said nothing of how many calls to make; its reference answers end right after their last call."""
    task = next(t for t in bfcl.tasks("train") if t.kind == "simple_python")
    system = bfcl.messages(task)[0]["content"]
    assert "result comes back" not in system and "final answer" not in system
    assert "one call for each" in system and "then end your answer" in system
    assert "result comes back" in finance.system_prompt(finance.tasks("train")[0])  # envs that run their tools


# ---- user files (--data) ----------------------------------------------------------------------------------------


def _write_user_file(tmp_path):
    functions = [AREA]
    questions = [
        {
            "id": f"simple_python_{i}",
            "question": [[{"role": "user", "content": f"Area of base {i}, height 2?"}]],
            "function": functions,
        }
        for i in range(5)
    ]
    answers = [
        {"id": f"simple_python_{i}", "ground_truth": [{"calc_area": {"base": [i], "height": [2.0]}}]} for i in range(5)
    ]
    path = tmp_path / "mine.json"
    path.write_text("\n".join(json.dumps(q) for q in questions))
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "possible_answer" / "mine.json").write_text("\n".join(json.dumps(a) for a in answers))
    return path


def test_data_file_given_by_the_user(tmp_path):
    from grpolab.envs import get_env

    env = get_env("bfcl", data=[str(_write_user_file(tmp_path))])
    assert len(env.tasks("train")) == 4 and len(env.tasks("heldout")) == 1
    task = env.task("simple_python_3")
    ok = score_transcript(env, task, env.reference_transcript(task), count_tokens=len)
    assert ok.components["completion"] == 1.0 and task.reference_calls == [("calc_area", {"base": 3, "height": 2.0})]


def test_an_irrelevance_file_needs_no_answers_and_live_ids_stay_held_out(tmp_path):
    rows = [
        {"id": f"live_irrelevance_{i}-0-0", "question": [[{"role": "user", "content": "Hi"}]], "function": [AREA]}
        for i in range(5)
    ]
    path = tmp_path / "irr.json"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    env = BFCLEnv([str(path)])
    assert env.kinds == ["live_irrelevance"] and env.tasks("train") == [] and len(env.tasks("heldout")) == 5


def test_data_file_on_the_command_line(cli, tmp_path):
    path = _write_user_file(tmp_path)
    code, out, err = cli("eval", "--env", "bfcl", "--data", str(path), "--model", "tiny", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["env"] == "bfcl" and summary["heldout/n"] == 1.0


def test_missing_data_file_is_a_user_error(cli, tmp_path):
    code, _, err = cli("eval", "--env", "bfcl", "--data", "/nonexistent.json", "--model", "tiny")
    assert code == 2 and "BFCL data file not found" in err
    lonely = tmp_path / "q.json"
    lonely.write_text(json.dumps({"id": "simple_python_0", "question": [], "function": []}))
    code, _, err = cli("eval", "--env", "bfcl", "--data", str(lonely), "--model", "tiny")
    assert code == 2 and "no possible_answer file" in err and len(err.strip().splitlines()) == 1


def test_eval_category_reads_the_packages_live_data(cli):
    code, out, err = cli(
        "eval", "--env", "bfcl", "--category", "live_simple", "--model", "tiny", "--limit", "2", "--json"
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary["heldout/n"] == 2.0 and len(summary["tasks"]) == 2  # a verdict per task
    assert all(row["task_id"].startswith("live_simple") and row["solved"] in (True, False) for row in summary["tasks"])
    code, _, err = cli("eval", "--env", "bfcl", "--category", "simple", "--model", "tiny", "--limit", "2")
    assert code == 2 and "simple_python" in err


IRRELEVANCE_ROW = (
    '{"id": "live_irrelevance_0-0-0", "question": [[{"role": "user", "content": "Hi"}]], '
    '"function": [{"name": "calc_area", "parameters": {"type": "dict", "properties": {"base": '
    '{"type": "integer", "default": VALUE}}}}]}'
)
"""A BFCL line with VALUE (raw JSON text) as a parameter's default."""


@pytest.mark.parametrize(
    "value,problem",
    [
        ("[" * 100_000 + "]" * 100_000, "nests 100006 levels deep, over the limit of 64"),  # RecursionError before
        ("[" * 100 + "]" * 100, "nests 106 levels deep, over the limit of 64"),
        ("NaN", "not a finite number"),
        ("-Infinity", "not a finite number"),
        ("1e400", "not a finite number"),
        ("1" + "0" * 400, "not a finite number"),
    ],
)
def test_bfcl_data_beyond_the_limits_exits_2_naming_the_line(cli, tmp_path, value, problem):
    path = tmp_path / "odd.json"
    path.write_text(IRRELEVANCE_ROW.replace("VALUE", "1") + "\n" + IRRELEVANCE_ROW.replace("VALUE", value) + "\n")
    config = tmp_path / "odd.toml"
    config.write_text(f'env = "bfcl"\ndata = [{json.dumps(str(path))}]\n')
    for argv in (("tasks", "--config", str(config)), ("eval", "--env", "bfcl", "--data", str(path), "--model", "tiny")):
        code, _, err = cli(*argv)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, (argv, err[-500:])
        assert f"{path} line 2" in lines[0] and problem in lines[0], lines[0]
