"""The run loop: one path from a config to a report, whichever backend makes the GRPO steps.

    probes -> (base eval -> SFT warm start) -> eval 0 -> checkpoint 0 -> steps -> report
                                                    each step: eval when due -> alarms -> rows -> checkpoint

Two step sources plug in (`grpolab.run.sources`): the native engine (`grpolab.engine.trainer.GRPOTrainer`) and
TRL's GRPOTrainer (`grpolab.trl.source.TrlSource`). A source runs steps and hands each finished one to `on_step`;
everything the run directory holds (evaluations, alarms, metrics and episode rows, checkpoints, stop requests) is
decided here.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from grpolab.alarms.drift import step_behaviour
from grpolab.alarms.greedy_probe import probe_cost, probe_fields
from grpolab.alarms.rules import AlarmWatch
from grpolab.config import LabConfig
from grpolab.engine.device import engine_device
from grpolab.engine.evaluate import evaluate
from grpolab.engine.policy import build_policy, resolve_precision
from grpolab.engine.precision import choose_sft_precision
from grpolab.engine.sft import check_sft_mix, sft_warm_start
from grpolab.engine.trainer import StepResult
from grpolab.envs import Environment, env_for
from grpolab.formats import checked_format
from grpolab.metrics import episode_row
from grpolab.models import load_tokenizer, token_counter
from grpolab.preflight.check import probe_report
from grpolab.report.html import render_report
from grpolab.rewards.rubric import check_weights, rubric_of
from grpolab.run.progress import Progress
from grpolab.run.sources import StepSource, backend_notes, make_source
from grpolab.rundir import RunDir
from grpolab.rundir.layout import PRECISION_FILE
from grpolab.vocabulary import ALARMS, HELDOUT_SCHEMA, HELDOUT_SECONDS, HELDOUT_SUCCESS, HELDOUT_TOOL_CALL_PROB


def summary_line(summary: dict[str, float]) -> str:
    return (
        f"success {summary[HELDOUT_SUCCESS]:.0%}, tool_call_prob {summary[HELDOUT_TOOL_CALL_PROB]:.0%}, "
        f"schema {summary[HELDOUT_SCHEMA]:.2f}"
    )


def _record_eval(run: RunDir, label: str, summary: dict[str, float], episodes: list[Any]) -> None:
    run.record_eval(label, [episode_row(e) for e in episodes], summary)


def _evaluate(run: RunDir, label: str, model: Any, tokenizer: Any, env: Environment, cfg: LabConfig) -> dict:
    """A held-out evaluation, recorded under `label`, with the greedy probe's fields when `alarms.probe_tasks` is on
    (its episodes in eval/probe-LABEL.jsonl)."""
    heldout_start = time.perf_counter()
    summary, episodes = evaluate(model, tokenizer, env, cfg)
    heldout_s = time.perf_counter() - heldout_start
    summary = {**summary, HELDOUT_SECONDS: heldout_s}
    if cfg.alarms.probe_tasks and env.tasks("train"):  # an env with no train task has nothing to probe
        probe_start = time.perf_counter()
        found, probed = evaluate(model, tokenizer, env, cfg, "train", cfg.alarms.probe_tasks)
        rows = [episode_row(e) for e in probed]
        run.record_probe(label, rows)
        cost = probe_cost(time.perf_counter() - probe_start, heldout_s)
        summary = {**summary, **probe_fields(rows, env.thought_required, found[HELDOUT_SUCCESS]), **cost}
    _record_eval(run, label, summary, episodes)
    return summary


def _prepare(cfg: LabConfig, run: RunDir, env: Environment, progress: Progress, eval_base: bool) -> None:
    """Before the first step: probes, the base model's held-out score and the SFT warm start (when configured)."""
    tokenizer = load_tokenizer(cfg.model)
    fmt = checked_format(tokenizer, env, cfg.rollout.format, cfg.rollout.tool_syntax)
    probes = probe_report(env, cfg, token_counter(tokenizer))
    run.write_preflight(probes)
    for line in [*probes["gameable"], *probes["shortcuts_paid"]]:
        progress.note(line)
    iso = probes.get("isolation")
    if iso and iso["level"] != "strong":
        progress.note(f"WARNING: model-written code runs with WEAK isolation: {iso['summary']}")
    if cfg.train.sft_steps <= 0:
        return
    model, tokenizer, reference = build_policy(cfg)
    if eval_base:
        start = time.perf_counter()
        with model.disable_adapter() if reference is None else nullcontext():
            summary, episodes = evaluate(model, tokenizer, env, cfg)
        _record_eval(run, "base", {**summary, HELDOUT_SECONDS: time.perf_counter() - start}, episodes)
        progress.note(f"base model held-out: {summary_line(summary)}")
    progress.note(f"SFT warm start: {cfg.train.sft_steps} steps on reference transcripts")
    t = cfg.train
    start = time.perf_counter()
    losses = sft_warm_start(
        model,
        tokenizer,
        env,
        t.sft_steps,
        t.sft_batch_size,
        t.sft_learning_rate,
        cfg.seed,
        fmt,
        t.sft_mix,
        t.sft_precision,
    )
    run.write_sft({"loss": losses, "seconds": time.perf_counter() - start})
    run.save_warm_start(model)


