"""Sampling the policy on a branch it rarely takes: its episodes with the opening thought banned.

A shortcut nobody sampled yet (an episode that skips the thought the format asks for) cannot be forecast from the
pilot's classes, and an edit of a sampled transcript keeps that transcript's outcome. Sampled with the token that
opens the thought banned at the start of the episode, the policy writes what it does without a thought: straight to
a call, or free text. `grpolab check` adds these episodes to its forecast's pilot (`grpolab.simulator.forecast`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from grpolab.engine.rollout import Choose, Episode, SamplingSettings, sample_next
from grpolab.protocol import TOOL_CALL_OPEN


def banned_opening(tokenizer, tag: str, keep: str = TOOL_CALL_OPEN) -> tuple[list[int], int] | None:
    """(the ids an episode starts with, the id banned after them) that opens `<tag>` but not `keep` (a tool call):
    the first token where the two openings part. None where `<tag>` cannot be told from `keep` by its first tokens."""
    opening = tokenizer.encode(f"<{tag}>", add_special_tokens=False)
    other = tokenizer.encode(keep, add_special_tokens=False)
    for i, token in enumerate(opening):
        if i >= len(other) or other[i] != token:
            return opening[:i], token
    return None


def no_thought_chooser(tokenizer, tag: str, s: SamplingSettings, generator: torch.Generator | None) -> Choose | None:
    """A `run_episodes` `choose` that samples as `s` does, except that an episode's first turn cannot open `<tag>`;
    None where the tokenizer cannot ban it without banning a tool call."""
    ban = banned_opening(tokenizer, tag)
    if ban is None:
        return None
    prefix, token = ban

    def choose(rows: list[Episode], logits: Tensor) -> tuple[Tensor, Tensor]:
        hit = [i for i, e in enumerate(rows) if e.completion_ids == prefix]
        if hit:
            logits = logits.clone()
            logits[hit, token] = -float("inf")
        return sample_next(logits, s, generator)

    return choose
