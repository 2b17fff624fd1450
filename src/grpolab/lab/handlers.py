"""What the lab's page does when a control changes: each handler takes the form's values by field name
(`lab.form`) or a run's name, and returns what the page shows. No layout here (`lab.app`), no training logic:
numbers come from `grpolab.simulator.simulate`, `grpolab.preflight.probes`, `grpolab.trl.export` and the run directories
(`lab.views`); training runs are separate processes (`lab.jobs`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import gradio as gr

from grpolab.agent.chat import ChatSession
from grpolab.config import LabConfig
from grpolab.errors import UserError
from grpolab.lab import jobs, views
from grpolab.lab.form import (
    WEIGHT,
    base_config,
    check_simulator,
    config_from_form,
    env_key,
    env_of,
    rubric_for,
    starting_values,
)
from grpolab.lab.limits import LabLimits, check_env, inside
from grpolab.models import model_token_counter
from grpolab.preflight.check import probe_report
from grpolab.rewards.components import standard_names
from grpolab.rundir import RunDir
from grpolab.simulator.forecast import demo_pilot, forecast
from grpolab.simulator.simulate import DEFAULT_PRIOR, SimSettings, measure_profiles, simulate
from grpolab.trl.export import export_trl

FORM_ERRORS = (UserError, ValueError, TypeError, KeyError, IndexError, OverflowError)
"""What a malformed form value raises on its way into a config (int(None), float("x"), int(inf)...)."""


@lru_cache(maxsize=32)
def _profiles(env: str, model: str, length_unit: int, extra: tuple[str, ...], thought_min_words: int) -> Any:
    """Class profiles of an environment (`form.env_key`), lengths counted by `model`'s tokenizer; `extra`: the
    weighted components beyond the standard ones."""
    weights = dict.fromkeys(extra, 1.0)
    return measure_profiles(
        env_of(env),
        model_token_counter(model),
        length_unit,
        weights=weights,
        thought_min_words=thought_min_words,
    )


@lru_cache(maxsize=64)
def _probes(env: str, model: str, reward: str) -> dict:
    """The probe report of an environment (`form.env_key`) under a reward section (JSON)."""
    cfg = LabConfig.model_validate({**json.loads(env), "model": model, "reward": json.loads(reward)})
    return probe_report(env_of(env), cfg, model_token_counter(model), n_tasks=3)


def simulate_view(values: Mapping[str, Any]) -> tuple[str, str, str]:
    """(stat cards, chart, probe panel) for the sliders; the simulator runs in milliseconds."""
    try:
        cfg = config_from_form(values)
        lr, steps = check_simulator(values)
        r = cfg.reward
        extra = tuple(sorted(k for k, w in r.weights.items() if w and k not in standard_names()))
        pilot = demo_pilot(cfg)
        if pilot is not None:
            result = forecast(pilot, cfg, steps)  # the demo's own samples, re-scored: the step size is fitted
        else:
            profiles = _profiles(env_key(cfg), cfg.model, r.length_unit, extra, r.thought_min_words)
            result = simulate(profiles, DEFAULT_PRIOR, SimSettings(cfg, steps, lr=lr))
    except FORM_ERRORS as exc:
        msg = views.message(f"cannot simulate this setting: {exc}", "error")
        return msg, msg, msg
    what = "forecast" if result.get("forecast") else "simulated"
    chart = views.chart(result["iterations"], f"{what}: reward, kl, tool_token_mass per iteration")
    try:
        probes = views.preflight_panel(_probes(env_key(cfg), cfg.model, cfg.reward.model_dump_json()))
    except (UserError, ValueError, KeyError, IndexError) as exc:
        probes = views.message(f"probes unavailable for {cfg.env}: {exc}", "warn")
    return views.sim_cards(result, cfg.grpo.kl_bound), chart, probes


def warm_up() -> None:
    """The page's first view, made once at launch on a thread of its own (`lab.app.launch`): the imports, the
    environment, the tokenizer, the forecast's pilot and the probe report it needs are then ready (cached) when
    the browser asks for them. A form the view cannot draw is left to the page's own request to report."""
    try:
        simulate_view(starting_values(base_config()))
    except Exception:  # whatever it is, the page's own request meets it again and shows it
        pass


