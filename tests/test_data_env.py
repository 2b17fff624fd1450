"""Env `data`: tasks from a JSONL file or a saved dataset, a tools module, verifiers by name, bad rows refused."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpolab.config import DATA_VERIFIERS, DataEnvConfig, load_config
from grpolab.envs import Evidence, Task, env_for, get_env
from grpolab.envs.data.env import DataEnv, heldout_by_hash
from grpolab.envs.data.verifiers import CHECKS, check_for
from grpolab.errors import UserError
from grpolab.rewards.score import score_transcript
from tests.conftest import TINY_SETTINGS

TOOLS = '''
def add(a: float, b: float) -> dict:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return {"result": a + b}


def _helper():
    return 1
'''
ROWS = [
    {
        "id": "sum-1",
        "prompt": "What is 2 + 3?",
        "answer": 5,
        "split": "train",
        "kind": "sum",
        "reference_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}],
        "reference_answer": "5",  # a longer one loses to the bare answer by its length penalty: `check` says so
    },
    {
        "id": "sum-2",
        "prompt": "What is 10 + 7?",
        "answer": "17",
        "split": "heldout",
        "kind": "sum",
        "reference_calls": [{"name": "add", "arguments": {"a": 10, "b": 7}}],
    },
    {"prompt": "How many legs has a cat?", "answer": 4, "split": "train"},
    {"prompt": "How many legs has a bird?", "answer": 2, "split": "heldout"},
]


def write_rows(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture()
def folder(tmp_path):
    """A user's folder: a tools module, a JSONL of tasks and a config naming them by relative paths."""
    (tmp_path / "tools.py").write_text(TOOLS)
    write_rows(tmp_path / "tasks.jsonl", ROWS)
    (tmp_path / "config.toml").write_text(
        'env = "data"\ndata = ["tasks.jsonl"]\n[data_env]\ntools = "tools.py"\nverifier = "numeric"\n'
    )
    return tmp_path


def data_env(folder: Path, rows: list | None = None, **settings) -> DataEnv:
    path = write_rows(folder / "more.jsonl", rows) if rows is not None else folder / "tasks.jsonl"
    settings = {"tools": str(folder / "tools.py"), "verifier": "numeric", **settings}
    return DataEnv([str(path)], DataEnvConfig(**settings))


def test_the_config_finds_its_files_from_its_own_folder(folder, monkeypatch, tmp_path_factory):
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    cfg = load_config(folder / "config.toml", {"data_env.verifier": "checks.py:judge"})
    assert cfg.data == [str(folder / "tasks.jsonl")] and cfg.data_env.tools == str(folder / "tools.py")
    assert cfg.data_env.verifier == "checks.py:judge"  # a command-line value stays as given (from the cwd)
    (folder / "config.toml").write_text('env = "data"\ndata = ["tasks.jsonl"]\n[data_env]\nverifier = "v.py:judge"\n')
    assert load_config(folder / "config.toml").data_env.verifier == f"{folder / 'v.py'}:judge"


def test_rows_load_with_their_defaults(folder):
    env = env_for(load_config(folder / "config.toml"))
    assert [t.id for t in env.tasks("train")] == ["sum-1", "tasks-3"]
    assert [t.id for t in env.tasks("heldout")] == ["sum-2", "tasks-4"]
    first, cat = env.tasks("train")
    assert (first.kind, first.truth, first.answer, first.needs_tools) == ("sum", 5.0, "5", True)
    assert first.reference_calls == [("add", {"a": 2, "b": 3})] and first.reference_thought
    assert (cat.kind, cat.needs_tools, cat.reference_answer, cat.reference_calls) == ("data", False, "4", [])
    assert list(env.toolbox.tools) == ["add"]  # _helper is private
    assert get_env("data", ["sum"], data=[str(folder / "tasks.jsonl")], data_env=env.settings).tasks("train") == [first]


def test_reference_transcripts_run_the_users_tool_and_score_full_marks(folder):
    env = env_for(load_config(folder / "config.toml"))
    for task in env.all_tasks().values():
        transcript = env.reference_transcript(task)
        score = score_transcript(env, task, transcript, {"format": 1.0, "schema": 1.0, "completion": 1.0})
        paid = {k: score.components[k] for k in ("format", "schema", "completion")}
        assert paid == {"format": 1.0, "schema": 1.0, "completion": 1.0}, (task.id, score.reasons)
    assert '<tool_response>\n{"result": 5}\n</tool_response>' in env.reference_transcript(env.task("sum-1"))


