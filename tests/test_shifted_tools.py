"""`finance_shifted`: the finance tasks behind renamed tools, renamed arguments and another response layout.

The transcripts here are literal strings, not rendered from the environment's references: they pin the tool names,
argument names and response layouts a policy meets, and the scores the normal scorer gives them."""

import json

import pytest

from grpolab.envs import env_names, get_env
from grpolab.rewards.score import score_transcript

ACME_FILING = (
    '{"status": 200, "filing": {"ticker": "ACME", "company": "Acme Corp", "period": "Q3 2025", '
    '"revenue_usd_billions": 4.2, "eps": 1.31, "eps_consensus": 1.18, "eps_vs_consensus": "beat", '
    '"baseline_price": 120.0, "close_price": 137.0}}'
)

SHIFTED_ACME_PCT_CHANGE = (
    "<thought>I need the ACME Q3 filing, then (close - baseline) / baseline * 100.</thought>\n"
    "<tool_call>\n"
    '{"name": "lookup_filing", "arguments": {"company_and_period": "ACME Q3"}}\n'
    "</tool_call>\n"
    "<tool_response>\n" + ACME_FILING + "\n</tool_response>\n"
    "<tool_call>\n"
    '{"name": "evaluate_math", "arguments": {"formula": "round((137.0 - 120.0) / 120.0 * 100, 2)"}}\n'
    "</tool_call>\n"
    "<tool_response>\n"
    '{"value": 14.17}\n'
    "</tool_response>\n"
    "ACME stock changed by 14.17% in Q3 (from $120.00 to $137.00)."
)
"""A correct episode on the shifted tools; the answer restates the looked-up prices, which the verifier must read
from the new layout to tell them from the result."""

ORIGINAL_NAMES_WITH_REAL_ERRORS = (
    "<thought>I need the ACME Q3 report, then (close - baseline) / baseline * 100.</thought>\n"
    "<tool_call>\n"
    '{"name": "financial_search", "arguments": {"query": "ACME Q3"}}\n'
    "</tool_call>\n"
    "<tool_response>\n"
    '{"error": "unknown tool \'financial_search\'; available: lookup_filing, evaluate_math"}\n'
    "</tool_response>\n"
    "<tool_call>\n"
    '{"name": "calculator", "arguments": {"expression": "round((137.00 - 120.00) / 120.00 * 100, 2)"}}\n'
    "</tool_call>\n"
    "<tool_response>\n"
    '{"error": "unknown tool \'calculator\'; available: lookup_filing, evaluate_math"}\n'
    "</tool_response>\n"
    "ACME's stock changed by 14.17% in Q3 (from $120.00 to $137.00)."
)
"""A policy trained on `finance` calling its old tools on the shifted env, with the errors the env really gives."""

ORIGINAL_FINANCE_TRANSCRIPT = (
    "<thought>I need the ACME Q3 report, then (close - baseline) / baseline * 100.</thought>\n"
    "<tool_call>\n"
    '{"name": "financial_search", "arguments": {"query": "ACME Q3"}}\n'
    "</tool_call>\n"
    "<tool_response>\n"
    '{"status": 200, "result": "ACME (Acme Corp) Q3 2025 report: revenue $4.2B; EPS $1.31 vs estimate $1.18, '
    'beating estimates. Baseline price $120.00, close $137.00."}\n'
    "</tool_response>\n"
    "<tool_call>\n"
    '{"name": "calculator", "arguments": {"expression": "round((137.00 - 120.00) / 120.00 * 100, 2)"}}\n'
    "</tool_call>\n"
    "<tool_response>\n"
    '{"result": 14.17}\n'
    "</tool_response>\n"
    "ACME's stock changed by 14.17% in Q3 (from $120.00 to $137.00)."
)
"""The original env's correct episode, word for word: on the shifted env its responses are not the real ones."""


@pytest.fixture(scope="module")
def shifted():
    return get_env("finance_shifted")


def _score(env, text):
    return score_transcript(env, env.task("pct_change-ACME-Q3"), text, count_tokens=len)


