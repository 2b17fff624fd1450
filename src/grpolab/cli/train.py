"""`grpolab train`, `grpolab eval` and `grpolab demo`."""

from __future__ import annotations

import time
from contextlib import suppress
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.table import Table

from grpolab.cli.options import (
    ConfigOpt,
    EnvOpt,
    JsonOpt,
    ModelOpt,
    PluginOpt,
    SeedOpt,
    WeightsOpt,
    console,
    err_console,
    field_option,
    load_plugin_options,
    print_json,
    resolve_config,
)
from grpolab.config import DEMO_CONFIG, field_doc
from grpolab.envs import env_for
from grpolab.errors import UserError
from grpolab.files.outputs import output_folder
from grpolab.run.timing import time_lines
from grpolab.rundir import RunDir
from grpolab.vocabulary import CONVERGENCE, HELDOUT_HEADLINE, HELDOUT_N, HELDOUT_SUCCESS, SPECS, SUCCESS

QuietOpt = Annotated[bool, typer.Option("--quiet", help="No progress output (for scripts).")]
StepsOpt = field_option("--steps", "train.steps")
SftStepsOpt = field_option("--sft-steps", "train.sft_steps")
BackendOpt = field_option("--backend", "train.backend", str)


DEMO_OUT = Path("runs/demo")
RUNS = "runs"
"""The lab's own folder of run directories (README: `--out runs/NAME`): made when missing, one level, in the working
directory; any other missing folder above a run directory exits 2 (never made from the root down)."""


def _run_out(out: Path) -> None:
    """Check a run directory's --out before any work: its folder must exist, except the lab's own runs/ (made)."""
    if out.parent == Path(RUNS):
        with suppress(OSError):  # where that fails, creating the run says why
            out.parent.mkdir(exist_ok=True)
    output_folder(out, "--out")


def register(app: typer.Typer) -> None:
    app.command()(train)
    app.command(name="eval")(eval_)
    app.command()(demo)


