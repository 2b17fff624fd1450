"""Held-out evaluation: greedy episodes, scored with the same reward, success from the strict verifier."""

from __future__ import annotations

import random
from typing import Any

from grpolab.config import LabConfig
from grpolab.engine.rollout import Episode, mean, run_episodes, sampling_settings
from grpolab.envs.base import Environment, Split, Task
from grpolab.rewards.score import Score, score_transcript

EVAL_BATCH = 32
"""Held-out episodes decoded together (decoding is memory-bound, so larger batches are cheaper per token)."""


def eval_tasks(env: Environment, split: Split, limit: int, seed: int = 0) -> list[Task]:
    """A fixed, shuffled subset (mixed task kinds) so every evaluation of a run sees the same prompts."""
    tasks = list(env.tasks("train")) + list(env.tasks("heldout")) if split == "all" else list(env.tasks(split))
    random.Random(seed).shuffle(tasks)
    return tasks[:limit]


def score_episodes(env: Environment, episodes: list[Episode], cfg: LabConfig) -> None:
    for e in episodes:
        e.score = score_transcript(
            env, e.task, e.text, cfg.reward.weights, cfg.reward.length_unit, gen_tokens=e.n_policy_tokens
        )


def reward_means(scores: list[Score]) -> dict[str, float]:
    """reward/mean and the weighted mean of each component (reward/format, ...) over scored episodes."""
    out = {"reward/mean": mean([s.total for s in scores])}
    for name in scores[0].components:
        out[f"reward/{name}"] = mean([s.weights.get(name, 0.0) * s.components[name] for s in scores])
    return out


def has_valid_call(e: Episode) -> bool:
    return e.score is not None and e.score.valid_calls > 0


def episode_row(e: Episode, step: int | None = None) -> dict[str, Any]:
    assert e.score is not None
    row = {"task_id": e.task.id, "group": e.group, "prompt": e.task.prompt, "answer": e.task.answer,
           "text": e.text, "tokens": e.n_policy_tokens, "turns": e.turns, "stop": e.stop_reason,
           **e.score.to_json()}  # fmt: skip
    if step is not None:
        row = {"step": step, **row}
    return row


def summarize(episodes: list[Episode]) -> dict[str, float]:
    """Held-out metrics: success (strict: completion == 1), tool_call_prob, schema validity, mean reward."""
    scores = [e.score for e in episodes if e.score is not None]
    kinds = sorted({e.task.kind for e in episodes})
    by_kind = {f"heldout/success/{k}": mean([1.0 if e.score and e.score.solved else 0.0 for e in episodes if e.task.kind == k])
               for k in kinds} if len(kinds) > 1 else {}  # fmt: skip
    counts = {f"heldout/n/{k}": float(sum(e.task.kind == k for e in episodes)) for k in kinds} if by_kind else {}
    return {
        **by_kind,
        **counts,
        "heldout/success": mean([1.0 if s.solved else 0.0 for s in scores]),
        "heldout/tool_call_prob": mean([1.0 if has_valid_call(e) else 0.0 for e in episodes]),
        "heldout/schema": mean([s.components.get("schema", 0.0) for s in scores]),
        "heldout/reward": mean([s.total for s in scores]),
        "heldout/n": float(len(scores)),
    }


def evaluate(model: Any, tokenizer: Any, env: Environment, cfg: LabConfig, split: Split = "heldout",
             limit: int | None = None) -> tuple[dict[str, float], list[Episode]]:  # fmt: skip
    tasks = eval_tasks(env, split, limit or cfg.train.eval_limit)
    settings = sampling_settings(cfg, greedy=True)
    episodes = []
    for start in range(0, len(tasks), EVAL_BATCH):  # bounded memory: KV cache and prefill grow with the batch
        episodes += run_episodes(model, tokenizer, env, tasks[start : start + EVAL_BATCH], 1, settings)
    score_episodes(env, episodes, cfg)
    return summarize(episodes), episodes