def weights_shown(env: str | None, names: list[str]) -> list[Any]:
    """Which weight controls (`reward.weights.NAME`, in `names`) to show when the form picks `env`: those of the
    components it is scored under (the base config's environment, or another's rubric); all of them when it cannot
    be built (the simulator then names why)."""
    base = base_config()
    try:
        check_env(env, base.env)
        known = rubric_for(base if env == base.env else LabConfig(env=str(env))).components
    except FORM_ERRORS:
        return [gr.update() for _ in names]
    return [gr.update(visible=n.removeprefix(WEIGHT) in known) for n in names]


KEEP_EXPORTS = 16
"""Export folders kept in the private folder (older ones are removed; Gradio has copied what it serves)."""


def export_view(exports: Path, values: Mapping[str, Any]) -> tuple[str, str | None]:
    """(script, its path for the download button), written into the lab's private `exports` folder."""
    try:
        cfg = config_from_form(values)
    except FORM_ERRORS as exc:
        return f"# {exc}", None
    folder = exports / hashlib.sha256(cfg.model_dump_json().encode()).hexdigest()[:16]
    out = folder / "train_grpo.py"
    if out.is_file():
        os.utime(folder)  # recently used: pruned last
    else:
        folder.mkdir(parents=True, exist_ok=True)  # the lab's own private folder (export_trl makes none)
        export_trl(cfg, out)
        for old in sorted(exports.iterdir(), key=lambda p: p.stat().st_mtime)[:-KEEP_EXPORTS]:
            shutil.rmtree(old, ignore_errors=True)
    return out.read_text(), str(out)


def _resolve(root: Path, name: str | None) -> Path | None:
    """The run a picker value names, inside the runs folder (UserError otherwise); None when nothing is picked."""
    return inside(root, name) if name else None


def run_view(root: Path, name: str | None) -> tuple[str, str, str, Any, Any, str, str]:
    """(summary, cards, chart, task dropdown, iteration slider, status, what GRPO changed) for the selected run."""
    try:
        path = _resolve(root, name)
    except UserError as exc:
        msg = views.message(str(exc), "error")
        return msg, "", "", gr.update(choices=[], value=None), gr.update(maximum=1, value=0), "", ""
    if path is None:
        empty = views.message("Pick a run (or type a run directory path under the runs folder).")
        return empty, "", "", gr.update(choices=[], value=None), gr.update(maximum=1, value=0), "", ""
    v = views.load_run(path)
    if not v.ok:
        msg = views.message(f"{path}: " + ("; ".join(v.problems) or "not a run directory"), "error")
        return msg, "", "", gr.update(choices=[], value=None), gr.update(maximum=1, value=0), "", ""
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
        views.what_changed(v),
    )


def tick_view(root: Path, name: str | None, current_status: str) -> tuple[Any, Any, Any, Any, Any]:
    """(summary, cards, chart, status, what GRPO changed) again while the selected run is running; unchanged
    otherwise."""
    try:
        path = _resolve(root, name)
    except UserError:
        path = None
    if path is None or not (RunDir(path).in_use() or current_status == "running"):
        return gr.update(), gr.update(), gr.update(), gr.update(), gr.update()
    summary, cards, chart, _, _, state, changes = run_view(root, name)
    return summary, cards, chart, state, changes


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
    notes: list[str] = []
    try:
        RunDir(path).config_to_run(notes)  # asking the agent runs the run: its recorded plugins, named here
        events = list(_agent(path, checkpoints[-1][1]).send(question))
    except UserError as exc:
        return views.message(str(exc), "error")
    return "".join(views.message(note, "warn") for note in notes) + views.chat_html(events)


def start_view(root: Path, limits: LabLimits, name: str, values: Mapping[str, Any]) -> tuple[str, Any]:
    """Start a training job from the form: (message, run picker update)."""
    try:
        cfg = config_from_form(values)
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
