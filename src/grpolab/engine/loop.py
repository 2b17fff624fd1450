"""A training run end to end: load, (SFT), GRPO steps with eval and checkpoints, all into a run directory."""

from __future__ import annotations

import copy
import json
import shutil
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from grpolab.config import LabConfig, config_to_dict
from grpolab.engine.evaluate import episode_row, evaluate
from grpolab.engine.progress import Progress
from grpolab.engine.sft import sft_warm_start
from grpolab.engine.trainer import GRPOTrainer
from grpolab.envs import get_env
from grpolab.errors import UserError
from grpolab.models import load_model
from grpolab.rundir import RunDir
from grpolab.trust.preflight import probe_report


def _with_lora(model: Any, cfg: LabConfig) -> Any:
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    peft_config = PeftLoraConfig(
        r=cfg.lora.rank,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=cfg.lora.target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, peft_config)


def build_policy(cfg: LabConfig, warm_start: Path | None = None) -> tuple[Any, Any, Any]:
    """(policy, tokenizer, reference): LoRA adapters on the base (reference = adapters off), or a full copy.

    With `warm_start` (the SFT weights saved in a run dir), those are applied first and merged into the base, so
    the frozen reference of GRPO is the SFT model, the policy GRPO actually starts from.
    """
    torch.manual_seed(cfg.seed)
    model, tokenizer = load_model(cfg.model, seed=cfg.seed)
    if warm_start is not None:
        model = _apply_warm_start(model, cfg, warm_start)
    if not cfg.lora.enabled:
        reference = copy.deepcopy(model).eval()
        for p in reference.parameters():
            p.requires_grad_(False)
        return model, tokenizer, reference
    return _with_lora(model, cfg), tokenizer, None


def _apply_warm_start(model: Any, cfg: LabConfig, path: Path) -> Any:
    if not cfg.lora.enabled:
        model.load_state_dict(torch.load(path, map_location="cpu"), strict=False)
        return model
    peft_model = _with_lora(model, cfg)
    peft_model.load_state_dict(torch.load(path, map_location="cpu"), strict=False)
    return peft_model.merge_and_unload()


def save_warm_start(model: Any, run: RunDir) -> Path:
    path = run.warm_start_path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad}, tmp)
    tmp.replace(path)
    return path


def load_run_policy(path: Path) -> tuple[Any, Any, LabConfig]:
    """(policy, tokenizer, config) of a run directory at its latest checkpoint (SFT warm start included)."""
    cfg = load_run_config(path)
    run = RunDir(path)
    model, tokenizer, _ = build_policy(cfg, run.warm_start())
    if run.load_checkpoint(model, None) is None:
        raise UserError(f"{path} has no checkpoint", "train it first, or evaluate a model with --model")
    return model, tokenizer, cfg


def env_for(cfg: LabConfig):
    return get_env(cfg.env, cfg.task_kinds or None, cfg.prompt_example, cfg.data or None)


def record_eval(run: RunDir, label: str, summary: dict[str, float], episodes) -> None:
    run.write_eval(label, [episode_row(e) for e in episodes])  # type: ignore[arg-type]
    path = run.path / "eval" / "summary.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[str(label)] = summary
    run.write_json("eval/summary.json", data)


def start_run(cfg: LabConfig, out: Path) -> RunDir:
    run = RunDir(out)
    if run.metrics_path.exists() or run.checkpoints():
        raise UserError(
            f"run directory {out} already has a run", f"resume it with --resume {out}, or pick another --out"
        )
    run.path.mkdir(parents=True, exist_ok=True)
    run.write_json("config.json", config_to_dict(cfg))
    return run


def load_run_config(path: Path) -> LabConfig:
    data = RunDir(path).read_json("config.json")
    try:
        return LabConfig.model_validate(data)
    except Exception as exc:
        raise UserError(f"{path}/config.json is not a valid config ({str(exc).splitlines()[0]})", "fix or remove it")


