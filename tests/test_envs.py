import re
import tomllib
from pathlib import Path

import pytest

from grpolab.envs import BUILTIN, get_env
from grpolab.envs.base import Evidence
from grpolab.envs.numeric import extract_numbers, numeric_verdict
from grpolab.errors import UserError
from grpolab.rewards.score import score_transcript


def _full_marks(env, task):
    s = score_transcript(env, task, env.reference_transcript(task), count_tokens=len)
    return s.components["format"] == s.components["schema"] == s.components["completion"] == 1.0, s.reasons


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_every_finance_reference_transcript_scores_full_marks(finance, split):
    for task in finance.tasks(split):
        ok, reasons = _full_marks(finance, task)
        assert ok, (task.id, reasons)


def test_every_arithmetic_reference_transcript_scores_full_marks(arithmetic):
    for task in arithmetic.tasks("train")[:50] + arithmetic.tasks("heldout"):
        ok, reasons = _full_marks(arithmetic, task)
        assert ok, (task.id, reasons)


def test_finance_splits_are_disjoint_by_company_and_large_enough(finance):
    companies = {s: {t.id.split("-")[1] for t in finance.tasks(s)} for s in ("train", "heldout")}
    assert not companies["train"] & companies["heldout"]
    assert len(companies["train"]) + len(companies["heldout"]) >= 40
    assert len(companies["heldout"]) / (len(companies["train"]) + len(companies["heldout"])) >= 0.2
    assert {t.kind for t in finance.tasks("train")} == {"pct_change", "revenue_growth", "eps_surprise"}


def test_finance_is_deterministic(finance):
    again = get_env("finance")
    assert [t.id for t in again.tasks("heldout")] == [t.id for t in finance.tasks("heldout")]
    assert again.financial_search("ACME Q3") == finance.financial_search("ACME Q3")


def test_search_finds_the_seed_example(finance):
    hit = finance.financial_search("ACME Q3 earnings release stock price")
    assert hit["status"] == 200
    assert "Baseline price $120.00, close $137.00" in hit["result"] and "revenue $4.2B" in hit["result"]
    assert finance.financial_search("zzzz")["status"] == 404
    assert finance.financial_search("")["status"] == 404


def test_search_answers_only_for_a_company_the_query_names(finance):
    """A query that names no known company gets a 404, not the best-ranked page of some other company (every page
    shares words like 'Q3' and 'revenue'); two companies at once are ambiguous; a company's first name works."""
    unknown = finance.financial_search("ZZZZ Q3 revenue stock price")
    assert unknown["status"] == 404 and "ticker" in unknown["result"]
    falc = finance.report("FALC", 3)
    assert finance.financial_search("Falcon Q3") == {"status": 200, "result": falc.text}
    assert finance.financial_search("FALC Falcon Q3")["result"] == falc.text
    both = finance.financial_search("ACME FALC Q3")
    assert both["status"] == 300 and "ACME" in both["result"] and "FALC" in both["result"]


def test_arithmetic_splits_are_disjoint(arithmetic):
    train = {t.meta["expression"] for t in arithmetic.tasks("train")}
    heldout = {t.meta["expression"] for t in arithmetic.tasks("heldout")}
    assert not train & heldout


def test_unknown_task_and_kind_are_user_errors(finance):
    with pytest.raises(UserError, match="unknown task id"):
        finance.task("nope")
    with pytest.raises(UserError, match="unknown task kind"):
        get_env("finance", ["nope"])
    assert {t.kind for t in get_env("finance", ["pct_change"]).tasks("train")} == {"pct_change"}


def test_extract_numbers():
    assert extract_numbers("rose $1,234.50 (14.17%) in Q3, -2 and .5") == [1234.5, 14.17, -2.0, 0.5]


EV = Evidence(prompt="", calls=[], responses=[])


@pytest.mark.parametrize(
    "answer,truth,ok,why",
    [
        ("It changed by 14.17% (from $120.00 to $137.00).", 14.1667, True, "correct"),
        ("It changed by 14.1667%.", 14.1667, True, "correct"),
        ("It changed by 14.2%.", 14.1667, False, "does not match"),
        ("Maybe 14.17% or 15%.", 14.1667, False, "hedged"),
        ("It fell by 5.23%.", -5.2333, True, "correct"),
        ("It rose by 5.23%.", -5.2333, False, "wrong direction"),
        ("It changed by -5.23%.", -5.2333, True, "correct"),
        ("No idea.", 1.0, False, "no result"),
    ],
)
def test_numeric_verdict(answer, truth, ok, why):
    v = numeric_verdict(answer, truth, context=[120.0, 137.0], grounding=None)
    assert v.passed is ok and why in v.reason


def test_numeric_verdict_requires_grounding():
    v = numeric_verdict("It changed by 14.17%.", 14.1667, context=[], grounding=[120.0, 137.0])
    assert not v.passed and "not grounded" in v.reason
    assert numeric_verdict("It changed by 14.17%.", 14.1667, context=[], grounding=[14.1666666667]).passed


def test_each_builtin_envs_packages_are_in_its_extra_and_in_dev():
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    core = {_dist(r) for r in project["dependencies"]}
    dev = re.search(r"grpolab\[([\w,]+)\]", " ".join(extras["dev"])).group(1).split(",")
    for name, entry in BUILTIN.items():
        if entry.needs:
            assert entry.extra in extras, (name, entry.extra)
            assert set(entry.needs.values()) <= {_dist(r) for r in extras[entry.extra]}, name
            assert not set(entry.needs.values()) & core, f"{name}'s packages are core dependencies again"
        assert not entry.extra or entry.extra in dev, f"make setup (.[dev]) would not install {entry.extra}"


def _dist(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower()


def test_env_classes_are_still_importable_from_the_package():
    from grpolab.envs import CodeEnv, FinanceEnv
    from grpolab.envs.code.env import CodeEnv as code_env
    from grpolab.envs.finance import FinanceEnv as finance_env

    assert FinanceEnv is finance_env and CodeEnv is code_env
    with pytest.raises(ImportError):
        exec("from grpolab.envs import NoSuchEnv", {})
