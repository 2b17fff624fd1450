"""SFT warm start on the environment's reference transcripts: loss on the assistant's own tokens only.

The transcripts are tokenised piece by piece (policy text, then each tool response on its own), exactly as a
rollout builds them in the episode format (`grpolab.formats`), so SFT teaches the token boundaries the policy will
produce.

A step's transcripts share their prompt's opening (the system prompt, with the tools' schemas): it runs once, and each
transcript runs from where the prompts part, on its keys and values (`logprobs.SharedPrefix`, as the GRPO update
shares a group's prompt); the gradient is the same sum, taken in another order.

Which transcripts: every train task equally likely by default, so a kind's share of the warm start is its share of
the train split. `train.sft_mix` weighs kinds instead: on BFCL's five categories the count-proportional draw gave
parallel answers (2-8 calls) two thirds of the loss tokens, and the model learnt to follow a call with another one.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from grpolab.engine.logprobs import SharedPrefix, group_token_stats, make_batch, token_logprobs
from grpolab.engine.precision import update_autocast
from grpolab.envs.base import Environment, Task
from grpolab.errors import UserError
from grpolab.formats import ChatTemplateFormat, InlineFormat


def reference_tokens(
    tokenizer: Any, env: Environment, task: Task, fmt: InlineFormat | ChatTemplateFormat | None = None
) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, completion ids, mask) of a task's reference transcript in the episode format (inline default)."""
    return (fmt or InlineFormat(tokenizer)).reference_tokens(env, task)


def check_sft_mix(env: Environment, mix: dict[str, float]) -> None:
    """UserError for a `train.sft_mix` that names a kind the environment has no train tasks of."""
    kinds = sorted({t.kind for t in env.tasks("train")})
    unknown = sorted(set(mix) - set(kinds))
    if unknown:
        raise UserError(
            f"train.sft_mix names {unknown[0]!r}, a task kind with no train tasks in env {env.name!r}",
            f"weigh some of: {', '.join(kinds)}",
        )


def sft_batches(
    tasks: list[Task], steps: int, batch_size: int, seed: int, mix: dict[str, float] | None = None
) -> list[list[Task]]:
    """The tasks of each SFT step: without a mix, `batch_size` distinct tasks drawn uniformly; with one, each
    transcript's kind drawn by its weight (kinds left out never), then a task of that kind."""
    rng = random.Random(seed)
    if not mix:
        return [rng.sample(tasks, min(batch_size, len(tasks))) for _ in range(steps)]
    by_kind: dict[str, list[Task]] = {}
    for t in tasks:
        by_kind.setdefault(t.kind, []).append(t)
    kinds = [k for k in by_kind if mix.get(k, 0) > 0]
    if not kinds:
        raise UserError("train.sft_mix weighs no kind that has train tasks", f"weigh some of: {', '.join(by_kind)}")
    weights = [mix[k] for k in kinds]
    return [[rng.choice(by_kind[k]) for k in rng.choices(kinds, weights, k=batch_size)] for _ in range(steps)]


def sft_warm_start(
    model: Any,
    tokenizer: Any,
    env: Environment,
    steps: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    fmt: InlineFormat | ChatTemplateFormat | None = None,
    mix: dict[str, float] | None = None,
    precision: str = "fp32",
) -> list[float]:
    """Train on reference transcripts of the train split (in the episode format, kinds weighed by `mix`), the
    forward passes in `precision` (`engine.precision`); returns the loss per step."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    losses = []
    device_type = next(model.parameters()).device.type
    model.train()
    for batch_tasks in sft_batches(env.tasks("train"), steps, batch_size, seed, mix):
        examples = [reference_tokens(tokenizer, env, t, fmt) for t in batch_tasks]
        optimizer.zero_grad(set_to_none=True)
        loss_sum = sft_gradients(model, examples, pad, precision, device_type)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(loss_sum)
    model.eval()
    return losses


def shared_length(prompts: list[list[int]]) -> int:
    """How many leading tokens every prompt has in common."""
    n = min(len(p) for p in prompts)
    for p in prompts[1:]:
        n = next((i for i in range(n) if p[i] != prompts[0][i]), n)
    return n


def sft_gradients(
    model: Any, examples: list[tuple[list[int], list[int], list[int]]], pad: int, precision: str, device_type: str
) -> float:
    """Accumulate one step's gradient of the loss on the (prompt, completion, mask) examples' policy tokens,
    normalised by the step's token count; returns the loss. One transcript per forward/backward (no padding work,
    a transcript's activations at a time); the prompts' shared opening runs once (`shared_length`)."""
    total = max(sum(sum(m) for _, _, m in examples), 1)
    shared = shared_length([p for p, _, _ in examples])
    prefix = SharedPrefix(model)
    loss_sum = 0.0
    for prompt, completion, mask in examples:
        with update_autocast(precision, device_type):
            if shared:  # the rest of the prompt is context (mask 0), as a tool's output is
                head = prompt[:shared]
                rest, rest_mask = prompt[shared:] + completion, [0] * (len(prompt) - shared) + mask
                stats, where = group_token_stats(
                    model, head, [rest], [rest_mask], pad, with_entropy=False, prefix=prefix.get(head)
                )
                logp = stats.logp * where
            else:
                batch = make_batch([prompt], [completion], [mask], pad)
                logp = token_logprobs(model, batch) * batch.mask.to(device_type)
        loss = -logp.sum() / total
        loss.backward()
        loss_sum += loss.item()
    prefix.flush()  # the opening's gradient, summed over the examples, through its forward once
    return loss_sum
