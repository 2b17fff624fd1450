"""The web lab: artifact views, background runs, its lock-down (files, Host/Origin, bounds, paths, jobs), and the
page driven in Debian's headless chromium."""

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from importlib.util import find_spec
from pathlib import Path

import pytest

if find_spec("gradio") is None:  # found, not imported: a test that needs it imports it (2-3 s) where it runs
    pytest.skip("the lab needs gradio: pip install 'grpolab[lab]'", allow_module_level=True)

from grpolab.config import load_config  # noqa: E402
from grpolab.errors import UserError  # noqa: E402
from grpolab.lab import jobs, views  # noqa: E402
from grpolab.rundir import RunDir  # noqa: E402
from tests import zygote  # noqa: E402

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


RUNS_ROOT = pytest.mark.xdist_group("lab_runs_root")
"""On the tests that use `runs_root` (and `lab_url`): a module fixture runs once in each xdist worker that runs one
of its tests, and this one trains a run and starts a lab; one worker takes them all."""
CHANGED_LAB = pytest.mark.xdist_group("lab_changed")


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


@RUNS_ROOT
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


def test_views_show_what_they_can_of_malformed_values(tmp_path):
    run = tmp_path / "odd"
    (run / "eval").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"env": "finance", "grpo": [1], "train": "x"}))
    rows = [{"step": 1, "kl": "x", "kl_bound": "y", "reward/mean": float("inf"), "alarms": ["a"]}, {"step": 2}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "eval" / "summary.json").write_text(json.dumps({"base": {"heldout/tool_call_prob": "q"}}))
    (run / "preflight.json").write_text(json.dumps({"probes": [{"probe": 1}], "gameable": [1, None]}))
    (run / "eval" / "base.jsonl").write_text(json.dumps({"task_id": ["t"], "components": [1]}) + "\n")
    (run / "eval" / "3.jsonl").write_text(json.dumps({"task_id": "t", "reasons": "r"}) + "\n")
    view = views.load_run(run)
    assert view.ok and [r["step"] for r in view.metrics] == [1, 2]
    summary = views.run_summary(view)
    assert "alarms is not a mapping" in summary and "eval/base.jsonl: 1 malformed" in summary
    assert "lab-card" in views.run_cards(view) and "<svg" in views.chart(view.metrics, "t")
    assert "No trajectory" in views.episode_pair(view, "t", "3")
    assert "malformed probe row" in views.preflight_panel(view.preflight)


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
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (out / "metrics.jsonl").is_file():
        time.sleep(0.5)
    assert jobs.running(tmp_path, "bg"), (tmp_path / ".bg.log").read_text()
    assert "stop requested" in jobs.stop(tmp_path, "bg")
    while time.monotonic() < deadline and jobs.running(tmp_path, "bg"):
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
    yield from _serve(runs_root)