def _start_point(
    cfg: LabConfig,
    run: RunDir,
    env: Environment,
    progress: Progress,
    resume: bool,
    eval_base: bool,
    warm_start: Path | None,
) -> tuple[StepSource, int]:
    """The step source and the step it stands at: the newest checkpoint that loads (resuming), or step 0 after
    the preparation (probes, base eval, SFT). Whatever is set aside or cut on the way is kept and said."""
    state = None
    if resume and run.checkpoints():
        source = make_source(cfg, run, env)  # on the run's warm start: a damaged one is a UserError here
        refused: list[str] = []
        state = run.load_checkpoint(source.model, source.optimizer, refused, set_aside=True)
        for note in refused:
            progress.note(note)
        if state is None:
            progress.note(f"no checkpoint of {run.path} could be loaded: starting it over")
    if state is not None:
        source.restore(state)  # a source that cannot resume (trl) says so here
        start = int(state["step"])
        for note in run.rewind(start):  # the rows past the checkpoint are redone; the cut ones are kept
            progress.note(note)
        progress.note(f"resumed {run.path} from step {start}")
        return source, start
    if resume and cfg.train.sft_steps > 0:
        for note in run.set_aside_damaged_warm_start():  # redone by _prepare below
            progress.note(note)
    run.warm_start()  # a damaged one that is not redone here: a UserError before anything changes
    for note in run.rewind(0):  # a run killed before its first checkpoint starts over cleanly
        progress.note(note)
    if warm_start is not None:
        run.adopt_warm_start(RunDir(warm_start))
        cfg = cfg.model_copy(deep=True)
        cfg.train.sft_steps = 0
        run.write_config(cfg)
    _prepare(cfg, run, env, progress, eval_base)
    source = make_source(cfg, run, env)
    if eval_base:
        summary = _evaluate(run, "0", source.model, source.tokenizer, env, cfg)
        warm = run.warm_start() is not None
        progress.note(f"{'after SFT' if warm else 'base model'} held-out: {summary_line(summary)}")
    run.save_checkpoint(0, source.model, source.optimizer, source.state())
    return source, 0


