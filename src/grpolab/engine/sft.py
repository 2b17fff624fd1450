"""SFT warm start on the environment's reference transcripts: loss on the assistant's own tokens only.

The transcripts are tokenised piece by piece (policy text, then each tool response on its own), exactly as a
rollout builds them, so SFT teaches the same token boundaries the policy will produce.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from grpolab.engine.logprobs import make_batch, token_logprobs
from grpolab.engine.rollout import prompt_ids
from grpolab.envs.base import Environment, Task


def reference_tokens(tokenizer: Any, env: Environment, task: Task) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, completion ids, mask) of a task's reference transcript, ending with end-of-turn."""
    ids: list[int] = []
    mask: list[int] = []
    for text, by_policy in env.reference_parts(task):
        piece = tokenizer(text, add_special_tokens=False).input_ids
        ids += piece
        mask += [1 if by_policy else 0] * len(piece)
    ids.append(tokenizer.eos_token_id)
    mask.append(1)
    return prompt_ids(tokenizer, env, task), ids, mask


def sft_warm_start(
    model: Any,
    tokenizer: Any,
    env: Environment,
    steps: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
) -> list[float]:
    """Train on reference transcripts of the train split; returns the loss per step."""
    tasks = env.tasks("train")
    rng = random.Random(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    losses = []
    model.train()
    for _ in range(steps):
        batch_tasks = rng.sample(tasks, min(batch_size, len(tasks)))
        prompts, comps, masks = zip(*(reference_tokens(tokenizer, env, t) for t in batch_tasks))
        batch = make_batch(list(prompts), list(comps), list(masks), pad)
        logp = token_logprobs(model, batch)
        mask = batch.mask.to(logp.device)
        loss = -(logp * mask).sum() / mask.sum().clamp(min=1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses
