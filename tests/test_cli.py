"""CLI conventions: --json output, and exit 2 with one line naming the problem and the fix for bad input."""

import json

import pytest

from grpolab.cli import main


def run(capsys, *argv):
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_tools_run_prints_the_response(capsys):
    code, out, _ = run(capsys, "tools", "run", "--env", "finance", "calculator", '{"expression": "(137-120)/120*100"}',
                       "--json")  # fmt: skip
    assert code == 0 and json.loads(out) == {"result": 14.1666666667}


def test_tasks_json_has_the_fields(capsys):
    code, out, _ = run(capsys, "tasks", "--env", "finance", "--split", "heldout", "--json", "--limit", "2")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 2
    assert set(rows[0]) >= {"id", "prompt", "answer", "reference_transcript"}


def test_reward_score_json(capsys, tmp_path, finance):
    path = tmp_path / "t.txt"
    path.write_text(finance.reference_transcript(finance.task("pct_change-ACME-Q3")))
    code, out, _ = run(capsys, "reward", "score", "--env", "finance", "--task", "pct_change-ACME-Q3",
                       "--completion", str(path), "--weights", "1,1.5,3,0", "--json")  # fmt: skip
    data = json.loads(out)
    assert code == 0 and data["total"] == 5.5
    assert data["breakdown"] == "F:+1.0 | S:+1.5 | C:+3.0 | L:+0.0"
    assert set(data["components"]) == {"format", "schema", "completion", "length"} and data["reasons"]


def test_envs_lists_builtins(capsys):
    code, out, _ = run(capsys, "envs", "--json")
    assert code == 0 and {"finance", "arithmetic"} <= {r["name"] for r in json.loads(out)}


BAD = [
    (["tasks", "--env", "nope"], "unknown env 'nope'", "use one of"),
    (["reward", "score", "--task", "nope", "--completion", "-"], "unknown task id 'nope'", "grpolab tasks"),
    (["config", "--weights", "1,2"], "--weights expects 4", "for example"),
    (["config", "--weights", "a,b,c,d"], "not a number", "for example"),
    (["config", "--config", "/nonexistent.toml"], "config file not found", "check the path"),
    (["tools", "run", "calculator", "{bad json"], "not valid JSON", "pass an object"),
    (["tools", "run", "calculator", '{"expression": 5}'], "do not fit calculator's schema", "see `grpolab envs`"),
    (["tools", "run", "rm", "{}"], "unknown tool 'rm'", "use one of"),
    (["tasks", "--split", "test"], "unknown split", "use --split"),
]


@pytest.mark.parametrize("argv,problem,fix", BAD)
def test_bad_input_exits_2_with_one_line(capsys, argv, problem, fix):
    code, _, err = run(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and problem in lines[0] and fix in lines[0], err


@pytest.mark.parametrize(
    "toml,problem",
    [("[grpo]\nbeta = -1\n", "field 'grpo.beta'"), ("nonsense = 1\n", "unknown field 'nonsense'"),
     ("[reward.weights]\nstyle = 1.0\n", "unknown reward 'style'"), ("[grpo\n", "not valid TOML")],
)  # fmt: skip
def test_bad_config_fields_exit_2(capsys, tmp_path, toml, problem):
    path = tmp_path / "c.toml"
    path.write_text(toml)
    code, _, err = run(capsys, "config", "--config", str(path))
    assert code == 2 and problem in err and len(err.strip().splitlines()) == 1, err


def test_shipped_configs_validate():
    from pathlib import Path

    from grpolab.config import load_config

    configs = sorted((Path(__file__).parent.parent / "src" / "grpolab" / "configs").glob("*.toml"))
    assert {p.name for p in configs} >= {"demo.toml", "bfcl.toml", "code_hack.toml"}
    for path in configs:
        cfg = load_config(path)
        assert cfg.model == "smollm2"
        # the tool-calling recipes need a warm start (the base never calls a tool); code_hack needs none
        assert cfg.train.sft_steps > 0 or cfg.env == "code"
