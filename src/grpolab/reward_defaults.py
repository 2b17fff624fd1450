"""The reward section's defaults and the replay cap, in a module that imports nothing: the config reads them without
importing the reward components (and, through them, every environment, transformers and torch)."""

from __future__ import annotations

THOUGHT_MIN_WORDS = 3
"""Default of `reward.thought_min_words`: an emptied thought (`<thought>...</thought>`) earns no format credit."""
DEFAULT_LENGTH_UNIT = 100
"""Generated tokens per unit of the length component (the default of `reward.length_unit`)."""
SCORE_TIMEOUT_S = 5.0
"""Default of `reward.timeout_s`: seconds one reward component (a verifier, a user's reward) may take per episode."""
MAX_REPLAYED_CALLS = 16
"""Calls that scoring runs again per transcript (`rewards/replay.py`): each may cost up to its tool's timeout, and
scoring has no timeout of its own. `rollout.max_turns` may not exceed it, so no rollout is ever cut short."""

BUILTIN_NAMES = frozenset({"format", "schema", "completion", "length", "code_block", "lenient_completion"})
"""The built-in reward components' names (`grpolab.rewards.components.BUILTIN_COMPONENTS`, which checks it on
import): what an environment's own component may not be called."""