def test_the_sft_warm_start_trains_on_the_policys_text_of_a_data_task(folder, tokenizer):
    from grpolab.engine.sft import reference_tokens

    env = env_for(load_config(folder / "config.toml"))
    _, ids, mask = reference_tokens(tokenizer, env, env.task("sum-1"))
    learnt = tokenizer.decode([t for t, m in zip(ids, mask) if m == 1], skip_special_tokens=True)
    given = tokenizer.decode([t for t, m in zip(ids, mask) if m == 0])
    assert '"name": "add"' in learnt and learnt.endswith("</tool_call>5") and "thought>I will call add" in learnt
    assert '{"result": 5}' in given and "add" not in given  # the tool's response is the environment's


def test_rows_without_a_split_are_divided_by_a_hash_of_their_prompt(folder):
    rows = [{"prompt": f"Say {i}.", "answer": str(i)} for i in range(300)]
    env = data_env(folder, rows, tools="")
    heldout = {t.prompt for t in env.tasks("heldout")}
    assert 0.13 < len(heldout) / 300 < 0.27  # about 20%
    again = data_env(folder, list(reversed(rows)) + [{"prompt": "new", "answer": "1"}], tools="")
    assert heldout <= {t.prompt for t in again.tasks("heldout")}  # neither order nor new rows move a task
    assert all(heldout_by_hash(p, 0.2) for p in heldout)
    wider = data_env(folder, rows, tools="", heldout_fraction=0.5)
    assert heldout < {t.prompt for t in wider.tasks("heldout")}


def test_a_saved_dataset_and_its_splits(folder):
    datasets = pytest.importorskip("datasets")
    plain = [{"prompt": r["prompt"], "answer": str(r["answer"])} for r in ROWS[2:]]
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(plain[:1]), "test": datasets.Dataset.from_list(plain[1:])}
    ).save_to_disk(str(folder / "saved"))
    env = DataEnv([str(folder / "saved")], DataEnvConfig(verifier="numeric"))
    assert [t.answer for t in env.tasks("train")] == ["4"] and [t.answer for t in env.tasks("heldout")] == ["2"]
    (folder / "rows.csv").write_text("prompt,answer,split\nWhat is one?,1,train\nWhat is two?,2,heldout\n")
    env = DataEnv([str(folder / "rows.csv")], DataEnvConfig(verifier="numeric"))
    assert [(t.id, t.truth) for t in env.all_tasks().values()] == [("rows-1", 1.0), ("rows-2", 2.0)]
    datasets.Dataset.from_list([{"prompt": "x", "answer": "1", "color": "red"}]).save_to_disk(str(folder / "extra"))
    with pytest.raises(UserError, match=r"extra row 1: unknown field 'color'"):
        DataEnv([str(folder / "extra")], DataEnvConfig())


CASES = [
    ("exact", {}, "Paris", "  paris. ", True),
    ("exact", {}, "Paris", "**PARIS**", True),
    ("exact", {}, "Paris", "The capital is Paris.", False),
    ("exact", {}, "New  York", "new york!", True),
    ("numeric", {}, 14.17, "It rose 14.1667%.", True),
    ("numeric", {}, "14.17", "It is 14.2.", False),
    ("numeric", {"tolerance": 0.1}, 14.17, "It is 14.2.", True),
    ("numeric", {}, -3, "The change is 3.", False),
    ("numeric", {}, -3, "The change is -3.", True),
    ("numeric", {}, 5, "Either 5 or 6.", False),
    ("numeric", {}, 5, "The answer is five.", False),
    ("regex", {}, r"\b(4|four)\b", "A cat has four legs.", True),
    ("regex", {}, r"\b(4|four)\b", "A cat has 44 legs.", False),
    ("regex", {"pattern": r"(?i)answer:\s*(\w+)"}, "Paris", "thinking... Answer: paris", True),
    ("regex", {"pattern": r"(?i)answer:\s*(\w+)"}, "Paris", "Answer: Lyon", False),
    ("regex", {"pattern": r"(?i)answer:\s*(\w+)"}, "Paris", "Paris", False),
    ("json", {}, {"a": [1, 2]}, 'Here: {"a": [1, 2.0]} done', True),
    ("json", {}, '{"a": [1, 2]}', '```json\n{"a": [1, 2]}\n```', True),
    ("json", {}, {"a": [1, 2]}, '{"a": [2, 1]}', False),
    ("json", {}, {"ok": True}, '{"ok": 1}', False),
    ("json", {}, [1], "no json here", False),
    ("json", {}, [1], "[" * 200 + "]" * 200, False),
    ("json", {}, [1], "so: [" * 200 + "]" * 200, False),
    ("json", {}, {"x": 1}, 'so: {"x": NaN}', False),
    ("json", {}, {"x": 1}, 'so: {"x": 1e400}', False),
]