def test_finance_shifted_is_a_builtin_env(shifted):
    from grpolab.config import load_config
    from grpolab.envs import env_for
    from grpolab.envs.finance import FinanceEnv

    assert "finance_shifted" in env_names()
    assert shifted.name == "finance_shifted" and isinstance(shifted, FinanceEnv)
    assert env_for(load_config(None, {"env": "finance_shifted"})).name == "finance_shifted"
    assert {t.kind for t in get_env("finance_shifted", ["pct_change"]).tasks("train")} == {"pct_change"}


def test_a_correct_shifted_transcript_gets_full_marks(shifted):
    s = _score(shifted, SHIFTED_ACME_PCT_CHANGE)
    assert s.components["completion"] == 1.0, s.reasons
    assert s.components["schema"] == 1.0 and s.components["format"] == 1.0, s.reasons


def test_the_same_transcript_gets_no_credit_on_the_original_env(finance):
    s = _score(finance, SHIFTED_ACME_PCT_CHANGE)
    assert s.components["schema"] == 0.0 and "unknown tool 'lookup_filing'" in s.reasons["schema"]
    assert s.components["completion"] == 0.0


@pytest.mark.parametrize("text", [ORIGINAL_NAMES_WITH_REAL_ERRORS, ORIGINAL_FINANCE_TRANSCRIPT])
def test_the_original_tool_names_get_no_credit_on_the_shifted_env(shifted, text):
    s = _score(shifted, text)
    assert s.components["schema"] == 0.0 and "unknown tool 'financial_search'" in s.reasons["schema"]
    assert s.components["completion"] == 0.0, s.reasons


def test_the_errors_in_the_literal_transcript_are_the_real_ones(shifted):
    assert shifted.toolbox.execute("financial_search", {"query": "ACME Q3"}) == json.loads(
        '{"error": "unknown tool \'financial_search\'; available: lookup_filing, evaluate_math"}'
    )
    s = _score(shifted, ORIGINAL_NAMES_WITH_REAL_ERRORS)
    assert "fabricated" not in s.reasons["completion"] and "not grounded" in s.reasons["completion"]


def test_shifted_search_keeps_the_404_and_300_rules(shifted):
    def lookup(text):
        return shifted.toolbox.execute("lookup_filing", {"company_and_period": text})

    assert lookup("ACME Q3") == json.loads(ACME_FILING)
    unknown = lookup("ZZZZ Q3 revenue stock price")
    assert unknown["status"] == 404 and "ticker" in unknown["message"] and "filing" not in unknown
    both = lookup("ACME FALC Q3")
    assert both["status"] == 300 and "ACME" in both["message"] and "FALC" in both["message"]
    assert lookup("")["status"] == 404
    assert lookup("Falcon Q3")["filing"]["ticker"] == "FALC"  # a company's first name still works
    old_argument = shifted.toolbox.execute("lookup_filing", {"query": "ACME Q3"})
    assert "invalid arguments for lookup_filing" in old_argument["error"]


def test_shifted_calculator_does_the_same_maths_under_another_key(shifted):
    def math(formula):
        return shifted.toolbox.execute("evaluate_math", {"formula": formula})

    assert math("(137-120)/120*100") == {"value": 14.1666666667}
    assert math("round((137-120)/120*100, 2)") == {"value": 14.17}
    assert set(math("__import__('os')")) == {"error"}


def test_the_prompt_lists_the_new_names_and_no_old_one(shifted, finance):
    task = shifted.task("pct_change-ACME-Q3")
    prompt = shifted.system_prompt(task)
    for new in ('"lookup_filing"', '"company_and_period"', '"evaluate_math"', '"formula"'):
        assert new in prompt
    for old in ("financial_search", "calculator", '"query"', '"expression"', '"result"'):
        assert old not in prompt, old
    old_descriptions = [s["function"]["description"] for s in finance.toolbox.schemas]
    new_descriptions = [s["function"]["description"] for s in shifted.toolbox.schemas]
    assert not set(old_descriptions) & set(new_descriptions)
    assert shifted.instructions != finance.instructions and "lookup_filing" in shifted.instructions


def test_tasks_and_truth_are_the_original_ones(shifted, finance):
    for split in ("train", "heldout"):
        old, new = finance.tasks(split), shifted.tasks(split)
        assert [(t.id, t.prompt, t.answer, t.truth) for t in new] == [(t.id, t.prompt, t.answer, t.truth) for t in old]


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_every_shifted_reference_transcript_scores_full_marks_with_the_new_names(shifted, split):
    for task in shifted.tasks(split):
        text = shifted.reference_transcript(task)
        assert "financial_search" not in text and "calculator" not in text, task.id
        s = score_transcript(shifted, task, text, count_tokens=len)
        assert s.components["format"] == s.components["schema"] == s.components["completion"] == 1.0, s.reasons


