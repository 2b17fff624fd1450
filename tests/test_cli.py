"""CLI conventions: --json output, and exit 2 with one line naming the problem and the fix for bad input."""

import json

import pytest


def test_tools_run_prints_the_response(cli):
    code, out, _ = cli(
        "tools", "run", "--env", "finance", "calculator", '{"expression": "(137-120)/120*100"}', "--json"
    )
    assert code == 0 and json.loads(out) == {"result": 14.1666666667}


def test_tasks_json_has_the_fields(cli):
    code, out, _ = cli("tasks", "--env", "finance", "--split", "heldout", "--json", "--limit", "2")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 2
    assert set(rows[0]) >= {"id", "prompt", "answer", "reference_transcript"}


def test_reward_score_json(cli, tmp_path, finance):
    path = tmp_path / "t.txt"
    path.write_text(finance.reference_transcript(finance.task("pct_change-ACME-Q3")))
    code, out, _ = cli(
        "reward",
        "score",
        "--env",
        "finance",
        "--task",
        "pct_change-ACME-Q3",
        "--completion",
        str(path),
        "--weights",
        "1,1.5,3,0",
        "--json",
    )
    data = json.loads(out)
    assert code == 0 and data["total"] == 5.5
    assert data["breakdown"] == "F:+1.0 | S:+1.5 | C:+3.0 | L:+0.0"
    assert set(data["components"]) == {"format", "schema", "completion", "length"} and data["reasons"]


def test_envs_lists_builtins(cli):
    code, out, _ = cli("envs", "--json")
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
def test_bad_input_exits_2_with_one_line(cli, argv, problem, fix):
    code, _, err = cli(*argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and problem in lines[0] and fix in lines[0], err


@pytest.mark.parametrize(
    "toml,problem",
    [
        ("[grpo]\nbeta = -1\n", "field 'grpo.beta'"),
        ("nonsense = 1\n", "unknown field 'nonsense'"),
        ("[reward.weights]\nstyle = 1.0\n", "unknown reward 'style'"),
        ("[grpo\n", "not valid TOML"),
    ],
)
def test_bad_config_fields_exit_2(cli, tmp_path, toml, problem):
    path = tmp_path / "c.toml"
    path.write_text(toml)
    code, _, err = cli("config", "--config", str(path))
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


def test_help_of_config_options_is_the_config_field_docstring(cli):
    from grpolab.config import field_doc

    code, out, _ = cli("train", "--help")
    flat = " ".join(out.split())
    assert code == 0 and field_doc("train.sft_steps")[:40] in flat and "(train.sft_steps)" in flat


def test_the_demo_finds_its_config_and_draws_sparklines():
    from grpolab.cli.train import convergence_lines
    from grpolab.config import DEMO_CONFIG, load_config

    assert load_config(DEMO_CONFIG).train.steps > 0
    lines = convergence_lines([{"step": 1, "reward/mean": 0.5, "kl": 0.0}, {"step": 2, "reward/mean": 2.0, "kl": 0.01}])
    assert lines[1].split()[1] == "▁█" and "0.5 -> 2" in lines[1]


MARKUP = "[/x] [bold]loud[/bold] [red]"
"""Text that rich would read as markup: it must print as written."""


def test_config_prints_user_values_literally(cli):
    code, out, _ = cli("config", "--model", MARKUP)
    assert code == 0 and MARKUP in out and "[reward]" in out


def test_compare_prints_model_text_literally(cli, monkeypatch):
    import grpolab.engine.evaluate
    import grpolab.engine.policy
    import grpolab.metrics
    from grpolab.config import load_config

    row = {
        "task_id": "t[/x]",
        "prompt": f"prompt {MARKUP}",
        "answer": "[bold]",
        "text": f"answer {MARKUP}",
        "breakdown": "F:+1.0",
        "reasons": {"completion": f"reason {MARKUP}"},
    }
    monkeypatch.setattr(grpolab.engine.policy, "load_policy", lambda spec, cfg: (None, None, load_config()))
    monkeypatch.setattr(grpolab.metrics, "episode_row", lambda e: e)
    monkeypatch.setattr(grpolab.engine.evaluate, "evaluate", lambda *a: ({"heldout/success": 0.5}, [row]))
    code, out, err = cli("compare", "--run", "[/x]run")
    flat = out.replace("\n", " ")
    assert code == 0, err
    for text in ("t[/x]", f"prompt {MARKUP}", "(expected [bold])", "[/x]run", "[bold]loud[/bold]"):
        assert text in flat, (text, out)


def test_chat_prints_model_text_literally(cli, monkeypatch):
    from grpolab.agent.chat import ChatEvent, ChatSession

    class Session:
        def send(self, question):
            yield ChatEvent("thought", MARKUP)
            yield ChatEvent("tool_call", name="calc", arguments={"expression": MARKUP})
            yield ChatEvent("tool_response", response={"error": MARKUP})
            yield ChatEvent("answer", f"{question} {MARKUP}")

    monkeypatch.setattr(ChatSession, "from_config", classmethod(lambda cls, cfg, **opts: Session()))
    code, out, err = cli("chat", "--model", "tiny", "-q", "[/q] question")
    assert code == 0, err
    assert out.count(MARKUP) >= 2 and "[/q] question" in out


def test_check_prints_a_model_path_literally(capsys):
    from grpolab.cli.trust import _print

    learn = {"prompts": 1, "group_size": 2, "reward/mean": 0.0, "tool_call_prob": 0.0, "frac_zero_std": 1.0}
    report = {
        "env": "finance",
        "model": f"models/{MARKUP}",
        "weights": {"format": 1.0},
        "dry_run": {"references": [{"task_id": "t", "total": 1.0, "breakdown": "F:+1.0"}]},
        "probes": [],
        "gameable": [f"gameable: {MARKUP}"],
        "learnability": {**learn, "pass_at_g": 0, "all_pass": [], "all_fail": [], "recommendation": "ok"},
    }
    _print(report)
    out = capsys.readouterr().out
    assert f"model=models/{MARKUP}" in out and f"gameable: {MARKUP}" in out