@pytest.mark.parametrize(("verifier", "settings", "answer", "final", "passed"), CASES)
def test_verifiers_on_literal_answers(verifier, settings, answer, final, passed):
    check = check_for(DataEnvConfig(verifier=verifier, **settings))
    task = Task(id="t", prompt="What is it?", answer=str(answer), truth=check.truth(answer), kind="k")
    verdict = check.verify(final, task, Evidence(task.prompt, [], []))
    assert verdict.passed is passed, verdict.reason


@given(st.text(alphabet=st.sampled_from('{}[]"x1e.9 -NaInfity`json\n'), max_size=300))
@settings(max_examples=300, deadline=None)
def test_built_in_verifiers_never_raise_on_model_text(final):
    built_in = [("exact", {}, "Paris"), ("numeric", {}, 4), ("regex", {}, "a+"), ("regex", {"pattern": "(x)"}, "x")]
    for verifier, extra, answer in [*built_in, ("json", {}, {"x": [1]})]:
        check = check_for(DataEnvConfig(verifier=verifier, **extra))
        task = Task(id="t", prompt="p", answer=str(answer), truth=check.truth(answer), kind="k")
        assert isinstance(check.verify(final, task, Evidence("p", [], [])).passed, bool)


def test_numeric_does_not_take_a_restated_input_for_the_result():
    check = check_for(DataEnvConfig(verifier="numeric"))
    task = Task(id="t", prompt="What is 12 + 30?", answer="42", truth=42.0, kind="k")
    assert check.verify("12 + 30 = 42", task, Evidence(task.prompt, [], [])).passed
    assert not check.verify("12 + 30 = 43", task, Evidence(task.prompt, [], [])).passed


def test_every_verifier_name_the_config_accepts_is_implemented():
    assert tuple(CHECKS) == DATA_VERIFIERS


USER_VERIFIER = """
from grpolab.envs import Verdict


def judge(answer, task, evidence):
    if answer == "verdict":
        return Verdict(True, "by verdict")
    if answer == "half":
        return 0.5
    if answer == "bad":
        return "yes"
    return answer.strip() == task.truth
"""


def test_a_users_verifier_function(folder):
    (folder / "checks.py").write_text(USER_VERIFIER)
    rows = [{"prompt": "Name a colour.", "answer": "red", "split": s} for s in ("train", "heldout")]
    rows[1]["prompt"] = "Name another colour."
    env = data_env(folder, rows, tools="", verifier=f"{folder / 'checks.py'}:judge")
    task = env.tasks("train")[0]
    evidence = Evidence(task.prompt, [], [])
    assert env.verify(task, " red ", evidence).passed and not env.verify(task, "blue", evidence).passed
    assert env.verify(task, "verdict", evidence).reason == "by verdict"
    half = env.verify(task, "half", evidence)
    assert (half.passed, half.score) == (False, 0.5)
    with pytest.raises(TypeError, match="returned 'yes'"):
        env.verify(task, "bad", evidence)
    with pytest.raises(UserError, match="has no function 'nope'"):
        data_env(folder, rows, tools="", verifier=f"{folder / 'checks.py'}:nope")


def test_a_tools_module_becomes_schemas_and_runs(folder):
    env = data_env(folder)
    tool = env.toolbox.get("add")
    assert tool.isolate  # a user's tool runs in a child process
    assert tool.parameters["properties"] == {
        "a": {"type": "number", "description": "The first number."},
        "b": {"type": "number", "description": "The second number."},
    }
    assert env.toolbox.execute("add", {"a": 1, "b": 2.5}) == {"result": 3.5}
    assert "error" in env.toolbox.execute("add", {"a": "x"})
    listed = (
        'def sub(a: int) -> int:\n    """Minus.\n\n    Args:\n        a: A.\n    """\n    return -a\n\nTOOLS = [sub]\n'
    )
    (folder / "listed.py").write_text(TOOLS + "\n\n" + listed + "\nTOOLS = [sub]\n")
    assert list(data_env(folder, ROWS[2:], tools=str(folder / "listed.py")).toolbox.tools) == ["sub"]
    (folder / "untyped.py").write_text("def add(a, b):\n    return a + b\n")
    with pytest.raises(UserError, match=r"tool 'add' in .*untyped.py has no JSON schema.*type hint"):
        data_env(folder, tools=str(folder / "untyped.py"))


