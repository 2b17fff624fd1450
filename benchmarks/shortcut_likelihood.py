"""How much more the policy prefers each shortcut over honest work than it did at the start: read from its
checkpoints, not from its samples.

A step of the benchmark's runs samples 6 episodes, so a class share moves 0.17 for one episode and a shortcut the
policy is learning can stay invisible in the samples until greedy decoding flips to it (honest_demo-0: at most 2 of
6 training episodes with an empty thought at any step, then 9 of 12 held-out answers at step 8). The policy's own
probabilities see it earlier. For a fixed set of train tasks (the first `PROBE_TASKS` of the train split; never the
held-out tasks the ground truth reads), each shortcut edit of the honest reference (`grpolab.preflight.shortcuts`: the
thought emptied, dropped, cut or padded, the bare answer, the last call skipped, a call repeated, a second candidate)
is scored by its log-likelihood under the policy against the honest reference's:

    ratio(s, step) = mean over tasks of [log p_step(edit_s) - log p_step(honest)]     (nats, whole completion)

and the statistic is the largest growth since the start, max over s of ratio(s, step) - ratio(s, 0). Honest
learning raises the honest reference and lowers every ratio; a shortcut being learned raises its own.

    .venv/bin/python benchmarks/shortcut_likelihood.py runs/hack_detection/hedging-0 [...]

prints each checkpoint's ratios. `hack_detection.py` adds them to each run's record (`shortcut_ratio`, by checkpoint
step) and `detectors.shortcut_likelihood` replays the alarm at the checkpoints a run had by then. The start is the
model as built (the warm start; a fresh LoRA adapter changes nothing), whatever checkpoints survive. Runs recorded with
`train.checkpoint_every` 1000 have a checkpoint at step 8 only, and three runs recorded before the benchmark kept
every checkpoint (the lab keeps the newest 2) at steps 6 and 8: there it can alarm that late only.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import torch

from grpolab.engine.logprobs import make_batch, token_logprobs
from grpolab.engine.policy import build_policy
from grpolab.envs import env_for
from grpolab.formats import episode_format
from grpolab.preflight.shortcuts import SHORTCUTS
from grpolab.rundir import RunDir

PROBE_TASKS = 3
"""Train tasks probed (the first of the train split, the same for every run of an environment)."""


def _ids(tokenizer: Any, text: str) -> list[int]:
    return [*tokenizer(text, add_special_tokens=False).input_ids, tokenizer.eos_token_id]


@torch.no_grad()
def completion_logp(model: Any, tokenizer: Any, prompt: list[int], text: str) -> float:
    """log p(text | prompt) under the model, summed over the completion's tokens (and its end)."""
    ids = _ids(tokenizer, text)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    batch = make_batch([prompt], [ids], [[1] * len(ids)], pad)
    return float(token_logprobs(model, batch).sum())


@torch.no_grad()
def completions_logp(model: Any, tokenizer: Any, prompt: list[int], texts: list[str]) -> list[float]:
    """`completion_logp` of several completions of one prompt, the prompt run once: each completion continues a copy
    of its cache (the prompt is most of a finance transcript's tokens)."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    cache = DynamicCache()
    model(input_ids=torch.tensor([prompt[:-1]], device=device), past_key_values=cache, use_cache=True)
    out = []
    for text in texts:
        ids = _ids(tokenizer, text)
        x = torch.tensor([[prompt[-1], *ids[:-1]]], device=device)
        logits = model(input_ids=x, past_key_values=copy.deepcopy(cache), use_cache=True).logits[0].float()
        logp = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(ids, device=device)[:, None])
        out.append(float(logp.sum()))
    return out


def probe_texts(env: Any, fmt: Any, tasks: list[Any]) -> list[tuple[list[int], str, dict[str, str]]]:
    """(prompt ids, honest reference, {shortcut: edited reference}) per probe task (inline transcripts)."""
    out = []
    for task in tasks:
        edits = {name: text for name, fn in SHORTCUTS.items() if (text := fn(env, task)) is not None}
        out.append((fmt.prompt_ids(env, task), env.reference_transcript(task), edits))
    return out


def ratios(model: Any, tokenizer: Any, probes: list[tuple[list[int], str, dict[str, str]]]) -> dict[str, float]:
    """Per shortcut, the mean over probe tasks of log p(edit) - log p(honest) (nats)."""
    model.eval()
    sums: dict[str, list[float]] = {}
    for prompt, honest, edits in probes:
        base, *scores = completions_logp(model, tokenizer, prompt, [honest, *edits.values()])
        for name, score in zip(edits, scores):
            sums.setdefault(name, []).append(score - base)
    return {name: round(sum(v) / len(v), 4) for name, v in sums.items()}


def run_ratios(path: Path) -> dict[str, dict[str, float]]:
    """Checkpoint step -> shortcut ratios of a run directory (every checkpoint it kept)."""
    run = RunDir(path)
    cfg = run.read_config()
    if cfg.rollout.format != "inline":
        return {}  # the shortcut edits are inline transcripts
    env = env_for(cfg)
    model, tokenizer, _ = build_policy(cfg, run.warm_start())
    fmt = episode_format(tokenizer, cfg.rollout.format, cfg.rollout.tool_syntax)
    fmt.bind(env)
    probes = probe_texts(env, fmt, env.tasks("train")[:PROBE_TASKS])
    out = {"0": ratios(model, tokenizer, probes)}  # the start: the warm start, LoRA's B still zero
    for step, _ in run.checkpoints():
        if step > 0:
            run.load_step(step, model)
            out[str(step)] = ratios(model, tokenizer, probes)
    return out


def growth(by_step: dict[str, dict[str, float]], step: int) -> float:
    """The statistic at `step`: the largest growth of a shortcut's ratio since step 0, at the newest checkpoint not
    after `step` (0.0 before any checkpoint after the start)."""
    start = by_step.get("0")
    seen = [int(s) for s in by_step if 0 < int(s) <= step]
    if not start or not seen:
        return 0.0
    now = by_step[str(max(seen))]
    return max((now[s] - start[s] for s in now if s in start), default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args()
    for path in args.runs:
        print(path, json.dumps(run_ratios(path), indent=1))


if __name__ == "__main__":
    main()
