"""The web lab: artifact views, background runs, and the page driven in Debian's headless chromium."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("gradio")

from grpolab.config import load_config  # noqa: E402
from grpolab.lab import jobs, views  # noqa: E402
from grpolab.rundir import RunDir  # noqa: E402

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory, grpolab_process, small_config):
    root = tmp_path_factory.mktemp("labruns")
    proc = grpolab_process(
        "train",
        "--model",
        "tiny",
        "--steps",
        "2",
        "--out",
        str(root / "tiny"),
        "--quiet",
        "--config",
        str(small_config(root)),
    )
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    (root / "broken").mkdir()
    (root / "broken" / "config.json").write_text("{not json")
    (root / "half").mkdir()
    (root / "half" / "config.json").write_text(json.dumps({"env": "finance", "model": "tiny"}))
    (root / "half" / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 1.0}\ngarbage line\n{"step": "x"}\n')
    return root


def test_views_turn_malformed_run_dirs_into_messages(runs_root, tmp_path):
    broken = views.load_run(runs_root / "broken")
    assert not broken.ok and "not valid JSON" in views.run_summary(broken)
    missing = views.load_run(tmp_path / "nope")
    assert "not a directory" in views.run_summary(missing)
    half = views.load_run(runs_root / "half")
    assert half.ok and [r["step"] for r in half.metrics] == [1]
    assert "No held-out evaluation" in views.run_summary(half)
    assert "no held-out evaluations" in views.episode_pair(half, "x", None)
    good = views.load_run(runs_root / "tiny")
    assert "<svg" in views.chart(good.metrics, "t") and "lab-card" in views.run_cards(good)
    tid = views.task_ids(good)[0]
    assert "<pre>" in views.episode_pair(good, tid, good.eval_labels()[-1])


def test_config_toml_reads_back_equal():
    cfg = load_config(
        None,
        {
            "model": "tiny",
            "grpo.beta": 0.3,
            "task_kinds": ["pct_change"],
            "reward.weights": {"format": 2.0, "schema": 1.0, "completion": 3.0, "length": -0.1},
        },
    )
    import tomllib

    assert load_config(None, tomllib.loads(jobs.config_toml(cfg))) == cfg


def test_a_run_started_in_the_background_stops_on_request_and_keeps_its_checkpoint(tmp_path):
    cfg = load_config(
        None,
        {
            "model": "tiny",
            "env": "arithmetic",
            "rollout.group_size": 2,
            "rollout.max_new_tokens": 8,
            "train.steps": 200,
            "train.eval_limit": 2,
            "train.eval_every": 0,
            "train.checkpoint_every": 100,
        },
    )
    out = jobs.start(cfg, tmp_path, "bg")
    deadline = time.time() + 240
    while time.time() < deadline and not (out / "metrics.jsonl").is_file():
        time.sleep(0.5)
    assert jobs.running(tmp_path, "bg"), (tmp_path / ".bg.log").read_text()
    assert "stop requested" in jobs.stop(tmp_path, "bg")
    while time.time() < deadline and jobs.running(tmp_path, "bg"):
        time.sleep(0.5)
    assert not jobs.running(tmp_path, "bg")
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps and max(steps) < 200
    assert RunDir(out).checkpoints()[-1][0] == max(steps)  # the step it stopped at was checkpointed
    assert not RunDir(out).stop_requested()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab_url(runs_root):
    port = _free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpolab.cli", "lab", "--runs", str(runs_root), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail(proc.stdout.read().decode(errors="replace"))
    yield url
    proc.terminate()
    proc.wait(timeout=20)


def _set_number(page, elem_id: str, value: str) -> None:
    box = page.locator(f"#{elem_id} input")
    box.fill(value)
    box.press("Enter")
    box.blur()


def _pick(page, elem_id: str, value: str) -> None:
    box = page.locator(f"#{elem_id} input")
    box.click()
    box.fill(value)
    box.press("Enter")
    box.blur()


def test_the_page_in_chromium(lab_url, runs_root, tmp_path):
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (CI installs it)")
    ARTIFACTS.mkdir(exist_ok=True)
    errors: list[str] = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1800}, accept_downloads=True)
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(lab_url)
        chart = page.locator("#sim-chart svg")
        chart.wait_for(timeout=60_000)
        before = page.locator("#sim-chart").inner_html()
        cards_before = page.locator("#sim-cards").inner_text()
        # a format-only reward: the simulated curves must change
        _set_number(page, "w-format", "5")
        _set_number(page, "w-completion", "0")
        page.wait_for_function("b => document.querySelector('#sim-chart').innerHTML !== b", arg=before, timeout=60_000)
        page.wait_for_function(
            "b => document.querySelector('#sim-cards').innerText !== b", arg=cards_before, timeout=60_000
        )
        page.locator("#probes").get_by_text("gameable", exact=False).first.wait_for(timeout=60_000)
        page.screenshot(path=str(ARTIFACTS / "lab-simulator.png"))

        # a finished tiny-model run: its curves and trajectories
        _pick(page, "run-pick", "tiny")
        page.locator("#run-chart svg").wait_for(timeout=60_000)
        page.locator("#run-summary table").wait_for(timeout=60_000)
        page.locator("#episode pre").first.wait_for(timeout=60_000)
        assert "verified" in page.locator("#episode").inner_text()
        page.screenshot(path=str(ARTIFACTS / "lab-run.png"), full_page=True)

        # the TRL script downloads
        page.locator("#trl-script").wait_for(timeout=60_000)
        with page.expect_download(timeout=60_000) as dl:
            page.locator("#download-script").click()
        target = tmp_path / "train_grpo.py"
        dl.value.save_as(target)
        text = target.read_text()
        assert "GRPOConfig(" in text and "reward_weights=[5.0, 1.5, 0.0, -0.05]" in text

        # malformed run dirs: a message on the page, not a stack trace
        _pick(page, "run-pick", str(runs_root / "broken"))
        page.locator("#run-summary .lab-error").wait_for(timeout=60_000)
        assert "not valid JSON" in page.locator("#run-summary").inner_text()
        assert "Traceback" not in page.content()
        page.screenshot(path=str(ARTIFACTS / "lab-malformed.png"))
        browser.close()
    assert errors == [], errors