BAD_ROWS = [
    ('{"answer": "x"}', "line 2: field 'prompt': Field required"),
    ('{"prompt": "p", "answer": null}', "line 2: field 'answer'"),
    ('{"prompt": "p", "answer": "x", "split": "test"}', "line 2: field 'split'"),
    ('{"prompt": "p", "answer": "x", "refrence_answer": "x"}', "line 2: unknown field 'refrence_answer'"),
    ('{"id": "sum-1", "prompt": "p", "answer": 1}', "line 2: field 'id': 'sum-1' is also the id of"),
    ('{"prompt": "p", "answer": "many 1 2"}', "line 2: field 'answer': verifier numeric needs one number"),
    ('{"prompt": "p", "answer": 1, "reference_calls": [{"name": "mul"}]}', "field 'reference_calls.0.name': unknown"),
    (
        '{"prompt": "p", "answer": 1, "reference_calls": [{"name": "add", "arguments": {"a": "x"}}]}',
        "line 2: field 'reference_calls.0.arguments'",
    ),
    ('{"prompt": "p", "answer": 1, "reference_answer": "2"}', "line 2: field 'reference_answer': '2' fails verifier"),
    ("[1, 2]", "line 2: not an object"),
]


@pytest.mark.parametrize(("line", "problem"), BAD_ROWS)
def test_a_bad_row_names_its_file_line_and_field(folder, line, problem):
    with pytest.raises(UserError) as info:
        data_env(folder, [ROWS[0], line, ROWS[3]], verifier="numeric")
    assert f"{folder / 'more.jsonl'} {problem}" in str(info.value) or problem in str(info.value)
    assert str(folder / "more.jsonl") in str(info.value) and info.value.exit_code == 2


def test_a_pattern_answer_needs_a_reference_answer_that_it_matches(folder):
    rows = [{"prompt": "Legs of a cat?", "answer": r"\b(4|four)\b", "split": s} for s in ("train", "heldout")]
    rows[1]["prompt"] = "Legs of a dog?"
    with pytest.raises(UserError, match=r"line 1: field 'reference_answer': required when the answer is a pattern"):
        data_env(folder, rows, tools="", verifier="regex")
    with pytest.raises(UserError, match=r"line 1: field 'reference_answer': 'Three.' fails verifier regex"):
        data_env(folder, [{**r, "reference_answer": "Three."} for r in rows], tools="", verifier="regex")
    env = data_env(folder, [{**r, "reference_answer": "It has four."} for r in rows], tools="", verifier="regex")
    assert env.tasks("train")[0].reference_answer == "It has four."


def test_every_bad_row_is_counted_and_no_tools_means_no_calls(folder):
    rows = [ROWS[0], '{"answer": 1}', '{"prompt": "p"}', ROWS[3]]
    with pytest.raises(UserError, match=r"line 2: field 'prompt'.*\(and 1 more bad rows\)"):
        data_env(folder, rows, verifier="numeric")
    with pytest.raises(UserError, match=r"line 1: field 'reference_calls': env data has no tools.*data_env\.tools"):
        data_env(folder, ROWS, tools="", verifier="numeric")


