"""`grpolab lab`: the page. Config and simulator on top, then a real run (live), rollouts, preflight, TRL export.

Layout and wiring only: numbers come from `grpolab.trust.simulate`, `grpolab.trust.probes`, `grpolab.trl.export`
and the run directories (`lab.views`); training runs are separate processes (`lab.jobs`).

What the page may touch is bounded (`lab.limits`: settings, models, environments, run paths inside --runs) and
who may talk to it is checked (`lab.guard`: Host and Origin). Files are served from one private folder per lab
process (mode 0700, removed on exit) that holds the TRL exports and Gradio's own cache, never the temp dir.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import signal
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import gradio as gr

from grpolab.config import DEMO_CONFIG, LabConfig, field_doc, load_config
from grpolab.envs import env_for, env_names
from grpolab.errors import UserError
from grpolab.lab import jobs, views
from grpolab.lab.explain import EXPLAINERS
from grpolab.lab.guard import LOOPBACK_NAMES, HostOriginGuard
from grpolab.lab.limits import BOUNDS, LabLimits, check_settings, inside
from grpolab.models import default_token_counter
from grpolab.report.trajectories import CSS as TRAJECTORY_CSS
from grpolab.rewards.components import COMPONENTS, standard_names
from grpolab.rundir import RunDir
from grpolab.trust.simulate import DEFAULT_LR, SimSettings

CSS = (
    """
