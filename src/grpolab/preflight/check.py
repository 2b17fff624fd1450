"""`grpolab check`: before any update, is the reward sound and is the task learnable from this model?

1. Dry-run: reference transcripts and base-model episodes scored, with per-component reasons.
2. Gameability probes (`grpolab.preflight.probes`): each must score strictly below the honest reference.
3. Learnability: G episodes per prompt from the base model on N prompts: mean reward per component, the base
   prior tool_call_prob, frac_zero_std, pass@G, prompts that are all-pass or all-fail, and a recommendation.
4. The forecast from those episodes (`grpolab.simulator.forecast.forecast_summary`, passed in as `forecast`), with
   the same prompts sampled once more on the branch where the episode cannot open its thought (where the env asks
   for one): the shortcut a reward may pay for before any episode took it.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from grpolab.config import LabConfig
from grpolab.engine.branches import no_thought_chooser
from grpolab.engine.rollout import Episode, run_episodes, sampling_settings
from grpolab.envs.base import Environment, references_once
from grpolab.metrics import episode_row, mean, reward_means, tool_call_prob
from grpolab.models import token_counter
from grpolab.preflight.probes import gameable_lines, run_probes, worst_by_probe
from grpolab.preflight.shortcuts import best_by_shortcut, paid_lines, run_shortcuts
from grpolab.rewards.score import score_episodes, score_transcript
from grpolab.vocabulary import FRAC_ZERO_STD, TOOL_CALL_PROB


def dry_run_references(env: Environment, cfg: LabConfig, count_tokens, limit: int = 5) -> list[dict[str, Any]]:
    rows = []
    for task in env.tasks("train")[:limit]:
        s = score_transcript(
            env,
            task,
            env.reference_transcript(task),
            cfg.reward.weights,
            cfg.reward.length_unit,
            count_tokens=count_tokens,
            thought_min_words=cfg.reward.thought_min_words,
            timeout_s=cfg.reward.timeout_s,
        )
        rows.append({"task_id": task.id, **s.to_json()})
    return rows


def probe_report(env: Environment, cfg: LabConfig, count_tokens, n_tasks: int = 6) -> dict[str, Any]:
    with references_once(env):  # the probes and the shortcuts edit the same tasks' references
        return _probe_report(env, cfg, count_tokens, n_tasks)


def _probe_report(env: Environment, cfg: LabConfig, count_tokens, n_tasks: int) -> dict[str, Any]:
    tasks = _spread(env.tasks("train"), n_tasks)
    results = run_probes(
        env, tasks, cfg.reward.weights, cfg.reward.length_unit, count_tokens, cfg.reward.thought_min_words
    )
    table = [
        {
            "probe": r.probe,
            "task_id": r.task_id,
            "score": r.score.total,
            "honest": r.honest.total,
            "margin": r.margin,
            "gameable": r.gameable,
            "breakdown": r.score.breakdown,
            "reasons": r.score.reasons,
        }
        for r in worst_by_probe(results)
    ]
    shortcuts = run_shortcuts(
        env, tasks, cfg.reward.weights, cfg.reward.length_unit, count_tokens, cfg.reward.thought_min_words
    )
    return {
        "probes": table,
        "gameable": gameable_lines(results),
        "shortcuts": [
            {
                "shortcut": r.shortcut,
                "task_id": r.task_id,
                "score": r.score.total,
                "honest": r.honest.total,
                "margin": r.margin,
                "paid": r.paid,
                "paying": r.paying_components(),
                "breakdown": r.score.breakdown,
                "reasons": r.score.reasons,
            }
            for r in best_by_shortcut(shortcuts)
        ],
        "shortcuts_paid": paid_lines(shortcuts),
        "tasks": [t.id for t in tasks],
        "isolation": env.isolation(),
    }


def _spread(tasks: list, n: int) -> list:
    """n tasks spread over the list (so every task kind is represented)."""
    if len(tasks) <= n:
        return tasks
    kinds: dict[str, list] = {}
    for t in tasks:
        kinds.setdefault(t.kind, []).append(t)
    out = []
    while len(out) < n:
        for group in kinds.values():
            if group and len(out) < n:
                out.append(group.pop(0))
    return out


def sample_scored(
    model: Any,
    tokenizer: Any,
    env: Environment,
    cfg: LabConfig,
    prompts: int,
    group_size: int,
    no_thought: bool = False,
) -> list[Episode]:
    """`group_size` scored episodes of the base model on each of `prompts` spread train tasks; `no_thought`: on the
    branch where the episode cannot open its thought (`grpolab.engine.branches`; [] where the tokenizer cannot ban
    it without banning a tool call)."""
    tasks = _spread(env.tasks("train"), prompts)
    settings = sampling_settings(cfg)
    generator = torch.Generator(device="cpu").manual_seed(cfg.seed + int(no_thought))
    choose = no_thought_chooser(tokenizer, env.thought_tag, settings, generator) if no_thought else None
    if no_thought and choose is None:
        return []
    episodes = run_episodes(model, tokenizer, env, tasks, group_size, settings, generator, choose=choose)
    r = cfg.reward
    score_episodes(env, episodes, r.weights, r.length_unit, r.thought_min_words, r.timeout_s)
    return episodes


def learnability(
    model: Any, tokenizer: Any, env: Environment, cfg: LabConfig, prompts: int, group_size: int
) -> tuple[dict[str, Any], list[Episode]]:
    tasks = _spread(env.tasks("train"), prompts)
    episodes = sample_scored(model, tokenizer, env, cfg, prompts, group_size)
    per_prompt = []
    for g, task in enumerate(tasks):
        group = episodes[g * group_size : (g + 1) * group_size]
        totals = [e.score.total for e in group]
        passes = sum(e.score.solved for e in group)
        per_prompt.append(
            {
                "task_id": task.id,
                "kind": task.kind,
                "mean_reward": mean(totals),
                "passes": passes,
                "mean_completion": mean([e.score.components.get("completion", 0.0) for e in group]),
                "zero_std": len(set(totals)) == 1,
            }
        )
    scores = [e.score for e in episodes]
    summary = {
        "prompts": len(tasks),
        "group_size": group_size,
        **reward_means(scores),
        TOOL_CALL_PROB: tool_call_prob(scores),
        FRAC_ZERO_STD: mean([1.0 if p["zero_std"] else 0.0 for p in per_prompt]),
        "pass_at_g": dict(sorted(Counter(p["passes"] for p in per_prompt).items())),
        "all_pass": [p["task_id"] for p in per_prompt if p["passes"] == group_size],
        "all_fail": [p["task_id"] for p in per_prompt if p["passes"] == 0],
        "per_prompt": per_prompt,
        "by_kind": by_kind(per_prompt, group_size),
    }
    summary["recommendation"] = recommend(summary)
    mix = task_mix(summary["by_kind"])
    if mix:
        summary["recommendation"] += " " + mix
    return summary, episodes


def by_kind(per_prompt: list[dict[str, Any]], group_size: int) -> dict[str, dict[str, float]]:
    """Mean completion (partial credit), solve rate and zero-variance share per task kind."""
    out: dict[str, dict[str, float]] = {}
    for kind in sorted({p["kind"] for p in per_prompt}):
        rows = [p for p in per_prompt if p["kind"] == kind]
        out[kind] = {
            "prompts": len(rows),
            "mean_completion": mean([p["mean_completion"] for p in rows]),
            "solve_rate": sum(p["passes"] for p in rows) / (len(rows) * group_size),
            FRAC_ZERO_STD: mean([1.0 if p["zero_std"] else 0.0 for p in rows]),
        }
    return out


def task_mix(kinds: dict[str, dict[str, float]]) -> str:
    """Which task kinds to train on: those with reward variance and room to learn (not solved every time)."""
    if len(kinds) < 2:
        return ""
    keep = [k for k, v in kinds.items() if v[FRAC_ZERO_STD] < 1 and v["solve_rate"] < 1]
    drop = [k for k in kinds if k not in keep]
    parts = ", ".join(
        f"{k} (completion {v['mean_completion']:.2f}, solved {v['solve_rate']:.0%})" for k, v in kinds.items()
    )
    if not keep:
        return f"Task kinds: {parts}; none carries signal yet."
    advice = f"train on task_kinds = {keep!r}" + (f" (drop {drop}: no variance or always solved)" if drop else "")
    return f"Task kinds: {parts}; {advice}."


def recommend(s: dict[str, Any]) -> str:
    """Advice from the smoke test, with the reason (GRPO learns only from groups with reward variance: a task set
    must be neither hopeless nor trivial)."""
    G, n = s["group_size"], s["prompts"]
    zero = s[FRAC_ZERO_STD]
    fails, passes = len(s["all_fail"]), len(s["all_pass"])
    if s[TOOL_CALL_PROB] == 0 and fails == n:
        return (
            "no signal: the base model makes no valid tool call and never succeeds, so every group has equal "
            "completion reward. Start with an SFT warm start (train.sft_steps > 0) on reference transcripts."
        )
    if fails == n:
        return (
            f"too hard: no prompt was solved in {G} tries. Use an SFT warm start or easier task kinds; a larger G "
            f"(e.g. {min(4 * G, 32)}) finds rare successes at proportional cost."
        )
    if passes == n:
        return "too easy: every prompt is solved every time, so advantages are zero. Use harder prompts."
    if zero > 0.5:
        need = max(G, math.ceil(G / max(1e-9, 1 - zero)))
        return (
            f"weak signal: {zero:.0%} of groups have no reward variance. Drop all-pass/all-fail prompts "
            f'(grpo.dynamic_filter = "resample") or raise G to about {need}.'
        )
    return f"learnable: {1 - zero:.0%} of groups carry signal at G={G}; keep the settings."


Forecaster = Callable[[list[dict[str, Any]], Environment, LabConfig, Any, float, list[dict[str, Any]]], dict[str, Any]]
"""(the smoke test's episode rows, env, cfg, count_tokens, the seconds their sampling took, the no-thought branch's
rows) -> the forecast from them: `grpolab.simulator.forecast.forecast_summary`, passed in by the command. The
simulator stands above preflight (its class profiles are scored with preflight's probes), so preflight does not
import it."""


def check(
    model: Any,
    tokenizer: Any,
    env: Environment,
    cfg: LabConfig,
    prompts: int = 4,
    group_size: int | None = None,
    forecast: Forecaster | None = None,
) -> dict[str, Any]:
    """The `grpolab check` report: the dry run, the probes, the learnability smoke test and, with `forecast`, what
    GRPO will do from the smoke test's episodes."""
    count_tokens = token_counter(tokenizer)
    group_size = group_size or cfg.rollout.group_size
    start = time.perf_counter()
    learn, episodes = learnability(model, tokenizer, env, cfg, prompts, group_size)
    sampled = time.perf_counter() - start
    probes = probe_report(env, cfg, count_tokens)
    rows = [episode_row(e) for e in episodes]
    branch: list[dict[str, Any]] = []
    if forecast is not None and env.thought_required:  # a shortcut nobody sampled yet: the policy on that branch
        start = time.perf_counter()
        sampled_branch = sample_scored(model, tokenizer, env, cfg, prompts, group_size, no_thought=True)
        branch = [episode_row(e) for e in sampled_branch]
        branch_seconds = time.perf_counter() - start
    return {
        "env": env.name,
        "model": cfg.model,
        "weights": cfg.reward.weights,
        "dry_run": {
            "references": dry_run_references(env, cfg, count_tokens),
            "base_episodes": [episode_row(e) for e in episodes[:: max(1, len(episodes) // 6)]],
        },
        **probes,
        "learnability": learn,
        **({"forecast": forecast(rows, env, cfg, count_tokens, sampled, branch)} if forecast is not None else {}),
        "pilot_episodes": rows,
        **({"branch_episodes": branch, "branch_seconds": round(branch_seconds, 1)} if branch else {}),
    }
