"""`grpolab train --backend trl`: TRL's GRPOTrainer as a step source of the lab's run loop.

The SFT warm start, the held-out evaluations, the alarms, checkpoints and the run directory are the run loop's
(`grpolab.run.loop`), shared with the native backend; only the GRPO steps run on TRL. A TRL callback turns each
lab step's log row (one per `grpo.mu` optimizer steps) into a lab metrics row and hands it to the loop.

Settings TRL cannot honour are refused (`trl.settings.refuse_unsupported`) before the model is loaded; the loop
prints the notes for the rest before the run starts. A TRL run cannot be resumed (`restore` says so).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grpolab.config import LabConfig
from grpolab.engine.policy import apply_warm_start
from grpolab.engine.trainer import StepResult
from grpolab.envs.base import Environment
from grpolab.errors import UserError
from grpolab.models import load_model
from grpolab.rewards.score import score_episodes
from grpolab.rundir import RunDir
from grpolab.trl.backend import build_trl_trainer, lab_metrics, require_trl
from grpolab.trl.settings import refuse_unsupported
from grpolab.vocabulary import KL_BOUND, SKIPPED


class TrlSource:
    """GRPO steps made by TRL on the run's (warm-started) model; `model` is the policy being trained.

    A `grpolab.run.sources.StepSource`."""

    def __init__(self, cfg: LabConfig, run: RunDir, env: Environment):
        require_trl()
        refuse_unsupported(cfg)
        self.cfg, self.env = cfg, env
        model, self.tokenizer = load_model(cfg.model, seed=cfg.seed)
        warm = run.warm_start()
        if warm is not None:
            model = apply_warm_start(model, cfg, warm)
        self.trainer = build_trl_trainer(cfg, env, model, self.tokenizer, run.trl_dir)
        from transformers.trainer_callback import PrinterCallback, ProgressCallback  # heavy: only for a TRL run

        for cb in (PrinterCallback, ProgressCallback):  # the lab's own progress bar reports each step
            self.trainer.remove_callback(cb)

    @property
    def model(self) -> Any:
        return self.trainer.accelerator.unwrap_model(self.trainer.model)

    @property
    def optimizer(self) -> Any:
        return self.trainer.optimizer  # None until TRL's train() creates it

    def state(self) -> dict[str, Any]:
        return {"backend": "trl"}

    def restore(self, state: dict[str, Any]) -> None:
        """TRL keeps its own trainer state (scheduler, sampler position) outside the lab's checkpoints."""
        raise UserError("--resume is native-only for now", "start a new trl run with --out, or resume natively")

    def run(self, first: int, last: int, on_step: Callable[[StepResult], bool]) -> None:
        from transformers import TrainerCallback  # heavy: only for a TRL run

        cfg, source = self.cfg, self
        rollout = self.trainer.rollout_func

        class LabStep(TrainerCallback):
            def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
                if not logs or "reward" not in logs or int(state.global_step) % cfg.grpo.mu:
                    return  # one lab step = grpo.mu optimizer steps on one batch of rollouts
                m = {"step": int(state.global_step) // cfg.grpo.mu, "backend": "trl", SKIPPED: 0.0}
                m.update(lab_metrics(logs, cfg.reward.weights))
                m[KL_BOUND] = cfg.grpo.kl_bound
                episodes = rollout.last_episodes[: cfg.train.episodes_per_step_logged]
                unscored = [e for e in episodes if e.score is None]  # a stateful env's were scored in the rollout
                reward = cfg.reward
                score_episodes(
                    source.env, unscored, reward.weights, reward.length_unit, reward.thought_min_words, reward.timeout_s
                )
                if on_step(StepResult(m, episodes)):
                    control.should_training_stop = True

        self.trainer.add_callback(LabStep())
        self.trainer.train()