.lab-cards{display:grid;grid-template-columns:repeat(4,1fr);gap:.6em}
.lab-card{border:1px solid #ddd;border-radius:8px;padding:.6em .8em;background:#fafafa}
.lab-card-title{font-size:.8em;color:#555}.lab-card-value{font-size:1.6em;font-weight:600}
.lab-card-detail{font-size:.8em;color:#333}.lab-source{font-size:.75em;color:#666;margin-top:.3em}
.lab-good{color:#0a7d28;font-weight:600}.lab-bad{color:#b00020;font-weight:600}
.lab-card.lab-bad .lab-card-value{color:#b00020}
.lab-msg{padding:.5em .8em;border-left:4px solid #888;background:#f4f4f4;margin:.3em 0}
.lab-warn{border-color:#c77700}.lab-error{border-color:#b00020;background:#fff0f0}
.lab-table td,.lab-table th,table td,table th{border:1px solid #ddd;padding:.2em .5em}
"""
    + TRAJECTORY_CSS
)


WEIGHT_NAMES = standard_names()
"""One weight box per standard reward component, in table order."""


def _config(env: str, model: str, *values: Any) -> LabConfig:
    """The config the form describes: weights (one per standard component), beta, epsilon, G, lr[, steps, sft]."""
    weights = dict(zip(WEIGHT_NAMES, (float(v) for v in values[: len(WEIGHT_NAMES)])))
    beta, eps, G, lr, *rest = values[len(WEIGHT_NAMES) :]
    overrides: dict[str, Any] = {
        "env": env,
        "model": model or "smollm2",
        "reward.weights": weights,
        "grpo.beta": beta,
        "grpo.epsilon": eps,
        "rollout.group_size": int(G),
        "grpo.learning_rate": lr,
    }
    if rest:
        overrides.update({"train.steps": int(rest[0]), "train.sft_steps": int(rest[1])})
    # what the form does not show comes from the demo's config when the form is on the demo's environment
    demo = _demo_config()
    cfg = load_config(None, overrides, base=demo if env == demo.env else None)
    check_settings(cfg)  # the browser bounds the controls; a request can carry anything
    return cfg


@lru_cache(maxsize=1)
def _demo_config() -> LabConfig:
    """The demo's config, read once (every slider move builds a config on it); callers only read it."""
    return load_config(DEMO_CONFIG)


FORM_ERRORS = (UserError, ValueError, TypeError, KeyError, IndexError, OverflowError)
"""What a malformed form value raises on its way into a config (int(None), float("x"), int(inf)...)."""


@lru_cache(maxsize=8)
def _profiles(env: str, length_unit: int) -> Any:
    from grpolab.trust.simulate import measure_profiles

    return measure_profiles(env_for(LabConfig(env=env)), default_token_counter(), length_unit)


@lru_cache(maxsize=64)
def _probes(env: str, weights: tuple[tuple[str, float], ...]) -> dict:
    from grpolab.trust.preflight import probe_report

    cfg = load_config(None, {"env": env, "reward.weights": dict(weights)})
    return probe_report(env_for(cfg), cfg, default_token_counter(), n_tasks=3)


def simulate_view(env: str, model: str, *values: Any) -> tuple[str, str, str]:
    """(stat cards, chart, probe panel) for the sliders; the simulator runs in milliseconds."""
    from grpolab.trust.simulate import DEFAULT_PRIOR, simulate

    *cfg_values, sim_lr, sim_steps = values
    try:
        cfg = _config(env, model, *cfg_values)
        BOUNDS["simulator.lr"].check("simulator step size", sim_lr)
        BOUNDS["simulator.steps"].check("simulated iterations", sim_steps)
        settings = SimSettings(cfg, steps=int(sim_steps), runs=16, lr=float(sim_lr))
        result = simulate(_profiles(env, cfg.reward.length_unit), DEFAULT_PRIOR, settings)
    except FORM_ERRORS as exc:
        msg = views.message(f"cannot simulate this setting: {exc}", "error")
        return msg, msg, msg
    chart = views.chart(result["iterations"], "simulated: reward, kl, tool_token_mass per iteration")
    try:
        probes = views.preflight_panel(_probes(env, tuple(sorted(cfg.reward.weights.items()))))
    except (UserError, ValueError, KeyError, IndexError) as exc:
        probes = views.message(f"probes unavailable for {env}: {exc}", "warn")
    return views.sim_cards(result, cfg.grpo.kl_bound), chart, probes


KEEP_EXPORTS = 16
"""Export folders kept in the private folder (older ones are removed; Gradio has copied what it serves)."""


def export_view(exports: Path, env: str, model: str, *values: Any) -> tuple[str, str | None]:
    """(script, its path for the download button), written into the lab's private `exports` folder."""
    from grpolab.trl.export import export_trl

    try:
        cfg = _config(env, model, *values)
    except FORM_ERRORS as exc:
        return f"# {exc}", None
    folder = exports / hashlib.sha256(cfg.model_dump_json().encode()).hexdigest()[:16]
    out = folder / "train_grpo.py"
    if out.is_file():
        os.utime(folder)  # recently used: pruned last
    else:
        export_trl(cfg, out)
        for old in sorted(exports.iterdir(), key=lambda p: p.stat().st_mtime)[:-KEEP_EXPORTS]:
            shutil.rmtree(old, ignore_errors=True)
    return out.read_text(), str(out)


def _resolve(root: Path, name: str | None) -> Path | None:
    """The run a picker value names, inside the runs folder (UserError otherwise); None when nothing is picked."""
    return inside(root, name) if name else None


def run_view(root: Path, name: str | None) -> tuple[str, str, str, Any, Any, str]:
    """(summary, cards, chart, task dropdown, iteration slider, status) for the selected run."""
    try:
        path = _resolve(root, name)
    except UserError as exc:
        msg = views.message(str(exc), "error")
        return msg, "", "", gr.update(choices=[], value=None), gr.update(maximum=1, value=0), ""
    if path is None:
        empty = views.message("Pick a run (or type a run directory path under the runs folder).")
        return empty, "", "", gr.update(choices=[], value=None), gr.update(maximum=1, value=0), ""
    v = views.load_run(path)
    if not v.ok:
        msg = views.message(f"{path}: " + ("; ".join(v.problems) or "not a run directory"), "error")
        return msg, "", "", gr.update(choices=[], value=None), gr.update(maximum=1, value=0), ""
    ids = views.task_ids(v)
    labels = v.eval_labels()
    state = "running" if RunDir(path).in_use() else "not running"
    return (
        views.run_summary(v),
        views.run_cards(v),
        views.chart(v.metrics, f"{path.name}: reward, kl, tool_token_mass"),
        gr.update(choices=ids, value=ids[0] if ids else None),
        gr.update(maximum=max(len(labels) - 1, 1), value=max(len(labels) - 1, 0)),
        state,
    )


def episode_view(root: Path, name: str | None, task_id: str | None, index: float) -> str:
    try:
        path = _resolve(root, name)
        position = int(index or 0)
    except FORM_ERRORS:
        return ""
    if path is None:
        return ""
    v = views.load_run(path)
    if not v.ok:
        return ""
    labels = v.eval_labels()
    if not labels:
        return views.message("No held-out evaluations yet.")
    label = labels[max(0, min(position, len(labels) - 1))]
    return f"<div>iteration: <b>{label}</b></div>" + views.episode_pair(v, task_id, label)


MAX_QUESTION = 500
"""Characters of a question typed into the "try it" box."""


@lru_cache(maxsize=2)
def _agent(path: Path, checkpoint: Path) -> Any:
    """A run's agent at one checkpoint (loaded once: a few seconds; a newer checkpoint loads again)."""
    from grpolab.agent.chat import ChatSession

    return ChatSession.from_run(path)


def try_view(root: Path, name: str | None, question: str) -> str:
    """Ask the selected run's agent: it thinks, calls the real tools and answers, turn by turn."""
    try:
        path = _resolve(root, name)
    except UserError as exc:
        return views.message(str(exc), "error")
    if path is None:
        return views.message("Pick a run first.")
    question = (question or "").strip()
    if not question or len(question) > MAX_QUESTION:
        return views.message(f"Type a question of 1 to {MAX_QUESTION} characters.", "warn")
    checkpoints = RunDir(path).checkpoints()
    if not checkpoints:
        return views.message("This run has no checkpoint yet.", "warn")
    try:
        events = list(_agent(path, checkpoints[-1][1]).send(question))
    except UserError as exc:
        return views.message(str(exc), "error")
    return views.chat_html(events)


def start_view(root: Path, limits: LabLimits, name: str, *values: Any) -> tuple[str, Any]:
    """Start a training job from the form: (message, run picker update)."""
    try:
        cfg = _config(*values)
        out = jobs.start(cfg, root, name, limits)
    except FORM_ERRORS as exc:
        return f"**cannot start:** {exc}", gr.update()
    return f"started `{out}` in the background (it survives a page reload)", gr.update(
        choices=views.list_runs(root), value=out.name
    )


def stop_view(root: Path, name: str | None) -> str:
    try:
        path = _resolve(root, name)
    except UserError as exc:
        return str(exc)
    if path is None:
        return "pick a run first"
    return jobs.stop(path.parent, path.name)


def build(root: Path, workdir: Path, limits: LabLimits | None = None) -> gr.Blocks:
    """The page over the runs folder `root`; `workdir` is the lab's private folder (exports go under it)."""
    limits = limits or LabLimits()
    exports = workdir / "exports"
    exports.mkdir(parents=True, exist_ok=True)
    d = _demo_config()  # the form starts as the demo (the simulator is calibrated on its run)
    with gr.Blocks(title="grpolab: Open-Weight Agent RL Lab") as page:
        gr.Markdown(
            "# Open-Weight Agent RL Lab: Policy & Reward Simulator\nReward config and GRPO settings on the "
            "left; the simulator answers as you move them. Below: a real run, live."
        )
        with gr.Row():
            with gr.Column(scale=1, min_width=280):
                gr.Markdown("### Rollout & reward config")
                env = gr.Dropdown(env_names(), value=d.env, label="environment", info=field_doc("env"))
                model = gr.Dropdown(
                    list(limits.models),
                    value=d.model,
                    label="base model",
                    info=field_doc("model") + " The lab offers these; `grpolab lab --allow-model` adds others.",
                )
                weights = [
                    gr.Number(
                        d.reward.weights[n],
                        label=f"weight {COMPONENTS[n].letter} ({n})",
                        info=COMPONENTS[n].description,
                        elem_id=f"w-{n}",
                    )
                    for n in WEIGHT_NAMES
                ]
                beta = gr.Slider(0, 1, value=d.grpo.beta, step=0.01, label="beta (KL)", info=field_doc("grpo.beta"))
                eps = gr.Slider(
                    0.05, 0.5, value=d.grpo.epsilon, step=0.01, label="epsilon (clip)", info=field_doc("grpo.epsilon")
                )
                G = gr.Slider(
                    2, 32, value=d.rollout.group_size, step=1, label="G", info=field_doc("rollout.group_size")
                )
                lr = gr.Number(
                    d.grpo.learning_rate, label="learning rate (real runs)", info=field_doc("grpo.learning_rate")
                )
                sim_lr = gr.Slider(
                    0.01, 2, value=DEFAULT_LR, step=0.01, label="simulator step size", info=SimSettings.LR_DOC
                )
                sim_steps = gr.Slider(10, 300, value=d.train.steps, step=10, label="simulated iterations")
            with gr.Column(scale=3):
                cards = gr.HTML(elem_id="sim-cards")
                chart = gr.HTML(elem_id="sim-chart")
        cfg_inputs = [env, model, *weights, beta, eps, G, lr]

        gr.Markdown("## Real run")
        with gr.Row():
            run_name = gr.Dropdown(
                views.list_runs(root),
                label="run (or a run directory path)",
                allow_custom_value=True,
                elem_id="run-pick",
            )
            refresh = gr.Button("refresh runs", size="sm")
            status = gr.Textbox(label="status", interactive=False)
        run_summary = gr.HTML(elem_id="run-summary")
        run_cards = gr.HTML(elem_id="run-cards")
        run_chart = gr.HTML(elem_id="run-chart")
        with gr.Accordion("Start or stop a real training run", open=False):
            with gr.Row():
                new_name = gr.Textbox(label="new run name", value="lab-run")
                steps = gr.Number(d.train.steps, label="GRPO steps", precision=0, info=field_doc("train.steps"))
                sft_steps = gr.Number(
                    d.train.sft_steps, label="SFT warm-start steps", precision=0, info=field_doc("train.sft_steps")
                )
                start_btn = gr.Button("start training", variant="primary")
                stop_btn = gr.Button("stop (keeps the last checkpoint)", variant="stop")
            job_msg = gr.Markdown()

        gr.Markdown("## Active rollout episode")
        with gr.Row():
            task = gr.Dropdown([], label="held-out prompt", elem_id="episode-task")
            iteration = gr.Slider(0, 1, value=0, step=1, label="iteration (evaluation index)", elem_id="episode-iter")
        episode = gr.HTML(elem_id="episode")

        gr.Markdown("## Try the trained agent (the selected run's latest checkpoint, real tools)")
        with gr.Row():
            question = gr.Textbox(
                label="question", placeholder="By what percent did ACME stock change in Q3?", elem_id="try-question"
            )
            ask = gr.Button("ask", elem_id="try-ask")
        answer = gr.HTML(elem_id="try-answer")

        gr.Markdown("## Preflight: gameability probes (current weights)")
        probes = gr.HTML(elem_id="probes")

        gr.Markdown("## TRL export (same rewards, weights, prompts, LoRA/GRPO settings)")
        download = gr.DownloadButton("download train_grpo.py", elem_id="download-script")
        script = gr.Code(language="python", label="train_grpo.py", interactive=False, elem_id="trl-script")

        gr.Markdown("## Explainers")
        for title, text in EXPLAINERS:
            with gr.Accordion(title, open=False):
                gr.Markdown(text)

        timer = gr.Timer(3.0)

        sim_inputs = [*cfg_inputs, sim_lr, sim_steps]
        # one listener per view, so its runs are serialised and the latest settings win (separate listeners
        # per input could finish out of order and leave an older result on the page)
        gr.on(
            [c.change for c in sim_inputs],
            simulate_view,
            sim_inputs,
            [cards, chart, probes],
            trigger_mode="always_last",
        )
        export_inputs = [*cfg_inputs, steps, sft_steps]

        def export(*values):
            return export_view(exports, *values)

        gr.on([c.change for c in export_inputs], export, export_inputs, [script, download], trigger_mode="always_last")

        def show_run(name):
            return run_view(root, name)

        run_outputs = [run_summary, run_cards, run_chart, task, iteration, status]
        run_name.change(show_run, [run_name], run_outputs)
        refresh.click(lambda: gr.update(choices=views.list_runs(root)), None, [run_name])
        task.change(lambda n, t, i: episode_view(root, n, t, i), [run_name, task, iteration], [episode])
        iteration.change(lambda n, t, i: episode_view(root, n, t, i), [run_name, task, iteration], [episode])

        def tick(name, current_status):
            try:
                path = _resolve(root, name)
            except UserError:
                path = None
            if path is None or not (RunDir(path).in_use() or current_status == "running"):
                return [gr.update()] * 3 + [gr.update()]
            summary, cards_html, chart_html, _, _, state = run_view(root, name)
            return summary, cards_html, chart_html, state

        timer.tick(tick, [run_name, status], [run_summary, run_cards, run_chart, status])

        def start_run(name, *values):
            return start_view(root, limits, name, *values)

        start_btn.click(start_run, [new_name, *cfg_inputs, steps, sft_steps], [job_msg, run_name])
        stop_btn.click(lambda n: stop_view(root, n), [run_name], [job_msg])
        ask.click(lambda n, q: try_view(root, n, q), [run_name, question], [answer])
        question.submit(lambda n, q: try_view(root, n, q), [run_name, question], [answer])

        page.load(simulate_view, sim_inputs, [cards, chart, probes])
        page.load(export, export_inputs, [script, download])
    return page


def private_workdir() -> Path:
    """The lab process's own folder (mode 0700, removed when the process exits, SIGTERM included): TRL exports
    and Gradio's cache of what it serves. Gradio reads GRADIO_TEMP_DIR when the page and the server are built."""
    workdir = Path(tempfile.mkdtemp(prefix="grpolab-lab-"))
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    os.environ["GRADIO_TEMP_DIR"] = str(workdir / "gradio")
    os.environ["GRADIO_EXAMPLES_CACHE"] = str(workdir / "examples")
    return workdir


def launch(
    root: Path,
    host: str = "127.0.0.1",
    port: int = 7860,
    block: bool = True,
    limits: LabLimits | None = None,
    host_names: frozenset[str] = LOOPBACK_NAMES,
) -> Any:
    """Serve the page on host:port; only requests naming one of `host_names` are answered (`lab.guard`)."""
    from starlette.middleware import Middleware

    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    if block and hasattr(signal, "SIGTERM"):  # before the folder exists, so no SIGTERM can leave it behind
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a normal exit: atexit removes the folder
    workdir = private_workdir()
    print(f"private folder: {workdir} (exports, served files; removed on exit)", flush=True)
    theme = gr.themes.Default(font=["system-ui", "sans-serif"], font_mono=["ui-monospace", "monospace"])
    page = build(root, workdir, limits)
    page.queue()
    page.launch(
        server_name=host,
        server_port=port,
        prevent_thread_lock=not block,
        css=CSS,
        theme=theme,
        ssr_mode=False,
        quiet=True,
        footer_links=[],
        allowed_paths=[str(workdir / "exports")],
        max_file_size="1mb",
        app_kwargs={"middleware": [Middleware(HostOriginGuard, names=host_names)]},
    )
    return page