@pytest.fixture(scope="module")
def changed_lab_url(tmp_path_factory, run_with, finance):
    """A lab over one run whose held-out episodes emptied their thoughts between step 0 and step 2 (so What GRPO
    changed flags it with before/after examples), the transcripts carrying a long unbroken line."""
    from grpolab.protocol import render_thought

    from .conftest import EPISODE_ROW

    root = tmp_path_factory.mktemp("changedruns")
    run = run_with(root / "changed", where=())
    long_line = "The answer is 14.17, from " + "x" * 400 + "\n"
    rows: dict[str, list[dict]] = {"0": [], "2": []}
    for t in finance.tasks("heldout")[:4]:
        honest = finance.reference_transcript(t) + " " + long_line  # after the thought: the turn still opens with it
        emptied = honest.replace(render_thought(t.reference_thought), render_thought("..."))
        for label, text in (("0", honest), ("2", emptied)):
            components = {**EPISODE_ROW["components"], "completion": 1.0}
            row = {**EPISODE_ROW, "task_id": t.id, "prompt": t.prompt, "answer": t.answer, "text": text}
            rows[label].append({**row, "components": components, "valid_calls": len(t.reference_calls)})
    for label, episodes in rows.items():
        (run / "eval" / f"{label}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in episodes))
    yield from _serve(root)


def _serve(root: Path, *args: str):
    """Serve `grpolab lab` over the runs folder `root` (and `args`) until the generator is closed: yields its URL."""
    port = _free_port()
    env = zygote.command_env(GRADIO_ANALYTICS_ENABLED="False")
    proc = zygote.popen(
        ["lab", "--runs", str(root), "--port", str(port), *args], env, subprocess.PIPE, subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail(proc.stdout.read().decode(errors="replace"))
    try:
        yield url
    finally:  # a generator closed by hand (not as a fixture) ends here too
        proc.terminate()
        proc.wait(timeout=20)


def _set_number(page, elem_id: str, value: str) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")  # a number box, or a slider's
    box.fill(value)
    box.press("Enter")
    box.blur()


def _pick(page, elem_id: str, value: str) -> None:
    box = page.locator(f"#{elem_id} input")
    box.click()
    box.fill(value)
    box.press("Enter")
    box.blur()


def _status(url: str, headers: dict[str, str] | None = None, data: bytes | None = None) -> int:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _status_or_none(url: str) -> int | None:
    try:
        return _status(url)
    except OSError:  # not listening yet
        return None


@RUNS_ROOT
def test_the_lab_serves_no_file_outside_its_private_folder(lab_url, runs_root, tmp_path):
    private = tmp_path / "private.txt"  # another user's file under the temp dir
    private.write_text("secret")
    private.chmod(0o600)
    assert str(private).startswith(tempfile.gettempdir())
    for path in (private, runs_root / "tiny" / "config.json", Path("/etc/hostname")):
        assert _status(f"{lab_url}gradio_api/file={path}") == 403, path
        assert _status(f"{lab_url}file={path}") in (403, 404), path


@RUNS_ROOT
def test_the_lab_answers_only_its_own_host_and_origin(lab_url):
    port = lab_url.rsplit(":", 1)[1].strip("/")
    assert _status(lab_url) == 200
    assert _status(lab_url, {"Host": f"localhost:{port}"}) == 200
    assert _status(lab_url, {"Host": f"rebound.example:{port}"}) == 403  # DNS rebinding
    join = f"{lab_url}gradio_api/queue/join"
    body, kind = b'{"fn_index": 0, "data": [], "session_hash": "x"}', {"Content-Type": "application/json"}
    assert _status(join, {**kind, "Origin": "http://evil.example"}, body) == 403  # CSRF from another site
    assert _status(join, {**kind, "Origin": "null"}, body) == 403
    assert _status(f"{lab_url}gradio_api/info", {"Origin": f"http://127.0.0.1:{port}"}) == 200


def test_the_private_folder_is_0700_and_removed_on_exit(tmp_path):
    port, log = _free_port(), tmp_path / "lab.log"
    with open(log, "w") as out:
        argv = ["lab", "--runs", str(tmp_path / "runs"), "--port", str(port)]
        proc = zygote.popen(argv, None, out.fileno(), subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _status_or_none(f"http://127.0.0.1:{port}/") != 200:
            time.sleep(0.3)
        words = [w for w in log.read_text().split() if "grpolab-lab-" in w]
        assert words, log.read_text()
        folder = Path(words[0])
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        # under the temp dir (inside the folder the command's supervisor removes when it ends: grpolab.cli.supervise)
        assert Path(tempfile.gettempdir()) in folder.parents and (folder / "exports").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert not folder.exists()


def test_an_explicit_host_is_warned_about_and_named_hosts_are_accepted(cli, monkeypatch, tmp_path):
    import socket

    from grpolab.lab import app

    calls = []
    monkeypatch.setattr(app, "launch", lambda *a, **k: calls.append(k["host_names"]))
    port = str(_free_port())  # the lab tries the port before it starts
    code, _, err = cli("lab", "--runs", str(tmp_path), "--port", port)
    assert code == 0 and "warning" not in err and calls[-1] == {"localhost", "127.0.0.1", "::1"}
    code, _, err = cli(
        "lab", "--runs", str(tmp_path), "--port", port, "--host", "0.0.0.0", "--allow-host", "Lab.Example."
    )
    flat = " ".join(err.split())
    assert code == 0 and "warning: --host 0.0.0.0: the lab has no login" in flat and "--allow-host" in flat
    assert {"lab.example", socket.gethostname().lower(), "localhost"} <= calls[-1]


def test_host_and_origin_rules():
    from grpolab.lab.guard import accepted_names, refusal

    names = accepted_names("127.0.0.1")
    assert refusal({"host": "localhost:7860"}, names) is None
    assert refusal({"host": "[::1]:7860", "origin": "http://[::1]:7860"}, names) is None
    assert refusal({"host": "LOCALHOST.:7860", "origin": "http://127.0.0.1:7860"}, names) is None
    for headers in (
        {"host": "attacker.example:7860"},
        {"host": "127.0.0.1.attacker.example"},
        {},
        {"host": "localhost:7860", "origin": "http://attacker.example"},
        {"host": "localhost:7860", "origin": "null"},
        {"host": "localhost:7860", "origin": "http://localhost.attacker.example:7860"},
    ):
        assert refusal(headers, names), headers


FORM = {
    "env": "finance",
    "model": "tiny",
    "reward.weights.format": 1.0,
    "reward.weights.schema": 1.5,
    "reward.weights.completion": 3.0,
    "reward.weights.length": -0.05,
    "grpo.beta": 0.05,
    "grpo.epsilon": 0.2,
    "rollout.group_size": 4,
    "grpo.learning_rate": 2e-4,
}
"""The page's config inputs by field name."""

SHORTHAND = {"F": "reward.weights.format", "lr": "grpo.learning_rate", "G": "rollout.group_size"}


def _form(steps=None, sft=None, **change) -> dict:
    values = {**FORM, **{SHORTHAND.get(k, k): v for k, v in change.items()}}
    if steps is not None:
        values.update({"train.steps": steps, "train.sft_steps": sft})
    return values


def test_each_form_value_lands_in_the_field_its_control_names():
    from grpolab.lab.form import config_from_form, controls, demo_config

    values = {
        **FORM,
        "reward.weights.format": 2.0,
        "reward.weights.schema": 3.0,
        "reward.weights.completion": 5.0,
        "reward.weights.length": -0.25,
        "grpo.beta": 0.3,
        "grpo.epsilon": 0.15,
        "rollout.group_size": 6,
        "grpo.learning_rate": 3e-4,
        "train.steps": 7,
        "train.sft_steps": 9,
    }
    for order in (list(values), list(reversed(values))):  # the order the page sends them in does not matter
        cfg = config_from_form({k: values[k] for k in order})
        assert (cfg.grpo.beta, cfg.grpo.epsilon, cfg.grpo.learning_rate) == (0.3, 0.15, 3e-4)
        assert cfg.reward.weights == {"format": 2.0, "schema": 3.0, "completion": 5.0, "length": -0.25}
        assert (cfg.rollout.group_size, cfg.train.steps, cfg.train.sft_steps) == (6, 7, 9)
        assert (cfg.env, cfg.model) == ("finance", "tiny")
    assert set(values) <= set(controls(demo_config()))


def test_the_form_is_generated_from_the_bounds_defaults_and_field_docs():
    import gradio as gr

    from grpolab.config import field_doc
    from grpolab.lab.form import Form, controls, demo_config, render
    from grpolab.lab.limits import BOUNDS

    demo = demo_config()
    with gr.Blocks():
        components = render(controls(demo).values(), demo, {"env": ["finance"], "model": ["smollm2", "tiny"]})
    for name in ("grpo.beta", "grpo.epsilon", "rollout.group_size", "simulator.lr", "simulator.steps"):
        assert (components[name].minimum, components[name].maximum) == (BOUNDS[name].low, BOUNDS[name].high)
    assert components["grpo.beta"].value == demo.grpo.beta and components["grpo.epsilon"].value == demo.grpo.epsilon
    assert components["grpo.beta"].info == field_doc("grpo.beta")
    assert components["reward.weights.length"].value == demo.reward.weights["length"]
    form = Form(components)
    data = {components["grpo.epsilon"]: 0.3, components["grpo.beta"]: 0.1}
    assert form.named(data) == {"grpo.epsilon": 0.3, "grpo.beta": 0.1}


def test_the_form_over_a_user_config_has_a_weight_per_component_of_its_env(tmp_path, request):
    # `grpolab lab --config` on a folder new-env wrote: a data environment and a reward function of the user's
    from grpolab.lab import form, handlers
    from grpolab.scaffold import new_env

    folder = new_env("units", tmp_path)
    base = load_config(folder / "config.toml", {"model": "tiny"})
    form.set_base_config(base)
    request.addfinalizer(lambda: form.set_base_config(None))
    controls = form.controls(base)
    weights = [n.removeprefix(form.WEIGHT) for n in controls if n.startswith(form.WEIGHT)]
    assert weights[:4] == ["format", "schema", "completion", "length"] and "names_unit" in weights
    assert (
        controls["reward.weights.names_unit"].default(base) == 0.5
        and "unit" in controls["reward.weights.names_unit"].info()
    )
    values = {n: c.default(base) for n, c in controls.items()} | {"reward.weights.names_unit": 2.0}
    cfg = form.config_from_form(values)
    assert cfg.reward.weights["names_unit"] == 2.0 and (cfg.data, cfg.plugins) == (base.data, base.plugins)
    cards, _, probes = handlers.simulate_view(values)
    assert "lab-error" not in cards + probes
    assert "names_unit:" in probes  # the probes score under the user's component (no letter: shown by its name)
    other = form.config_from_form({**values, "env": "arithmetic"})  # another env: its defaults, not the data files
    assert other.data == [] and other.reward.weights["names_unit"] == 2.0  # a registered component scores everywhere


def test_an_envs_own_component_has_a_weight_only_while_that_env_is_picked(monkeypatch, request):
    from grpolab.lab import form, handlers

    from .test_plugins import polite_env, polite_grpolab

    owned = polite_env(polite_grpolab)
    real = form.env_of
    monkeypatch.setattr(form, "env_of", lambda key: owned if '"env":"finance"' in key else real(key))
    base = load_config(None, {"env": "finance", "model": "tiny"})
    form.set_base_config(base)
    request.addfinalizer(lambda: form.set_base_config(None))
    controls = form.controls(base)
    assert controls["reward.weights.polite"].default(base) == 0.5
    values = {n: c.default(base) for n, c in controls.items()} | {"reward.weights.polite": 1.5}
    assert form.config_from_form(values).reward.weights["polite"] == 1.5
    assert "polite" not in form.config_from_form({**values, "env": "arithmetic"}).reward.weights
    names = [n for n in controls if n.startswith(form.WEIGHT)]
    shown = dict(zip(names, handlers.weights_shown("arithmetic", names)))
    assert shown["reward.weights.polite"]["visible"] is False and shown["reward.weights.format"]["visible"] is True
    assert handlers.weights_shown("finance", names)[names.index("reward.weights.polite")]["visible"] is True


@RUNS_ROOT
def test_run_names_and_paths_are_confined_to_the_runs_folder(runs_root, tmp_path):
    from grpolab.lab import handlers

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "config.json").write_text(json.dumps({"env": "finance", "model": "tiny"}))
    (runs_root / "link-out").symlink_to(outside)
    try:
        for name in (str(outside), "../elsewhere", "link-out", "/etc", str(runs_root), "a\x00b", "x" * 5000):
            summary = handlers.run_view(runs_root, name)[0]
            assert "outside the runs folder" in summary or "not a usable path" in summary, (name, summary)
            assert handlers.episode_view(runs_root, name, "t", 0) == ""
        assert "link-out" not in views.list_runs(runs_root)
        assert "lab-error" not in handlers.run_view(runs_root, str(runs_root / "tiny"))[0]  # a path inside is fine
    finally:
        (runs_root / "link-out").unlink()


def test_job_parameters_are_bounded(tmp_path):
    from grpolab.lab import handlers
    from grpolab.lab.limits import LabLimits

    root = tmp_path / "runs"
    refused = [
        (_form(10**9, 0), "train.steps"),
        (_form(5, 10**6), "train.sft_steps"),
        (_form(5, 0, lr=1e3), "grpo.learning_rate"),
        (_form(5, 0, G=10**6), "rollout.group_size"),
        (_form(5, 0, F=float("nan")), "finite"),
        (_form(5, 0, model="/etc/passwd"), "not one the lab may load"),
        (_form(5, 0, model="gpt2"), "--allow-model"),
        (_form(5, 0, env="os:getcwd"), "not offered by the lab"),
    ]
    for values, problem in refused:
        message, _ = handlers.start_view(root, LabLimits(), "job", values)
        assert "cannot start" in message and problem in message, message
    for name in ("../escape", "", ".hidden", "a/b", "x" * 100):
        message, _ = handlers.start_view(root, LabLimits(), name, _form(5, 0))
        assert "not a plain directory name" in message, message
    assert not root.exists() or list(root.iterdir()) == []
    simulator = {"simulator.lr": 0.5, "simulator.steps": 100_000}  # simulated iterations
    cards, chart, _ = handlers.simulate_view({**_form(), **simulator})
    assert "is outside the lab" in cards and "simulated iterations = 100000" in chart
    script, path = handlers.export_view(tmp_path / "exports", _form(5, 0))
    assert "GRPOConfig(" in script and Path(path).parent.parent == tmp_path / "exports"


def _kill_jobs(root: Path) -> None:
    for state in root.glob(".*.lab.json"):
        pid = json.loads(state.read_text())["pid"]
        try:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    # the job's supervisor is reaped above; the command it ran (its child, killed with the group) lets go of the
    # run's lock once the kernel has closed its files, a moment later
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and jobs.active(root):
        time.sleep(0.1)


def test_one_job_per_run_dir_and_a_cap_on_running_jobs(tmp_path):
    cfg = load_config(None, {"model": "tiny", "env": "arithmetic", "rollout.group_size": 2, "train.steps": 200})
    try:
        first = jobs.start(cfg, tmp_path, "a")
        with pytest.raises(UserError, match="already exists"):
            jobs.start(cfg, tmp_path, "a")  # at once: the directory was claimed before the process started
        with pytest.raises(UserError, match="is in use by pid"):
            RunDir.create(first, cfg)  # the CLI's claim sees the job's
        jobs.start(cfg, tmp_path, "b")
        with pytest.raises(UserError, match="2 training jobs are running"):
            jobs.start(cfg, tmp_path, "c")
        assert jobs.active(tmp_path) == ["a", "b"] and not (tmp_path / "c").exists()
        deadline = time.monotonic() + 120  # the started process takes the claim over (claim.json names it)
        pid = json.loads((tmp_path / ".a.lab.json").read_text())["pid"]
        while time.monotonic() < deadline and json.loads((first / "claim.json").read_text())["pid"] != pid:
            time.sleep(0.2)
        assert json.loads((first / "claim.json").read_text())["pid"] == pid, (tmp_path / ".a.log").read_text()
        assert jobs.running(tmp_path, "a")
    finally:
        _kill_jobs(tmp_path)
    assert not jobs.running(tmp_path, "a") and jobs.active(tmp_path) == []


@RUNS_ROOT
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
        page.locator("#run-changes h2").get_by_text("What GRPO changed").wait_for(timeout=60_000)
        assert "thought_words" in page.locator("#run-changes").inner_text()
        page.locator("#run-changes").screenshot(path=str(ARTIFACTS / "lab-what-changed.png"))
        page.locator("#episode pre").first.wait_for(timeout=60_000)
        assert "verified" in page.locator("#episode").inner_text()
        page.screenshot(path=str(ARTIFACTS / "lab-run.png"), full_page=True)

        # try the trained agent: a question through the run's latest checkpoint, with the real tools
        page.locator("#try-question textarea").fill("By what percent did ACME stock change in Q3?")
        page.locator("#try-ask").click()
        page.locator("#try-answer").get_by_text("answer:").wait_for(timeout=120_000)

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


def _chromium_page(p):
    """A headless Debian chromium page that records console errors (skips where chromium is not installed)."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (CI installs it)")
    browser = p.chromium.launch(
        executable_path=CHROMIUM,
        headless=True,
        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
    )
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return browser, page, errors


def test_the_page_load_draws_the_run_the_picker_opens_on(tmp_path, run_with):
    """Without a browser: the page's load event feeds the picker's initial value (the first run) to the run view,
    whose summary, chart and What GRPO changed it fills."""
    from grpolab.lab.app import build

    run_with(tmp_path / "runs" / "only", where=())
    page = build(tmp_path / "runs", tmp_path / "work")
    elem = {c["id"]: c.get("props", {}).get("elem_id") for c in page.config["components"]}
    picker = next(c for c in page.config["components"] if c.get("props", {}).get("elem_id") == "run-pick")
    assert picker["props"]["value"] == "only"
    (load,) = [
        d
        for d in page.config["dependencies"]
        if any(event == "load" for _, event in d["targets"]) and [elem[i] for i in d["inputs"]] == ["run-pick"]
    ]
    outputs = dict(zip((elem[o] for o in load["outputs"]), page.fns[load["id"]].fn("only")))
    assert "<table" in outputs["run-summary"] and "<svg" in outputs["run-chart"]
    assert "What GRPO changed" in outputs["run-changes"]


@CHANGED_LAB
def test_the_page_opens_showing_the_run_in_the_picker(changed_lab_url):
    """The picker opens on the only run, and its view is drawn without picking anything."""
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        browser, page, errors = _chromium_page(p)
        page.goto(changed_lab_url)
        assert page.locator("#run-pick input").input_value() == "changed"
        page.locator("#run-summary table").wait_for(timeout=60_000)
        page.locator("#run-chart svg").wait_for(timeout=60_000)
        page.locator("#run-changes h2").get_by_text("What GRPO changed").wait_for(timeout=60_000)
        page.locator("#episode pre").first.wait_for(timeout=60_000)
        browser.close()
    assert errors == [], errors


@CHANGED_LAB
def test_what_grpo_changed_transcripts_wrap_within_the_panel(changed_lab_url):
    """Before/after transcripts (a 400-character unbroken line, tool JSON) wrap inside their half of the panel:
    nothing is wider than its box, and the pair is no wider than the section."""
    playwright = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(exist_ok=True)
    with playwright.sync_playwright() as p:
        browser, page, errors = _chromium_page(p)
        page.goto(changed_lab_url)
        transcripts = page.locator("#run-changes pre")
        transcripts.first.wait_for(timeout=60_000)
        assert "x" * 400 in transcripts.first.inner_text()
        widths = transcripts.evaluate_all("els => els.map(e => [e.scrollWidth, e.clientWidth])")
        assert len(widths) >= 2 and all(0 < client and scroll <= client for scroll, client in widths), widths
        section = page.locator("#run-changes").evaluate(
            "e => [e.scrollWidth, e.clientWidth, e.getBoundingClientRect().right, Math.max(...Array.from("
            "e.querySelectorAll('pre'), p => p.getBoundingClientRect().right))]"
        )
        scroll, client, right, rightmost_pre = section
        assert scroll <= client and rightmost_pre <= right, section
        pre = transcripts.first.bounding_box()
        assert pre["width"] < section[1] / 2  # side by side, each in half the panel
        page.locator("#run-changes").screenshot(path=str(ARTIFACTS / "lab-what-changed-wrapped.png"))
        browser.close()
    assert errors == [], errors


def _downloaded_script(page, folder: Path, expected: str, timeout: float = 60) -> str:
    """The TRL script the page's download button gives, once it holds `expected` (the export follows the form
    asynchronously; the code view draws only the lines in sight, so the text is read from the download)."""
    deadline, text = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        with page.expect_download(timeout=60_000) as dl:
            page.locator("#download-script").click()
        dl.value.save_as(folder / "downloaded.py")
        text = (folder / "downloaded.py").read_text()
        if expected in text:
            return text
        time.sleep(1)
    raise AssertionError(f"{expected!r} not in the downloaded script:\n{text}")


def test_the_lab_over_a_user_config_has_a_slider_for_its_component_in_chromium(tmp_path):
    # `grpolab lab --config` on a folder new-env wrote: the user's component has its own weight on the page, and
    # moving it reaches the simulator and the TRL script
    from grpolab.scaffold import new_env

    folder = new_env("units", tmp_path)
    config = folder / "config.toml"
    config.write_text(config.read_text().replace('env = "data"', 'env = "data"\nmodel = "tiny"'))
    serving = _serve(tmp_path / "runs", "--config", str(config))
    url = next(serving)
    try:
        with pytest.importorskip("playwright.sync_api").sync_playwright() as p:
            browser, page, errors = _chromium_page(p)
            page.goto(url)
            page.locator("#sim-cards .lab-card").first.wait_for(timeout=60_000)
            assert page.locator("#w-names_unit input[type=number]").input_value() == "0.5"
            script = _downloaded_script(page, tmp_path, "reward_weights=[1.0, 1.5, 3.0, -0.05, 0.5]")
            assert "names_unit" in script and str(folder / "tasks.jsonl") in script  # the data env's own tasks
            _set_number(page, "w-names_unit", "2")
            _downloaded_script(page, tmp_path, "reward_weights=[1.0, 1.5, 3.0, -0.05, 2.0]")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "lab-user-config.png"), full_page=True)
            browser.close()
        assert errors == [], errors
    finally:
        serving.close()


@RUNS_ROOT
def test_the_try_it_box_answers_through_the_runs_agent(runs_root):
    from grpolab.lab.handlers import try_view

    html = try_view(runs_root, "tiny", "By what percent did ACME stock change in Q3?")
    assert "answer:" in html and "stop:" in html
    assert "Pick a run" in try_view(runs_root, None, "q")
    assert "1 to 500 characters" in try_view(runs_root, "tiny", "x" * 501)
    assert "lab-error" in try_view(runs_root, "../outside", "q")


EXTREME = ["1" + "0" * 400, "1.7e308", "-1.7e308", "1e400", "NaN", "-Infinity"]


@pytest.mark.parametrize("bad", EXTREME, ids=["bigint", "1.7e308", "-1.7e308", "1e400", "nan", "-inf"])
def test_the_run_view_shows_a_message_for_values_it_cannot_draw(tmp_path, run_with, bad):
    """A 400-digit integer raised OverflowError in the run view, +-1.7e308 a ValueError from matplotlib."""
    from grpolab.lab import handlers

    run_with(tmp_path / "odd", bad, where=("metrics", "summary", "probes", "episodes", "config"))
    summary, cards, chart, _, _, state, changes = handlers.run_view(tmp_path, "odd")
    assert "metrics.jsonl" in summary and "preflight.json" in summary, summary  # what was left out, named
    assert "lab-card" in cards and state == "not running" and "What GRPO changed" in changes and "<svg" in chart
    view = views.load_run(tmp_path / "odd")
    assert "n/a" in views.run_summary(view) and "malformed probe row" in views.preflight_panel(view.preflight)
    assert "<pre>" in views.episode_pair(view, views.task_ids(view)[0], "2")


def test_a_host_or_port_the_lab_cannot_listen_on_exits_2(cli, monkeypatch, tmp_path):
    from grpolab.lab import app

    monkeypatch.setattr(app, "launch", lambda *a, **k: pytest.fail("launched"))
    code, _, err = cli("lab", "--runs", str(tmp_path), "--host", "256.1.1.1")
    flat = " ".join(err.split())
    assert code == 2 and "--host 256.1.1.1" in flat and "--host 127.0.0.1" in flat, err
    code, _, err = cli("lab", "--runs", str(tmp_path), "--host", "::1")  # Gradio raised on its own URL
    assert code == 2 and "IPv6" in err, err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = cli("lab", "--runs", str(tmp_path), "--port", str(port))
    flat = " ".join(err.split())
    assert code == 2 and f"--port {port}" in flat and "in use" in flat, err


def test_the_lab_prints_the_runs_folder_and_host_literally(cli, monkeypatch, tmp_path):
    from grpolab.lab import app

    monkeypatch.setattr(app, "launch", lambda *a, **k: None)
    runs = tmp_path / "[/x] [bold]runs :o:"
    code, _, err = cli("lab", "--runs", str(runs), "--host", "0.0.0.0", "--port", str(_free_port()))
    assert code == 0 and str(runs) in " ".join(err.split()), err  # the no-login warning names the folder


def test_one_card_per_alarm_with_its_first_and_last_step_and_its_reasons_there():
    fired = [(step, "drift:class/dropped_thought", f"dropped_thought 3% -> {step * 4}%") for step in range(8, 21)]
    fired += [(12, "probe:class/empty_thought", "empty_thought in 0% -> 100% of greedy episodes")]
    cards = views.alarm_cards(fired)
    assert cards.count("lab-alarm") == 2  # the demo printed 13 cards for one alarm
    assert "steps 8-20 (13 steps)" in cards and "3% -&gt; 32%" in cards and "3% -&gt; 80%" in cards
    assert "3% -&gt; 40%" not in cards  # the steps between are counted, not listed
    assert "probe:class/empty_thought</b>, step 12<" in cards


def test_the_episode_reward_card_lists_components_only():
    # a simulated iteration carries percentile bands beside each curve: they are not components
    last = {"reward/mean": 2.0, "reward/format": 1.0, "reward/format/p10": 0.5, "reward/schema/p90": 1.4}
    card = views.stat_cards(last, 0.5, 0.12, "sim")
    assert "F:" in card and "C:" in card and "p10" not in card and "p90" not in card


def test_the_first_view_is_made_at_launch_and_the_page_request_reads_it():
    """`launch` starts `handlers.warm_up` on a thread: the page's first request finds its probe report made (the
    first view of a user's config took 5.8 s after the page loaded; 0.05 s once made)."""
    from grpolab.lab import form, handlers

    form.set_base_config(load_config(None, {"model": "tiny", "env": "finance"}))
    try:
        handlers._probes.cache_clear()
        handlers.warm_up()
        assert handlers._probes.cache_info().currsize == 1
        cards, chart, probes = handlers.simulate_view(form.starting_values(form.base_config()))
        assert handlers._probes.cache_info().hits == 1 and "lab-card" in cards and "<svg" in chart
    finally:
        form.set_base_config(None)
