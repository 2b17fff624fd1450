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
    import grpolab.cli.results
    from grpolab.config import load_config

    row = {
        "task_id": "t[/x]",
        "prompt": f"prompt {MARKUP}",
        "answer": "[bold]",
        "text": f"answer {MARKUP}",
        "breakdown": "F:+1.0",
        "reasons": {"completion": f"reason {MARKUP}"},
    }
    # compare imports the engine when it runs (`import grpolab.cli` loads no torch): patched where it lives
    monkeypatch.setattr("grpolab.engine.policy.load_policy", lambda spec, cfg: (None, None, load_config()))
    monkeypatch.setattr(grpolab.cli.results, "episode_row", lambda e: e)
    monkeypatch.setattr("grpolab.engine.evaluate.evaluate", lambda *a: ({"heldout/success": 0.5}, [row]))
    code, out, err = cli("compare", "--run", "[/x]run")
    flat = out.replace("\n", " ")
    assert code == 0, err
    for text in ("t[/x]", f"prompt {MARKUP}", "(expected [bold])", "[/x]run", "[bold]loud[/bold]"):
        assert text in flat, (text, out)


def test_compare_html_escapes_the_names_it_titles(cli, monkeypatch, tmp_path):
    """`--run` and `--against` are user text: in the page's title and heading they are text, never markup."""
    import grpolab.cli.results
    from grpolab.config import load_config

    row = {"task_id": "t", "prompt": "p", "answer": "1", "text": "x", "breakdown": "F:+1.0"}
    row["reasons"] = {"completion": "r"}
    # compare imports the engine when it runs (`import grpolab.cli` loads no torch): patched where it lives
    monkeypatch.setattr("grpolab.engine.policy.load_policy", lambda spec, cfg: (None, None, load_config()))
    monkeypatch.setattr(grpolab.cli.results, "episode_row", lambda e: e)
    monkeypatch.setattr("grpolab.engine.evaluate.evaluate", lambda *a: ({"heldout/success": 0.5}, [row]))
    page = tmp_path / "c.html"
    code, _, err = cli("compare", "--run", "<img src=x onerror=alert(1)>", "--against", "<b>base", "--html", str(page))
    assert code == 0, err
    text = page.read_text()
    assert "<img" not in text and "<b>base" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text and "&lt;b&gt;base" in text


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
    from grpolab.cli.preflight import _print

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


# ---- every command that prints model, user or data text prints it as written (rich markup is off by default) ----

LOUD = "[bold]x :o:"
"""Markup that would not crash but would silently lose its brackets, and an emoji code rich would replace."""


def literal(text: str, out: str) -> bool:
    """Whether `text` is in `out` as written (rich may wrap long lines)."""
    return text in out or text in " ".join(out.split()) or text in out.replace("\n", "")


@pytest.fixture()
def wide(monkeypatch):
    """The CLI's consoles 1,000 columns wide: table cells and long paths stay on one line."""
    from grpolab.cli.options import console, err_console

    for c in (console, err_console):
        monkeypatch.setattr(c, "width", 1000)


def bfcl_file(folder, text: str):
    """A BFCL question file (irrelevance tasks, no answers needed) whose ids, categories, question and function
    description hold `text`."""
    rows = [
        {
            "id": f"live_{kind}{text}_0",
            "question": [[{"role": "user", "content": f"question {text}"}]],
            "function": [
                {"name": "lookup", "description": f"d {text}", "parameters": {"type": "dict", "properties": {}}}
            ],
        }
        for kind in ("irrelevance", "relevance")
    ]
    path = folder / "markup.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = folder / "markup.toml"
    config.write_text(f'env = "bfcl"\ndata = [{json.dumps(str(path))}]\n')
    return path, config


def test_tasks_and_eval_print_bfcl_data_literally(cli, tmp_path, wide):
    path, config = bfcl_file(tmp_path, MARKUP)
    code, out, err = cli("tasks", "--config", str(config), "--split", "heldout")
    assert code == 0 and literal(f"question {MARKUP}", out) and literal(f"live_irrelevance{MARKUP}_0", out), err
    code, out, err = cli("eval", "--env", "bfcl", "--data", str(path), "--model", "tiny")  # per-category keys
    assert code == 0 and literal(f"heldout/success/live_relevance{MARKUP}", out), err


def test_envs_prints_a_description_literally(cli, monkeypatch, wide):
    import grpolab.cli

    real = grpolab.cli.get_env

    def get_env(name):
        env = real(name)
        env.description = f"{env.description} {MARKUP}"
        return env

    monkeypatch.setattr(grpolab.cli, "get_env", get_env)
    code, out, err = cli("envs")
    assert code == 0 and literal(MARKUP, out), err


