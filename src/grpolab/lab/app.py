"""`grpolab lab`: the page. Config and simulator on top, then a real run (live), rollouts, preflight, TRL export.

Layout and wiring only: the form's controls come from their table (`lab.form`), what a change does is in
`lab.handlers`, and the numbers come from the library and the run directories (`lab.views`).

What the page may touch is bounded (`lab.limits`: settings, models, environments, run paths inside --runs) and
who may talk to it is checked (`lab.guard`: Host and Origin). Files are served from one private folder per lab
process (mode 0700, removed on exit) that holds the TRL exports and Gradio's own cache, never the temp dir.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import gradio as gr
from starlette.middleware import Middleware

from grpolab.config import LabConfig
from grpolab.lab import handlers, views
from grpolab.lab.explain import EXPLAINERS
from grpolab.lab.form import (
    JOB_CONTROLS,
    SIMULATOR_CONTROLS,
    WEIGHT,
    Form,
    base_config,
    config_controls,
    render,
    set_base_config,
)
from grpolab.lab.guard import LOOPBACK_NAMES, HostOriginGuard
from grpolab.lab.limits import LabLimits, offered_envs
from grpolab.report.trajectories import CSS as TRAJECTORY_CSS

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


def build(root: Path, workdir: Path, limits: LabLimits | None = None) -> gr.Blocks:
    """The page over the runs folder `root`; `workdir` is the lab's private folder (exports go under it)."""
    exports = workdir / "exports"
    exports.mkdir(parents=True, exist_ok=True)
    base = base_config()  # the demo's (the simulator is calibrated on its run), or `lab --config FILE`
    limits = replace(limits or LabLimits(), base_env=base.env)  # its env (module:Class too) is offered and runs
    config_controls_ = config_controls(base)  # a weight per component of the base config's environment
    choices = {"env": offered_envs(base.env), "model": list(dict.fromkeys([*limits.models, base.model]))}
    with gr.Blocks(title="grpolab: Open-Weight Agent RL Lab") as page:
        gr.Markdown(
            "# Open-Weight Agent RL Lab: Policy & Reward Simulator\nReward config and GRPO settings on the "
            "left; the simulator answers as you move them. Below: a real run, live."
        )
        with gr.Row():
            with gr.Column(scale=1, min_width=280):
                gr.Markdown("### Rollout & reward config")
                controls = render((*config_controls_, *SIMULATOR_CONTROLS), base, choices)
            with gr.Column(scale=3):
                cards = gr.HTML(elem_id="sim-cards")
                chart = gr.HTML(elem_id="sim-chart")

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
        run_changes = gr.HTML(elem_id="run-changes")
        with gr.Accordion("Start or stop a real training run", open=False):
            with gr.Row():
                new_name = gr.Textbox(label="new run name", value="lab-run")
                controls |= render(JOB_CONTROLS, base, choices)
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

        # the form reaches its handlers as one {component: value} dict (a set of inputs), read back by name
        form = Form(controls)
        sim_inputs = form.inputs(config_controls_, SIMULATOR_CONTROLS)
        export_inputs = form.inputs(config_controls_, JOB_CONTROLS)
        weight_boxes = [controls[c.name] for c in config_controls_ if c.name.startswith(WEIGHT)]

        def simulate(data):
            return handlers.simulate_view(form.named(data))

        def export(data):
            return handlers.export_view(exports, form.named(data))

        def start(data):
            return handlers.start_view(root, limits, data[new_name], form.named(data))

        # one listener per view, so its runs are serialised and the latest settings win (separate listeners
        # per input could finish out of order and leave an older result on the page)
        gr.on([c.change for c in sim_inputs], simulate, sim_inputs, [cards, chart, probes], trigger_mode="always_last")
        gr.on([c.change for c in export_inputs], export, export_inputs, [script, download], trigger_mode="always_last")

        def weights_shown(env):
            # an environment's own components: their weights show while it is the one picked
            return handlers.weights_shown(env, [c.name for c in config_controls_ if c.name.startswith(WEIGHT)])

        controls["env"].change(weights_shown, [controls["env"]], weight_boxes)

        run_outputs = [run_summary, run_cards, run_chart, task, iteration, status, run_changes]

        def show_run(name):
            return handlers.run_view(root, name)

        run_name.change(show_run, [run_name], run_outputs)
        refresh.click(lambda: gr.update(choices=views.list_runs(root)), None, [run_name])
        for picker in (task, iteration):
            picker.change(lambda n, t, i: handlers.episode_view(root, n, t, i), [run_name, task, iteration], [episode])
        timer.tick(
            lambda n, s: handlers.tick_view(root, n, s),
            [run_name, status],
            [run_summary, run_cards, run_chart, status, run_changes],
        )

        start_btn.click(start, export_inputs | {new_name}, [job_msg, run_name])
        stop_btn.click(lambda n: handlers.stop_view(root, n), [run_name], [job_msg])
        for trigger in (ask.click, question.submit):
            trigger(lambda n, q: handlers.try_view(root, n, q), [run_name, question], [answer])

        page.load(simulate, sim_inputs, [cards, chart, probes])
        page.load(show_run, [run_name], run_outputs)  # the picker opens on a run: show it (no change event fires)
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
    base: LabConfig | None = None,
) -> Any:
    """Serve the page on host:port; only requests naming one of `host_names` are answered (`lab.guard`). The form
    starts from `base` (the demo's config when None)."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    if block and hasattr(signal, "SIGTERM"):  # before the folder exists, so no SIGTERM can leave it behind
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a normal exit: atexit removes the folder
    set_base_config(base)
    threading.Thread(target=handlers.warm_up, name="grpolab-lab-warm-up", daemon=True).start()
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
