"""`grpolab train --backend trl`: the same run in-process on TRL's GRPOTrainer, into the same run directory.

The SFT warm start, the held-out evaluations, the alarms and the run-dir layout are the lab's (shared with the native
backend); only the GRPO steps run on TRL. TRL's log rows are renamed to the lab's metric names where TRL has them.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from grpolab.config import LabConfig
from grpolab.engine.evaluate import evaluate
from grpolab.engine.progress import Progress
from grpolab.errors import UserError
from grpolab.models import load_model
from grpolab.rundir import RunDir, read_jsonl
from grpolab.trl.backend import (
    LabRollout,
    grpo_settings,
    lab_metrics,
    lora_settings,
    prompt_rows,
    reward_functions,
    unsupported,
)


def _require_trl() -> Any:
    try:
        import trl
    except ImportError:
        raise UserError("the trl backend needs TRL", "pip install 'grpolab[trl]' (or: pip install trl==1.16.0)")
    return trl


def build_trl_trainer(cfg: LabConfig, env: Any, model: Any, tokenizer: Any, output_dir: Path,
                      callbacks: list[Any] | None = None) -> Any:  # fmt: skip
    """TRL's GRPOTrainer on the lab's rollout, rewards and settings (used by the backend and the tests)."""
    _require_trl()
    import os

    from datasets import Dataset
    from peft import LoraConfig as PeftLoraConfig
    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    lora = lora_settings(cfg)
    funcs, weights = reward_functions(env, cfg)
    with warnings.catch_warnings():  # transformers' deprecation notes about its own argument names
        warnings.simplefilter("ignore")
        args = GRPOConfig(**{s.name: s.value for s in grpo_settings(cfg, str(output_dir))}, reward_weights=weights)
        return GRPOTrainer(
            model=model,
            reward_funcs=funcs,
            args=args,
            train_dataset=Dataset.from_list(prompt_rows(env)),
            processing_class=tokenizer,
            peft_config=PeftLoraConfig(**{s.name: s.value for s in lora}) if lora else None,
            rollout_func=LabRollout(env, cfg, tokenizer),
            callbacks=callbacks,
        )


def train_trl(cfg: LabConfig, out: Path, quiet: bool = False) -> RunDir:
    """SFT (native, shared) + GRPO on TRL into `out`; evaluations and alarms as in the native backend."""
    _require_trl()
    from transformers import TrainerCallback

    from grpolab.engine.loop import (
        _apply_warm_start,
        _fmt,
        build_policy,
        env_for,
        record_eval,
        save_warm_start,
        start_run,
    )
    from grpolab.engine.sft import sft_warm_start

    run = start_run(cfg, out)
    env = env_for(cfg)
    progress = Progress(cfg, quiet)
    for line in unsupported(cfg, exported=False):
        progress.note(f"trl backend: {line}")
    model, tokenizer = load_model(cfg.model, seed=cfg.seed)
    if cfg.train.sft_steps > 0:
        progress.note(f"SFT warm start: {cfg.train.sft_steps} steps on reference transcripts")
        policy, _, _ = build_policy(cfg)
        losses = sft_warm_start(policy, tokenizer, env, cfg.train.sft_steps, cfg.train.sft_batch_size,
                                cfg.train.sft_learning_rate, cfg.seed)  # fmt: skip
        run.write_json("sft.json", {"loss": losses})
        model = _apply_warm_start(model, cfg, save_warm_start(policy, run))
    summary, eps = evaluate(model, tokenizer, env, cfg)
    record_eval(run, "0", summary, eps)
    progress.note(f"{'after SFT' if cfg.train.sft_steps else 'base model'} held-out: {_fmt(summary)}")

    mu = cfg.grpo.mu

    class LabLog(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if not logs or "reward" not in logs:
                return
            m = {
                "step": max(1, -(-int(state.global_step) // mu)),
                "backend": "trl",
                **lab_metrics(logs, cfg.reward.weights),
            }
            m["kl_bound"] = cfg.grpo.kl_bound
            m["skipped"] = 0.0
            m.update(progress.alarms(m, run))
            run.append_jsonl(run.metrics_path, [m])
            progress.update(m)

    trainer = build_trl_trainer(cfg, env, model, tokenizer, run.path / "trl", [LabLog()])
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for cb in (PrinterCallback, ProgressCallback):  # the lab's own progress bar reports each step
        trainer.remove_callback(cb)
    progress.start(cfg.train.steps, 0)
    trainer.train()
    progress.stop()
    policy = trainer.accelerator.unwrap_model(trainer.model)
    summary, eps = evaluate(policy, tokenizer, env, cfg)
    record_eval(run, str(cfg.train.steps), summary, eps)
    rows = read_jsonl(run.metrics_path)
    if rows:  # the last step's row gets the final held-out evaluation, as natively
        last = {**rows[-1], **summary}
        run.rewind(int(last["step"]) - 1)
        run.append_jsonl(run.metrics_path, [last])
    run.save_checkpoint(cfg.train.steps, policy, trainer.optimizer, {"backend": "trl"})
    progress.note(f"after GRPO (trl) held-out: {_fmt(summary)}")
    from grpolab.report.html import render_report

    progress.note(f"report: {render_report(run.path)}")
    return run
