"""Batched multi-turn rollouts under the protocol, token-in/token-out.

Each episode keeps the token ids exactly as generated; tool responses are tokenised on their own and appended with
mask 0. The transcript is never re-tokenised between turns (that drift would break the importance ratio).

Departure from a single `generate` call: we run our own decode loop so that each sequence can stop at
`</tool_call>` or end of turn independently, and so that we keep the sampling policy's per-token log-probs. Each
turn starts with a fresh prefill of the whole context (prompt + everything so far) as one batched forward; the
KV cache is reused within a turn. Reusing it across turns would need ragged cache surgery, and on this CPU the
prefill is a small share of the cost (it is one batched matmul per layer, decoding is one per token).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from grpolab.config import LabConfig
from grpolab.envs.base import Environment, Task
from grpolab.models import cache_keyword, cache_of
from grpolab.protocol import TOOL_CALL_CLOSE, parse_transcript, render_tool_response
from grpolab.rewards.replay import respond_to_call
from grpolab.rewards.score import Score


@dataclass
class Episode:
    """One sampled trajectory: ids as generated, mask (1 = policy token, 0 = tool output) and sampling log-probs."""

    task: Task
    group: int
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: int = 0
    tool_errors: int = 0
    done: bool = False
    stop_reason: str = ""
    score: Score | None = None
    text: str = ""

    @property
    def n_policy_tokens(self) -> int:
        return sum(self.mask)


@dataclass
class SamplingSettings:
    """The rollout section of the config (`rollout.*`), plus what evaluation and benchmarks change."""

    max_new_tokens: int
    max_turns: int
    temperature: float
    top_p: float
    greedy: bool = False
    min_new_tokens: int = 0
    """Stop tokens are masked out until an episode has this many policy tokens (benchmarks: equal-length steps)."""


def sampling_settings(cfg: LabConfig, greedy: bool = False, **overrides: Any) -> SamplingSettings:
    """The rollout section of the lab config as sampling settings (greedy for evaluation)."""
    r = cfg.rollout
    settings = SamplingSettings(r.max_new_tokens, r.max_turns, r.temperature, r.top_p, greedy)
    return replace(settings, **overrides)


def stop_token_ids(tokenizer: Any) -> set[int]:
    ids = {tokenizer.eos_token_id}
    for tok in ("<|im_end|>", "<|endoftext|>"):
        tid = tokenizer.convert_tokens_to_ids(tok)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            ids.add(tid)
    return {i for i in ids if i is not None}


def prompt_ids(tokenizer: Any, env: Environment, task: Task) -> list[int]:
    text = tokenizer.apply_chat_template(env.messages(task), add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False).input_ids


def _sample_next(logits: torch.Tensor, s: SamplingSettings, generator: torch.Generator | None) -> torch.Tensor:
    """(B, V) logits -> (B,) token ids."""
    if s.greedy:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / s.temperature, dim=-1)
    if s.top_p < 1.0:
        sorted_p, idx = probs.sort(dim=-1, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < s.top_p
        probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p * keep)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def run_episodes(
    model: Any,
    tokenizer: Any,
    env: Environment,
    tasks: list[Task],
    group_size: int,
    s: SamplingSettings,
    generator: torch.Generator | None = None,
) -> list[Episode]:
    """Sample `group_size` episodes per task (ordered by group), executing tool calls as they are made.

    Each task's prompt is prefilled once and its KV cache repeated for the group. Tool responses are fed back as
    forced tokens (mask 0) through the same cache, so an episode is one continuous decode, never re-prefilled.
    """
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    stops = stop_token_ids(tokenizer)
    prompts = [prompt_ids(tokenizer, env, t) for t in tasks]
    episodes = [
        Episode(task=t, group=g, prompt_ids=p)
        for g, (t, p) in enumerate(zip(tasks, prompts))
        for _ in range(group_size)
    ]
    U, L = len(prompts), max(len(p) for p in prompts)
    input_ids = torch.full((U, L), pad, dtype=torch.long, device=device)  # (U, L), left-padded
    attention = torch.zeros((U, L), dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        input_ids[i, L - len(p) :] = torch.tensor(p, device=device)
        attention[i, L - len(p) :] = 1
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True)
    cache_kw, cache = cache_keyword(model), cache_of(out)
    cache.batch_repeat_interleave(group_size)
    logits = out.logits[:, -1, :].float().repeat_interleave(group_size, dim=0)  # (B, V)
    attention = attention.repeat_interleave(group_size, dim=0)  # (B, L)
    next_pos = positions[:, -1].repeat_interleave(group_size) + 1  # (B,)
    forced: list[deque[int]] = [deque() for _ in episodes]
    turn_start = [0] * len(episodes)  # index in completion_ids where the current policy turn began
    stop_list = sorted(stops)
    while not all(e.done for e in episodes):
        if s.min_new_tokens:
            short = torch.tensor([e.n_policy_tokens < s.min_new_tokens for e in episodes], device=device)
            logits[short.nonzero(as_tuple=True)[0][:, None], torch.tensor(stop_list, device=device)] = -math.inf
        sampled = _sample_next(logits, s, generator)  # (B,)
        logp = torch.log_softmax(logits / (1.0 if s.greedy else s.temperature), dim=-1)
        sampled_lp = logp.gather(-1, sampled[:, None]).squeeze(-1).tolist()
        feed = [pad] * len(episodes)
        for i, e in enumerate(episodes):
            if e.done:
                continue
            if forced[i]:
                t = forced[i].popleft()
                e.completion_ids.append(t)
                e.mask.append(0)
                e.logprobs.append(0.0)
                feed[i] = t
                if not forced[i]:
                    turn_start[i] = len(e.completion_ids)
                continue
            t = int(sampled[i])
            e.completion_ids.append(t)
            e.mask.append(1)
            e.logprobs.append(sampled_lp[i])
            feed[i] = t
            if t in stops:
                e.done, e.stop_reason = True, "eos"
            elif env.executes_tools and TOOL_CALL_CLOSE in tokenizer.decode(e.completion_ids[-8:]):
                response = _respond(e, turn_start[i], env, tokenizer, s, stops)
                if response is not None:
                    forced[i].extend(response)
            elif e.n_policy_tokens >= s.max_new_tokens:
                e.done, e.stop_reason = True, "budget"
        if all(e.done for e in episodes):
            break
        live = torch.tensor([not e.done for e in episodes], device=device)
        attention = torch.cat([attention, live.long()[:, None]], dim=1)
        out = model(
            input_ids=torch.tensor(feed, device=device)[:, None],
            attention_mask=attention,
            position_ids=next_pos[:, None],
            use_cache=True,
            **{cache_kw: cache},
        )
        cache, logits = cache_of(out), out.logits[:, -1, :].float()
        next_pos = next_pos + 1
    for e in episodes:
        e.text = episode_text(tokenizer, e)
    return episodes


def _respond(
    e: Episode, turn_start: int, env: Environment, tokenizer: Any, s: SamplingSettings, stops: set[int]
) -> list[int] | None:
    """The model closed a tool call: execute it and return the response tokens, or end the episode."""
    if e.turns >= s.max_turns:
        e.done, e.stop_reason = True, "turn_limit"
        return None
    if e.n_policy_tokens >= s.max_new_tokens:
        e.done, e.stop_reason = True, "budget"
        return None
    turn_text = tokenizer.decode([t for t in e.completion_ids[turn_start:] if t not in stops])
    parsed = parse_transcript(turn_text)
    call = parsed.calls[-1] if parsed.calls else None
    if call is None:  # `</tool_call>` closed something that was not an open call: nothing to execute
        e.done, e.stop_reason = True, "stray_close"
        return None
    response = respond_to_call(env.toolbox_for(e.task), call)
    e.tool_errors += "error" in response
    e.turns += 1
    return tokenizer(render_tool_response(response), add_special_tokens=False).input_ids


def episode_text(tokenizer: Any, e: Episode) -> str:
    """The transcript as text (special tokens dropped), which the reward scores."""
    return tokenizer.decode(e.completion_ids, skip_special_tokens=True)
