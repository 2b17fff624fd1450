"""Reward functions written for TRL's GRPOTrainer(reward_funcs=[...]): no grpolab import.

TRL calls each with the batch's prompts and completions (conversational: lists of messages, the tool calls and
tool responses included), the dataset's other columns, and `environments`, the rollouts' ShopEnv instances. grpolab
calls them the same way: `rewards = ["rewards.py:*"]` in config.toml.
"""

from __future__ import annotations


def names_order(prompts: list, completions: list, order_id: list, **kwargs) -> list[float]:
    """1 when the final message names the order it is about (e.g. "#1004"), else 0."""
    scores = []
    for completion, oid in zip(completions, order_id):
        last = completion[-1]
        scores.append(float(last["role"] == "assistant" and oid in last["content"]))
    return scores


def no_stray_writes(prompts: list, completions: list, environments: list, **kwargs) -> list[float]:
    """1 when every order the rollout changed is the one the customer asked about (read from its environment)."""
    return [float(all(oid == env.goal["order_id"] for oid in env.writes)) for env in environments]
