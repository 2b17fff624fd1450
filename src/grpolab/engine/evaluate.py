"""Held-out evaluation: greedy episodes, scored with the same reward, success from the strict verifier."""

from __future__ import annotations

import math
import random
from typing import Any

from grpolab.config import LabConfig
from grpolab.engine import heap
from grpolab.engine.rollout import Episode, run_episodes, sampling_settings
from grpolab.envs.base import Environment, Split, Task
from grpolab.metrics import heldout_summary
from grpolab.rewards.score import score_episodes

EVAL_BATCH = 48
"""Most held-out episodes decoded together (decoding is memory-bound, so larger batches are cheaper per token). The
tasks are split into as few batches as this allows, of near-equal size: a short last batch costs about as many
decode steps as a full one. The demo's 40 tasks in one batch took 43.5 and 41.2 s against 46.8 and 51.1 s as 32 + 8,
same episodes (SmolLM2 after 10 SFT steps, 2-core CPU, 2026-12-07)."""


def eval_tasks(env: Environment, split: Split | str, limit: int, seed: int = 0) -> list[Task]:
    """A fixed, shuffled subset (mixed task kinds) so every evaluation of a run sees the same prompts."""
    tasks = list(env.tasks("train")) + list(env.tasks("heldout")) if split == "all" else list(env.tasks(split))
    random.Random(seed).shuffle(tasks)
    return tasks[:limit]


def evaluate(
    model: Any,
    tokenizer: Any,
    env: Environment,
    cfg: LabConfig,
    split: Split | str = "heldout",
    limit: int | None = None,
) -> tuple[dict[str, float], list[Episode]]:
    """Greedy episodes on `limit` tasks of `split` (default: train.eval_limit held-out tasks), scored; summary."""
    tasks = eval_tasks(env, split, limit or cfg.train.eval_limit)
    settings = sampling_settings(cfg, greedy=True)
    was_training = getattr(model, "training", False)
    model.eval()
    heap.trim()  # what training freed goes back to the OS before this phase's larger batch
    episodes: list[Episode] = []
    scored = 0
    try:
        batches = max(math.ceil(len(tasks) / EVAL_BATCH), 1)
        size = max(math.ceil(len(tasks) / batches), 1)  # near-equal batches of at most EVAL_BATCH
        for start in range(0, len(tasks), size):  # bounded memory: KV cache and prefill grow with the batch
            episodes += run_episodes(model, tokenizer, env, tasks[start : start + size], 1, settings)
            if env.stateful:  # each batch scored and its episodes' state released before the next is made
                _score(env, episodes[scored:], cfg)
                scored = len(episodes)
    finally:
        model.train(was_training)
        for e in episodes[scored:] if env.stateful else ():
            e.close()
    if not env.stateful:
        _score(env, episodes, cfg)
    return heldout_summary(episodes), episodes


def _score(env: Environment, episodes: list[Episode], cfg: LabConfig) -> None:
    score_episodes(
        env, episodes, cfg.reward.weights, cfg.reward.length_unit, cfg.reward.thought_min_words, cfg.reward.timeout_s
    )


def task_verdicts(episodes: list[Episode]) -> list[dict[str, Any]]:
    """One row per evaluated task: its verdict (the strict verifier), the completion reason and the breakdown."""
    rows = []
    for e in episodes:
        assert e.score is not None
        rows.append(
            {
                "task_id": e.task.id,
                "kind": e.task.kind,
                "solved": e.score.solved,
                "reason": e.score.reasons.get("completion", ""),
                "breakdown": e.score.breakdown,
                "components": e.score.to_json()["components"],
                "calls": [name for name, _ in (e.evidence.calls if e.evidence else [])],
                "stop": e.stop_reason,
            }
        )
    return rows
