"""The names of a run directory's files (docs/design.md, "Run directory"): declared here, spelled nowhere else.

runs/NAME/config.json           the resolved config
runs/NAME/env.json              what a view needs of the environment without building it (thought_required, letters)
runs/NAME/metrics.jsonl         one row per GRPO step (append-only)
runs/NAME/episodes.jsonl        sampled trajectories with per-component rewards and reasons (append-only)
runs/NAME/eval/LABEL.jsonl      held-out episodes of one evaluation (base, 0, step numbers)
runs/NAME/eval/probe-LABEL.jsonl  the greedy probe's train-task episodes at that evaluation (`alarms.probe_tasks`)
runs/NAME/eval/summary.json     held-out metrics by evaluation label (and the probe's `probe/...` fields)
runs/NAME/preflight.json        probes (and learnability when `check --save` wrote it)
runs/NAME/precision.json      the update's precision: asked, chosen, why, the probe's figures; `sft`: the warm start's
runs/NAME/sft.json, sft/        SFT losses and the warm start's trainable weights (sft/manifest.json: checksum)
runs/NAME/checkpoints/step-N/   trainable weights, optimizer, RNG state, step
runs/NAME/checkpoints/damaged-step-N-T/     a checkpoint that failed its checksum or could not be loaded, set aside
runs/NAME/checkpoints/rows-after-step-N-T/  metric and episode rows a resume cut (past its checkpoint N), kept
runs/NAME/report.html           written by `grpolab.report`
runs/NAME/STOP                  asks a running training to checkpoint and stop
runs/NAME/grpolab.lock          flock-ed by the one process that trains into the run (never replaced)
runs/NAME/claim.json            who holds it (pid, host, since, command)
"""

from __future__ import annotations

CONFIG_FILE = "config.json"
ENV_FILE = "env.json"
METRICS_FILE = "metrics.jsonl"
EPISODES_FILE = "episodes.jsonl"
EVAL_DIR = "eval"
SUMMARY_FILE = f"{EVAL_DIR}/summary.json"
PREFLIGHT_FILE = "preflight.json"
PRECISION_FILE = "precision.json"
SFT_FILE = "sft.json"
SFT_DIR = "sft"
WARM_START_FILE = f"{SFT_DIR}/trainable.pt"
WARM_START_SOURCE_FILE = f"{SFT_DIR}/source.json"
CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_PREFIX = "step-"
DAMAGED_PREFIX = "damaged-"
CUT_ROWS_PREFIX = "rows-after-step-"
REPORT_FILE = "report.html"
STOP_FILE = "STOP"
LOCK_FILE = "grpolab.lock"
CLAIM_FILE = "claim.json"
MANIFEST_FILE = "manifest.json"
TRL_DIR = "trl"
"""TRL's own output folder (the trl backend's trainer state)."""


def eval_file(label: str) -> str:
    """`eval/base.jsonl`: the episodes of one held-out evaluation."""
    return f"{EVAL_DIR}/{label}.jsonl"


def probe_file(label: str) -> str:
    """`eval/probe-6.jsonl`: the greedy probe's episodes at one evaluation (`alarms.probe_tasks`; no held-out label)."""
    return f"{EVAL_DIR}/probe-{label}.jsonl"
