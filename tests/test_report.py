"""The HTML report: built from a real tiny-model run, self-contained, rendered in headless Chromium."""

import re
import shutil
from pathlib import Path

import pytest

from grpolab.rundir import RunDir

pytestmark = pytest.mark.xdist_group("test_report")  # its module fixtures train a run: once, in one worker

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, grpolab_process, small_config):
    root = tmp_path_factory.mktemp("report")
    out = root / "run"
    proc = grpolab_process(
        "train", "--model", "tiny", "--steps", "2", "--out", str(out), "--quiet", "--config", str(small_config(root))
    )
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    return out


def test_report_is_written_and_self_contained(tiny_run):
    page = (tiny_run / "report.html").read_text()
    for needle in (
        "reward",
        "kl",
        "entropy",
        "tool_token_mass",
        "heldout/success",
        "Held-out evaluation",
        "Trajectories",
        "gameability probes",
        "dummy_tags",
        "What GRPO changed",
        "thought_words",
        "empty_thought",  # the shortcut table of the preflight
    ):
        assert needle in page, needle
    assert "<script" not in page
    assert not re.search(r"""(src|href)=["']https?:""", page)  # nothing loaded from the network
    assert page.count("<svg") >= 7


def test_report_renders_in_chromium_without_console_errors(tiny_run):
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (CI installs it)")
    ARTIFACTS.mkdir(exist_ok=True)
    errors = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 2000})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((tiny_run / "report.html").as_uri())
        assert page.locator("h1").inner_text().startswith("grpolab run")
        assert page.locator("svg").count() >= 7
        page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=False)
        changed = page.locator("h2", has_text="What GRPO changed")
        changed.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "report-what-changed.png"), full_page=False)
        browser.close()
    assert errors == []


def test_eval_and_compare_read_a_run(tiny_run, cli, tmp_path):
    import json

    code, out, _ = cli("eval", "--run", str(tiny_run), "--limit", "2", "--json")
    assert code == 0 and json.loads(out)["heldout/n"] == 2.0
    page = tmp_path / "compare.html"
    code, out, _ = cli("compare", "--run", str(tiny_run), "--limit", "2", "--json", "--html", str(page))
    data = json.loads(out)
    assert code == 0 and len(data["left"]["episodes"]) == len(data["right"]["episodes"]) == 2
    assert [e["task_id"] for e in data["left"]["episodes"]] == [e["task_id"] for e in data["right"]["episodes"]]
    assert "not verified" in page.read_text()
    # the random base never solves a task, and this run has no warm start to compare with instead: it says so
    assert data["left"]["name"] == "base" and "no SFT warm start" in " ".join(data["notes"])


def test_compare_against_a_base_that_never_solves_uses_the_runs_sft_start(
    tmp_path, cli, grpolab_process, small_config, monkeypatch
):
    import json

    import grpolab.engine.policy as policy  # where compare imports it from as it runs

    out = tmp_path / "run"
    config = str(small_config(tmp_path))
    proc = grpolab_process(
        "train", "--model", "tiny", "--steps", "1", "--sft-steps", "1", "--out", str(out), "--quiet", "--config", config
    )
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    applied = []
    real = policy.apply_warm_start
    monkeypatch.setattr(policy, "apply_warm_start", lambda m, c, p: applied.append(p) or real(m, c, p))
    code, out_text, _ = cli("compare", "--run", str(out), "--limit", "2", "--json")
    data = json.loads(out_text)
    # applied twice: as the run's own policy loads (`build_policy`), then by compare to the base it seeds
    assert code == 0 and data["left"]["name"] == "sft-start" and applied == [RunDir(out).warm_start_path] * 2
    assert "SFT-seeded start" in " ".join(data["notes"]) and len(data["left"]["episodes"]) == 2


EXTREME = ["1" + "0" * 400, "-" + "9" * 400, "1.7e308", "-1.7e308", "1e400", "NaN", "-Infinity", "[" * 900 + "]" * 900]
"""Raw JSON numbers a damaged or hand-edited run directory may hold (a 400-digit integer raised OverflowError,
+-1.7e308 made matplotlib raise) and a value nested deeper than the readers allow."""


@pytest.mark.parametrize(
    "bad", EXTREME, ids=["bigint", "-bigint", "1.7e308", "-1.7e308", "1e400", "nan", "-inf", "deep"]
)
def test_report_draws_what_it_can_and_names_the_rest(cli, tmp_path, run_with, bad):
    run = run_with(tmp_path / "run", bad, where=("metrics", "summary", "probes", "episodes"))
    code, out, err = cli("report", "--run", str(run))
    assert code == 0 and "wrote" in out, err[-800:]
    page = (run / "report.html").read_text()
    assert "<h2>Skipped</h2>" in page and "metrics.jsonl" in err and "preflight.json" in err, err
    assert "<svg" in page and "1700000" not in page and "10000000000" not in page


def test_text_a_run_puts_in_a_chart_is_escaped():
    """Chart text is SVG <text> (the browser draws it): a reward named with markup shows as text, never as markup."""
    from grpolab.report.charts import svg_chart

    key = "<img src=x onerror=alert(1)>"
    svg = svg_chart("<script>alert(1)</script>", [key], [{"step": 1, key: 1.0}, {"step": 2, key: 2.0}], [1])
    assert "<img" not in svg and "<script" not in svg
    assert "&lt;img src=x onerror=alert(1)&gt;" in svg and "&lt;script&gt;" in svg


def test_a_chart_of_values_matplotlib_cannot_place_is_a_message():
    from grpolab.report.charts import svg_chart

    rows = [{"step": 1, "kl": 1.7e308}, {"step": 2, "kl": -1.7e308}]  # the axis range overflows
    assert "kl: cannot be drawn" in svg_chart("kl", ["kl"], rows, [])
    assert svg_chart("kl", ["kl"], [{"step": 1, "kl": 0.1}], []).startswith("<svg")