def test_tasks_cli_lists_the_shifted_references(cli):
    code, out, err = cli("tasks", "--env", "finance_shifted", "--split", "heldout", "--json", "--limit", "1")
    assert code == 0, err
    assert '"lookup_filing"' in json.loads(out)[0]["reference_transcript"]


def test_eval_with_a_model_on_the_shifted_env(cli):
    code, out, err = cli("eval", "--env", "finance_shifted", "--model", "tiny", "--limit", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["env"] == "finance_shifted"


@pytest.fixture()
def fake_run(monkeypatch, tmp_path):
    """`eval --run` on a run trained on `finance` (its config.json; the tiny model stands in for its checkpoint);
    the policy's loading and the env that evaluate is handed are recorded."""
    import grpolab.engine.evaluate
    import grpolab.engine.policy
    from grpolab.config import load_config
    from grpolab.models import load_model

    cfg = load_config(None, {"model": "tiny", "env": "finance", "rollout.max_new_tokens": 12})
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(cfg.model_dump_json())
    seen: list[str] = []

    def load_run_policy(path, notes):
        seen.append("policy loaded")
        return (*load_model("tiny", seed=0), cfg, 2)

    # `eval` imports these as it runs: patched where they live
    monkeypatch.setattr(grpolab.engine.policy, "load_run_policy", load_run_policy)
    real = grpolab.engine.evaluate.evaluate

    def evaluate(model, tokenizer, env, cfg, split, limit):
        seen.append(env.name)
        return real(model, tokenizer, env, cfg, split, limit)

    monkeypatch.setattr(grpolab.engine.evaluate, "evaluate", evaluate)
    return run, seen


def test_eval_of_a_run_honours_env(cli, fake_run):
    run, seen = fake_run
    code, out, err = cli("eval", "--run", str(run), "--env", "finance_shifted", "--limit", "1", "--json")
    assert code == 0, err
    assert seen == ["policy loaded", "finance_shifted"] and json.loads(out)["env"] == "finance_shifted"
    assert "trained on finance" in err and "finance_shifted" in err
    code, out, _ = cli("eval", "--run", str(run), "--limit", "1", "--json")  # without --env: the run's own
    assert code == 0 and seen[-1] == "finance" and json.loads(out)["env"] == "finance"


def test_eval_of_a_run_on_an_unknown_env_exits_2_before_loading_the_policy(cli, fake_run):
    run, seen = fake_run
    code, _, err = cli("eval", "--run", str(run), "--env", "nope", "--limit", "1")
    assert code == 2 and "unknown env 'nope'" in err and seen == []
    code, _, err = cli("eval", "--run", str(run), "--env", "arithmetic", "--category", "pct_change", "--limit", "1")
    assert code == 2 and "unknown task kind 'pct_change' for env 'arithmetic'" in err and seen == []


def test_eval_of_a_run_refuses_flags_its_own_config_overrules(cli, fake_run):
    """--model, --seed, --weights and --config would be dropped silently under the run's own config: exit 2."""
    run, seen = fake_run
    code, _, err = cli("eval", "--run", str(run), "--model", "tiny", "--seed", "3", "--limit", "1")
    assert code == 2 and "--model, --seed cannot be combined with --run" in err and "drop --model, --seed" in err
    assert seen == []


def test_eval_of_a_run_on_an_env_without_its_task_kinds_uses_all_of_that_envs_tasks(cli, fake_run):
    """A demo run (task_kinds = pct_change) checked for retention on `capitals`: the run's kinds are not that env's,
    so all of its tasks are evaluated; on finance_shifted (which has them) the run's kinds still carry over."""
    run, seen = fake_run
    data = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**data, "task_kinds": ["pct_change"]}))
    code, out, err = cli("eval", "--run", str(run), "--env", "capitals", "--limit", "1", "--json")
    assert code == 0, err
    assert seen[-1] == "capitals" and json.loads(out)["env"] == "capitals"