def test_files_and_settings_that_cannot_work_are_user_errors(folder):
    (folder / "empty.jsonl").write_text("\n")
    (folder / "imports.py").write_text("import no_such_dep\n")
    for files, section, problem in [
        ([], {}, "env 'data' has no task file"),
        ([str(folder / "empty.jsonl")], {}, "no tasks in"),
        ([str(folder / "missing.jsonl")], {}, "task file not found"),
        ([str(folder / "tools.py")], {}, "is not JSON Lines or a dataset"),
        ([str(folder / "tasks.jsonl")], {"tools": "no_such_tools_module"}, "not found on the Python path"),
        ([str(folder / "tasks.jsonl")], {"tools": str(folder / "nope.py")}, "tools module .*nope.py not found"),
        ([str(folder / "tasks.jsonl")], {"verifier": "no_such_module:f"}, "verifier module 'no_such_module'"),
        ([str(folder / "tasks.jsonl")], {"tools": str(folder / "imports.py")}, "No module named 'no_such_dep'"),
    ]:
        with pytest.raises(UserError, match=problem):
            DataEnv(files, DataEnvConfig(**section))
    only_train = [{**r, "split": "train"} for r in ROWS]
    with pytest.raises(UserError, match=r'no heldout tasks in .*mark some rows "split": "heldout"'):
        data_env(folder, only_train, verifier="numeric")


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ('verifier = "fuzzy"', "unknown verifier 'fuzzy'; use one of exact, numeric, regex, json, or module:function"),
        ('pattern = "("', "field 'data_env.pattern': Value error, not a valid regular expression"),
        ('pattern = "x"', "pattern is read by verifier = 'regex' only"),
        ("tolerance = 0.1", "tolerance is read by verifier = 'numeric' only"),
        ("heldout_fraction = 1.0", "field 'data_env.heldout_fraction'"),
    ],
)
def test_bad_settings_exit_2(cli, tmp_path, section, problem):
    (tmp_path / "c.toml").write_text(f"[data_env]\n{section}\n")
    code, _, err = cli("config", "--config", str(tmp_path / "c.toml"))
    assert code == 2 and problem in " ".join(err.split())


def test_a_bad_row_exits_2_through_the_cli(cli, folder):
    write_rows(folder / "tasks.jsonl", [ROWS[0], '{"prompt": "p", "answer": 1, "split": "dev"}', ROWS[3]])
    code, _, err = cli("tasks", "--config", str(folder / "config.toml"))
    assert code == 2 and f"{folder / 'tasks.jsonl'} line 2: field 'split'" in " ".join(err.split())


def test_envs_lists_data(cli):
    code, out, _ = cli("envs", "--json")
    row = next(r for r in json.loads(out) if r["name"] == "data")
    assert code == 0 and "docs/data-env.md" in row["description"]


def tiny_toml() -> str:
    """TINY_SETTINGS as TOML (the CLI has no flag for most of them)."""
    sections: dict[str, list[str]] = {"": []}
    for dotted, value in TINY_SETTINGS.items():
        section, _, key = dotted.rpartition(".")
        sections.setdefault(section, []).append(f"{key} = {json.dumps(value)}")
    return "\n".join(("" if not name else f"[{name}]\n") + "\n".join(lines) for name, lines in sections.items())


def test_check_and_two_train_steps_on_the_tiny_model(cli, folder, monkeypatch, tmp_path_factory):
    config = folder / "config.toml"
    top, _, section = config.read_text().partition("[data_env]")
    config.write_text(top + tiny_toml() + "\n[data_env]" + section)
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))  # the config's relative paths start at its folder
    code, out, err = cli("check", "--config", str(config), "--prompts", "1", "--group-size", "2", "--json")
    report = json.loads(out)
    assert code == 0 and report["gameable"] == [], err  # no probe matches the honest reference solutions
    assert report["env"] == "data" and report["model"] == "tiny" and len(report["probes"]) >= 10
    run = folder / "run"
    argv = ("train", "--config", str(config), "--steps", "2", "--sft-steps", "1", "--out", str(run), "--quiet")
    code, _, err = cli(*argv)
    assert code == 0, err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and "heldout/success" in rows[-1]
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["data"] == [str(folder / "tasks.jsonl")]
    assert recorded["data_env"]["tools"] == str(folder / "tools.py")
    monkeypatch.chdir(tmp_path_factory.mktemp("later"))  # the run's own config finds its files from anywhere
    code, out, err = cli("eval", "--run", str(run), "--limit", "1", "--json")
    assert code == 0 and json.loads(out)["env"] == "data", err


def test_a_tools_file_whose_name_is_not_a_module_name_still_loads(tmp_path):
    """Only a plugin must be named like a module (a config finds it by its stem); a tools file is named by its path."""
    from grpolab.envs.data.modules import tools_from_module
    from grpolab.plugins import import_plugin

    path = tmp_path / "my-tools.py"
    path.write_text(
        "def add(a: int, b: int) -> int:\n"
        '    """Add two numbers.\n\n    Args:\n        a: one\n        b: two\n    """\n'
        "    return a + b\n"
    )
    assert [t.name for t in tools_from_module(str(path))] == ["add"]
    with pytest.raises(UserError, match="'my-tools' is not a module name"):
        import_plugin(str(path))
