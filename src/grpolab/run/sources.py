"""Where a run's GRPO steps come from: the native engine or TRL's GRPOTrainer, behind one protocol.

The run loop (`grpolab.run.loop`) asks a source for steps and for what evaluation and checkpoints need (the policy,
its tokenizer and optimizer, the source's own resumable state); everything else a run does is the loop's.
`backend_notes` says, before a run starts, which settings the configured backend does not honour.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from grpolab.config import LabConfig
from grpolab.engine.policy import build_policy
from grpolab.engine.trainer import GRPOTrainer, StepResult
from grpolab.envs import Environment
from grpolab.rundir import RunDir
from grpolab.trl.settings import refuse_unsupported, trl_section_notes, unsupported
from grpolab.trl.source import TrlSource


class StepSource(Protocol):
    """Where GRPO steps come from. `model`/`optimizer` are what evaluation and checkpoints use."""

    @property
    def model(self) -> Any:
        """The policy being trained (what evaluation runs and checkpoints hold)."""
        ...

    @property
    def tokenizer(self) -> Any: ...

    @property
    def optimizer(self) -> Any:
        """Its optimizer (None while the source has not made one); checkpoints hold its state."""
        ...

    def run(self, first: int, last: int, on_step: Callable[[StepResult], bool]) -> None:
        """Make steps `first`..`last`, calling `on_step` after each; stop early when it returns True."""
        ...

    def state(self) -> dict[str, Any]:
        """What a checkpoint must keep besides weights and optimizer to redo the next step exactly."""
        ...

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint's `state()` (UserError where the source cannot resume)."""
        ...


def native_source(cfg: LabConfig, run: RunDir, env: Environment) -> GRPOTrainer:
    """The native engine, starting from the run's warm start (policy and frozen reference both)."""
    model, tokenizer, reference = build_policy(cfg, run.warm_start())
    return GRPOTrainer(model, tokenizer, env, cfg, reference)


def make_source(cfg: LabConfig, run: RunDir, env: Environment) -> StepSource:
    """The step source `train.backend` names, starting from the run's warm start."""
    if cfg.train.backend == "trl":
        return TrlSource(cfg, run, env)
    return native_source(cfg, run, env)


def backend_notes(cfg: LabConfig) -> list[str]:
    """Settings the configured backend does not honour, said before the run starts: a UserError for one that
    would change the result, a note for the rest. The native backend honours every field but the `[trl]` section
    (TRL's own arguments), and of `train.report_to` only trackio."""
    if cfg.train.backend != "trl":
        notes = ["native backend: the [trl] section is not used (it applies to --backend trl and export-trl)"]
        others = [r for r in cfg.train.report_to if r not in ("trackio", "none")]
        notes += [f"native backend: train.report_to {others}: the native run loop reports to trackio only"]
        return [n for n, applies in zip(notes, [bool(cfg.trl), bool(others)]) if applies]
    refuse_unsupported(cfg)
    notes = unsupported(cfg, exported=False) + trl_section_notes(cfg)
    return [f"trl backend: {line}" for line in notes]