def train(
    config: ConfigOpt = None,
    env: EnvOpt = None,
    model: ModelOpt = None,
    seed: SeedOpt = None,
    weights: WeightsOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help="Run directory to create (runs/NAME).")] = None,
    resume: Annotated[Path | None, typer.Option("--resume", help="Resume this run directory.")] = None,
    steps: StepsOpt = None,
    sft_steps: SftStepsOpt = None,
    backend: BackendOpt = None,
    plugin: PluginOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train with GRPO (optionally after an SFT warm start) into a run directory; --resume continues one."""
    from grpolab.run.loop import train as run_training  # torch: only for the commands that load a model

    if resume is not None:
        load_plugin_options(plugin)
        notes: list[str] = []
        cfg = RunDir(resume).config_to_run(notes)  # resuming runs the run: its own plugins are imported, and named
        for line in notes:
            err_console.print(line, markup=False, soft_wrap=True)
        if steps is not None:
            try:
                cfg.train.steps = steps
            except ValidationError as exc:  # the field's own bound
                raise UserError(f"--steps {steps}: {exc.errors()[0]['msg']}", "pass 0 or more") from None
        run_training(cfg, resume, resume=True, quiet=quiet)
        return
    if out is None:
        raise UserError("train needs --out DIR (or --resume DIR)", "for example --out runs/first")
    _run_out(out)
    overrides = {"train__steps": steps, "train__sft_steps": sft_steps, "train__backend": backend}
    cfg = resolve_config(config, env, model, seed, weights, plugins=plugin, **overrides)
    run = run_training(cfg, out, quiet=quiet)
    if not quiet:
        console.print(f"run dir: {run.path}")


def eval_(
    config: ConfigOpt = None,
    env: EnvOpt = None,
    model: ModelOpt = None,
    seed: SeedOpt = None,
    weights: WeightsOpt = None,
    run: Annotated[
        Path | None,
        typer.Option("--run", help="Evaluate this run's latest checkpoint (on the run's env, or on --env's)."),
    ] = None,
    split: Annotated[str, typer.Option("--split", help="train, heldout or all.")] = "heldout",
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Tasks to evaluate.")] = None,
    data: Annotated[
        list[Path] | None, typer.Option("--data", help="Data file(s) for envs that read them (bfcl, data).")
    ] = None,
    category: Annotated[
        list[str] | None,
        typer.Option("--category", help=f"{field_doc('task_kinds')} Repeatable; for bfcl: a BFCL category."),
    ] = None,
    plugin: PluginOpt = None,
    json: JsonOpt = False,
) -> None:
    """Greedy evaluation with the strict verifier: success, tool_call_prob, schema validity.

    With --run, the run's policy is evaluated under the run's own config; --data, --category and --env change
    only what it is evaluated on (e.g. `--env finance_shifted`: the finance tasks behind tools it never saw)."""
    from grpolab.engine.evaluate import evaluate, task_verdicts
    from grpolab.engine.policy import engine_model, load_run_policy

    if split not in ("train", "heldout", "all"):
        raise UserError(f"unknown split {split!r}", "use --split train, heldout or all")
    if run is not None:
        ignored = [
            flag
            for flag, value in (("--config", config), ("--model", model), ("--seed", seed), ("--weights", weights))
            if value is not None
        ]
        if ignored:  # the run's policy is evaluated under the run's own config: these would be silently dropped
            raise UserError(
                f"{', '.join(ignored)} cannot be combined with --run (its policy is evaluated under its own config)",
                f"drop {', '.join(ignored)}, or evaluate a model without --run",
            )
        load_plugin_options(plugin)
        skipped: list[str] = []
        cfg = RunDir(run).config_to_run(skipped)  # evaluating runs the run: its own plugins are imported, and named
        if data:  # evaluate the trained policy on other data of the same environment (e.g. another BFCL file)
            cfg.data = [str(d) for d in data]
        if category:  # or on other categories (e.g. BFCL's live_* ones, never trained on)
            cfg.task_kinds = list(category)
        if env and env != cfg.env:  # or on another env's tasks (finance_shifted: the same tasks, new tools)
            err_console.print(f"evaluating {run} (trained on {cfg.env}) on env {env}", markup=False, soft_wrap=True)
            cfg.env = env
            if not category and cfg.task_kinds:  # the run's kinds carry over where the env has them (finance_shifted)
                kinds = {t.kind for t in env_for(cfg.model_copy(update={"task_kinds": []})).all_tasks().values()}
                if not set(cfg.task_kinds) <= kinds:  # and are dropped where it has none of its own (capitals)
                    cfg.task_kinds = []
        environment = env_for(cfg)  # a bad --env, --data or --category is refused before the policy loads
        policy, tokenizer, _, _ = load_run_policy(run, skipped)
        for line in skipped:
            err_console.print(line, markup=False, soft_wrap=True)
    else:
        files = [str(d) for d in data] if data else None
        cfg = resolve_config(config, env, model, seed, weights, plugins=plugin, data=files, task_kinds=category or None)
        environment = env_for(cfg)
        policy, tokenizer = engine_model(cfg.model, cfg)
    summary, episodes = evaluate(policy, tokenizer, environment, cfg, split, limit)  # type: ignore[arg-type]
    if json:
        print_json({"model": cfg.model, "env": cfg.env, "split": split, **summary, "tasks": task_verdicts(episodes)})
        return
    for k, v in summary.items():
        console.print(f"{k:<24} {v:.3f}")


def demo(
    config: ConfigOpt = None,
    seed: SeedOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help=f"Run directory (default {DEMO_OUT}).")] = None,
    steps: StepsOpt = None,
    plugin: PluginOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Everything on the embedded model: the base model's held-out score, a short SFT seeding, GRPO, the held-out
    score after it, with the convergence of the real run (reward, KL, tool-token mass per step)."""
    from grpolab.run.loop import train as run_training

    out = out or DEMO_OUT
    _run_out(out)
    cfg = resolve_config(config or DEMO_CONFIG, seed=seed, plugins=plugin, train__steps=steps)
    if RunDir(out).has_steps():
        out = out.with_name(f"{out.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    t0 = time.perf_counter()
    run = run_training(cfg, out, quiet=quiet)
    minutes = (time.perf_counter() - t0) / 60
    summary = run.eval_summary()
    last = run.eval_labels()[-1]
    seeded = "after SFT seeding" if cfg.train.sft_steps else "start"
    table = Table("held-out", "base", f"{seeded} ({cfg.train.sft_steps} steps)", f"after GRPO (step {last})")
    labels = ["base", "0", last]
    for key in HELDOUT_HEADLINE:
        table.add_row(SPECS[key].title, *(_cell(summary.get(label, {}).get(key)) for label in labels))
    console.print(table)
    for line in convergence_lines(run.metrics()):
        console.print(line, markup=False)
    base, start, end = (summary.get(label, {}).get(HELDOUT_SUCCESS) for label in labels)
    if base is not None and start is not None and end is not None and end > base:
        console.print(f"share of the gain over the base model made by GRPO: {(end - start) / (end - base):.0%}")
    for line in time_lines(run, minutes * 60):
        console.print(line, markup=False)
    console.print(f"run dir: {run.path}   ({minutes:.1f} min, {int(summary['0'][HELDOUT_N])} held-out tasks)")


SPARKS = "▁▂▃▄▅▆▇█"


def convergence_lines(rows: list[dict]) -> list[str]:
    """The run's convergence as sparklines: reward, KL and tool-token mass per GRPO step (report.html draws it)."""
    out = ["convergence per GRPO step:"]
    for key in (*CONVERGENCE, SUCCESS):
        values = [r.get(key) for r in rows if isinstance(r.get(key), (int, float))]
        if not values:
            continue
        low, high = min(values), max(values)
        span = (high - low) or 1.0
        line = "".join(SPARKS[min(len(SPARKS) - 1, int((v - low) / span * len(SPARKS)))] for v in values)
        out.append(f"  {key:<16} {line}  {values[0]:.3g} -> {values[-1]:.3g} (min {low:.3g}, max {high:.3g})")
    return out


def _cell(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"
