"""SFT warm start on the environment's reference transcripts: loss on the assistant's own tokens only.

The transcripts are tokenised piece by piece (policy text, then each tool response on its own), exactly as a
rollout builds them in the episode format (`grpolab.formats`), so SFT teaches the token boundaries the policy will
produce.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from grpolab.engine.logprobs import make_batch, token_logprobs
from grpolab.envs.base import Environment, Task
from grpolab.formats import ChatTemplateFormat, InlineFormat


def reference_tokens(
    tokenizer: Any, env: Environment, task: Task, fmt: InlineFormat | ChatTemplateFormat | None = None
) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, completion ids, mask) of a task's reference transcript in the episode format (inline default)."""
    return (fmt or InlineFormat(tokenizer)).reference_tokens(env, task)


def sft_warm_start(
    model: Any,
    tokenizer: Any,
    env: Environment,
    steps: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    fmt: InlineFormat | ChatTemplateFormat | None = None,
) -> list[float]:
    """Train on reference transcripts of the train split (in the episode format); returns the loss per step."""
    tasks = env.tasks("train")
    rng = random.Random(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    losses = []
    model.train()
    for _ in range(steps):
        batch_tasks = rng.sample(tasks, min(batch_size, len(tasks)))
        examples = [reference_tokens(tokenizer, env, t, fmt) for t in batch_tasks]
        total = max(sum(sum(m) for _, _, m in examples), 1)
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        # one transcript per forward/backward: no padding work, and a quarter of the activations of the batch;
        # the summed gradients equal the batch's (the loss is normalised by the batch's token count)
        for prompt, completion, mask in examples:
            batch = make_batch([prompt], [completion], [mask], pad)
            logp = token_logprobs(model, batch)
            loss = -(logp * batch.mask.to(logp.device)).sum() / total
            loss.backward()
            loss_sum += loss.item()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(loss_sum)
    model.eval()
    return losses