def test_tools_and_reward_score_print_their_text_literally(cli, tmp_path, finance):
    code, out, err = cli("tools", "run", "--env", "finance", "calculator", json.dumps({"expression": MARKUP}))
    assert code == 0 and literal(MARKUP, out), err
    path = tmp_path / "t.txt"
    path.write_text(f"<thought>{MARKUP} {LOUD}</thought>The answer is {MARKUP}")
    code, out, err = cli(
        "reward", "score", "--env", "finance", "--task", "pct_change-ACME-Q3", "--completion", str(path)
    )
    assert code == 0 and "no tool call" in out, err


def test_outputs_the_user_names_are_printed_literally(cli, tmp_path, run_with, monkeypatch):
    folder = tmp_path / f"{MARKUP} {LOUD}"  # "[/x]" makes a folder "[" holding one "x] [bold]loud[" ...
    folder.mkdir(parents=True)
    code, out, err = cli("export-trl", "-o", str(folder / "train.py"))
    assert code == 0 and literal(str(folder / "train.py"), out), err
    run = run_with(folder / "run")
    code, out, err = cli("report", "--run", str(run))
    assert code == 0 and literal(str(run / "report.html"), out), err


def test_train_demo_and_export_model_print_paths_literally(cli, tmp_path, monkeypatch):
    import types

    out_dir = tmp_path / f"{MARKUP} {LOUD}"
    out_dir.parent.mkdir(parents=True, exist_ok=True)  # '[/x]' holds a slash; no folder is made for the user
    fake = types.SimpleNamespace(
        path=out_dir,
        eval_summary=lambda: {"base": {}, "0": {"heldout/n": 2.0}, "1": {}},
        eval_labels=lambda: ["base", "0", "1"],
        metrics=lambda: [],
        sft=lambda: None,
        has_steps=lambda: False,
    )
    monkeypatch.setattr("grpolab.run.loop.train", lambda cfg, out, **kw: fake)  # imported by train, demo as they run
    for argv in (("train", "--model", "tiny", "--out", str(out_dir)), ("demo", "--out", str(out_dir))):
        code, out, err = cli(*argv)
        assert code == 0 and literal(f"run dir: {out_dir}", out), (argv, err)
    result = types.SimpleNamespace(
        out=out_dir,
        step=1,
        folder_bytes=1,
        seconds=1.0,
        gguf=out_dir / "m.gguf",
        gguf_type="f32",
        gguf_bytes=1,
        check=None,
        to_json=dict,
    )
    monkeypatch.setattr("grpolab.agent.export.export_run", lambda *a, **k: result)
    code, out, err = cli("export-model", "--run", str(tmp_path), "--out", str(out_dir))
    assert code == 0 and literal(f"wrote {out_dir}", out) and literal(str(out_dir / "m.gguf"), out), err


def test_errors_quote_user_text_literally(cli, tmp_path):
    for argv, quoted in (
        (("tasks", "--env", MARKUP), MARKUP),
        (("simulate", "--calibrate", str(tmp_path / MARKUP)), MARKUP),
        (("reward", "score", "--task", MARKUP, "--completion", "-"), MARKUP),
    ):
        code, _, err = cli(*argv)
        assert code == 2 and literal(quoted, err), (argv, err)


def test_check_prints_probe_text_literally(capsys, wide):
    from grpolab.cli.preflight import _print

    learn = {"prompts": 1, "group_size": 2, "reward/mean": 0.0, "tool_call_prob": 0.0, "frac_zero_std": 1.0}
    probe = {"probe": f"p{LOUD}", "task_id": f"t{MARKUP}", "score": 1.0, "honest": 2.0, "margin": 1.0, "gameable": 0}
    shortcut = {"shortcut": f"s{LOUD}", "task_id": f"u{MARKUP}", "score": 1.0, "honest": 1.0, "margin": 0.0}
    report = {
        "env": "bfcl",
        "model": "tiny",
        "weights": {"format": 1.0},
        "dry_run": {"references": [{"task_id": f"ref{MARKUP}", "total": 1.0, "breakdown": f"F:{LOUD}"}]},
        "probes": [probe],
        "gameable": [],
        "shortcuts": [{**shortcut, "paid": True, "paying": {f"c{LOUD}": 0.1}}],
        "shortcuts_paid": [f"paid {MARKUP}"],
        "isolation": {"level": "weak", "summary": f"weak: no seccomp ({MARKUP})"},
        "learnability": {**learn, "pass_at_g": 0, "all_pass": [], "all_fail": [], "recommendation": f"r {MARKUP}"},
    }
    _print(report)
    out = capsys.readouterr().out
    for text in (
        f"ref{MARKUP}",
        f"F:{LOUD}",
        f"p{LOUD}",
        f"t{MARKUP}",
        f"s{LOUD}",
        f"u{MARKUP}",
        f"c{LOUD}",
        f"paid {MARKUP}",
        f"no seccomp ({MARKUP})",
        f"r {MARKUP}",
    ):
        assert literal(text, out), (text, out)