def train(cfg: LabConfig, out: Path, resume: bool = False, quiet: bool = False,
          eval_base: bool = True, warm_start: Path | None = None) -> RunDir:  # fmt: skip
    """Run (or resume) SFT + GRPO into `out`. Returns the run directory.

    `warm_start`: another run directory whose SFT warm start this run starts from (its SFT is skipped), so that
    experiments varying only GRPO settings share one warm start."""
    run = RunDir(out) if resume else start_run(cfg, out)
    run.clear_stop()  # a stale stop request from an earlier process must not end this one
    env = env_for(cfg)
    progress = Progress(cfg, quiet)
    if resume and run.checkpoints():
        model, tokenizer, reference = build_policy(cfg, run.warm_start())
        trainer = GRPOTrainer(model, tokenizer, env, cfg, reference)
        state = run.load_checkpoint(model, trainer.optimizer)
        assert state is not None
        trainer.restore(state)
        start = int(state["step"])
        run.rewind(start)
        progress.note(f"resumed {out} from step {start}")
    else:
        run.rewind(0)  # a run killed before its first checkpoint starts over cleanly
        if warm_start is not None:
            source = RunDir(warm_start).warm_start()
            if source is None:
                raise UserError(f"{warm_start} has no SFT warm start", "pick a run trained with train.sft_steps > 0")
            run.warm_start_path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, run.warm_start_path)
            cfg = cfg.model_copy(deep=True)
            cfg.train.sft_steps = 0
            run.write_json("config.json", config_to_dict(cfg))
            run.write_json("sft/source.json", {"warm_start_from": str(warm_start)})
        model, tokenizer, reference = build_policy(cfg, run.warm_start() if warm_start is not None else None)
        probes = probe_report(env, cfg, lambda text: len(tokenizer(text, add_special_tokens=False).input_ids))
        run.write_json("preflight.json", probes)
        for line in probes["gameable"]:
            progress.note(line)
        if eval_base and cfg.train.sft_steps > 0:
            with model.disable_adapter() if reference is None else nullcontext():
                summary, eps = evaluate(model, tokenizer, env, cfg)
            record_eval(run, "base", summary, eps)
            progress.note(f"base model held-out: {_fmt(summary)}")
        if cfg.train.sft_steps > 0:
            progress.note(f"SFT warm start: {cfg.train.sft_steps} steps on reference transcripts")
            losses = sft_warm_start(model, tokenizer, env, cfg.train.sft_steps, cfg.train.sft_batch_size,
                                    cfg.train.sft_learning_rate, cfg.seed)  # fmt: skip
            run.write_json("sft.json", {"loss": losses})
            warm = save_warm_start(model, run)
            model, tokenizer, reference = build_policy(cfg, warm)  # GRPO's frozen reference = the SFT model
        trainer = GRPOTrainer(model, tokenizer, env, cfg, reference)
        if eval_base:
            summary, eps = trainer.evaluate()
            record_eval(run, "0", summary, eps)
            warm = cfg.train.sft_steps or warm_start is not None
            progress.note(f"{'after SFT' if warm else 'base model'} held-out: {_fmt(summary)}")
        start = 0
        run.save_checkpoint(0, model, trainer.optimizer, trainer.state())
    steps = cfg.train.steps
    progress.start(steps, start)
    for step in range(start + 1, steps + 1):
        result = trainer.step(step)
        m = result.metrics
        last = step == steps
        if (cfg.train.eval_every and step % cfg.train.eval_every == 0) or last:
            summary, eps = trainer.evaluate()
            record_eval(run, str(step), summary, eps)
            m.update(summary)
        m.update(progress.alarms(m, run))
        run.append_jsonl(run.metrics_path, [m])
        rows = [episode_row(e, step) for e in result.episodes[: cfg.train.episodes_per_step_logged]]
        if rows:
            run.append_jsonl(run.episodes_path, rows)
        alarm_stop = bool(m["alarms"]) and cfg.watch.stop_on_alarm
        asked = run.stop_requested()
        if step % cfg.train.checkpoint_every == 0 or last or alarm_stop or asked:
            run.save_checkpoint(step, model, trainer.optimizer, trainer.state())
        progress.update(m)
        if alarm_stop or asked:
            progress.note(
                f"stopped at step {step}: " + ("watch.stop_on_alarm is on" if alarm_stop else "stop requested")
            )
            run.clear_stop()
            break
    progress.stop()
    from grpolab.report.html import render_report

    progress.note(f"report: {render_report(run.path)}")
    return run


def _fmt(summary: dict[str, float]) -> str:
    return (f"success {summary['heldout/success']:.0%}, tool_call_prob {summary['heldout/tool_call_prob']:.0%}, "
            f"schema {summary['heldout/schema']:.2f}")  # fmt: skip