def _resolve_precisions(cfg: LabConfig, run: RunDir, env: Environment) -> tuple[LabConfig, str]:
    """The config with `auto` precisions resolved on this host (recorded in its config.json, the reasons in
    precision.json) and the line that says them. A resumed run keeps what its config.json recorded."""
    t = cfg.train
    if "auto" not in (t.precision, t.sft_precision):
        return cfg, f"precision: {t.precision}" + (f"; SFT warm start: {t.sft_precision}" if t.sft_steps > 0 else "")
    update = resolve_precision(cfg, env)  # a forced one is kept as it is, with no probe
    sft = choose_sft_precision(t.sft_precision, update.chosen, engine_device(cfg.train.device).type)
    cfg = cfg.model_copy(deep=True)
    cfg.train.precision, cfg.train.sft_precision = update.chosen, sft.chosen
    run.write_config(cfg)
    run.write_json(PRECISION_FILE, {**update.as_dict(), "sft": sft.as_dict()})
    line = f"precision: {update.chosen} ({update.why})"
    return cfg, line + (f"; SFT warm start: {sft.chosen} ({sft.why})" if t.sft_steps > 0 else "")


def train(
    cfg: LabConfig,
    out: Path,
    resume: bool = False,
    quiet: bool = False,
    eval_base: bool = True,
    warm_start: Path | None = None,
) -> RunDir:
    """Run (or resume) SFT + GRPO into `out` on the configured backend. Returns the run directory.

    `warm_start`: another run directory whose SFT warm start this run starts from (its SFT is skipped), so that
    experiments varying only GRPO settings share one warm start."""
    notes = backend_notes(cfg)  # before anything is written: a setting the backend cannot honour is refused here
    # claimed for the whole run: a second trainer on `out` gets a UserError naming this process
    env = env_for(cfg)
    check_weights(cfg, env)  # before the run is made: its config.json records the weights as the env applies them
    run = RunDir.open_to_resume(out) if resume else RunDir.create(out, cfg)
    try:
        run.write_env_facts(env.thought_required, rubric_of(env).letters())  # read by views that import nothing
        run.clear_stop()  # a stale stop request from an earlier process must not end this one
        cfg, precision_note = _resolve_precisions(cfg, run, env)
        if cfg.train.sft_steps > 0:
            check_sft_mix(env, cfg.train.sft_mix)  # before any model loads
        progress = Progress(cfg, quiet)
        progress.note(precision_note)
        for note in notes:
            progress.note(note)
        for note in run.set_aside_damaged_checkpoints() if resume else []:
            progress.note(note)  # resume falls back to the newest intact checkpoint
        source, start = _start_point(cfg, run, env, progress, resume, eval_base, warm_start)
        shaping = frozenset(c.name for c in rubric_of(env).components.values() if c.shaping)
        watch = AlarmWatch(cfg, run.metrics(), run.heldout_at_start(), shaping, run.probe_at_start())
        steps = cfg.train.steps

        def on_step(result: StepResult) -> bool:
            m = result.metrics
            step = int(m["step"])
            last = step == steps
            if (cfg.train.eval_every and step % cfg.train.eval_every == 0) or last:
                m.update(_evaluate(run, str(step), source.model, source.tokenizer, env, cfg))
            rows = [episode_row(e, step) for e in result.episodes if e.score is not None]
            m.update(step_behaviour(rows, env.thought_required))  # what the episodes do: the drift alarm reads it
            m.update(watch.check(m))
            run.append_metrics(m)
            run.append_episodes(rows[: cfg.train.episodes_per_step_logged])
            alarm_stop = bool(m[ALARMS]) and cfg.alarms.stop_on_alarm
            asked = run.stop_requested()
            if step % cfg.train.checkpoint_every == 0 or last or alarm_stop or asked:
                run.save_checkpoint(step, source.model, source.optimizer, source.state())
            progress.update(m)
            if alarm_stop or asked:
                why = "alarms.stop_on_alarm is on" if alarm_stop else "stop requested"
                progress.note(f"stopped at step {step}: {why}")
                run.clear_stop()
            return alarm_stop or asked

        progress.start(steps, start)
        source.run(start + 1, steps, on_step)
        progress.stop()
        progress.note(f"report: {render_report(run.path)}")
        return run
    finally:
        run.release()  # the kernel would too when the process ends; a caller in this process goes on
