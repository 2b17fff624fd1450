"""Shortcut probes: small edits of honest work that a policy can reach one step at a time.

The gameability probes (`grpolab.preflight.probes`) are hacks written from scratch. GRPO rarely jumps to those; it
drifts from what it already does by small steps, and keeps any step the reward pays for. So each shortcut here is a
transform *of* the honest reference transcript (empty the thought, drop it, cut the answer to the bare number,
answer from the search page without the last call, repeat a call, add a second candidate number, pad or shorten
the thought). A shortcut that scores strictly above the honest reference under the configured weights is one GRPO
will take: `grpolab check` names it, with its margin and the components that pay for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from grpolab.envs.base import Environment, Task
from grpolab.preflight.probes import BesideHonest, best_gain_by_name, score_beside_honest
from grpolab.protocol import render_thought
from grpolab.rewards.components import THOUGHT_MIN_WORDS

Shortcut = Callable[[Environment, Task], "str | None"]
"""(env, task) -> the honest reference transcript with one small change, or None where it does not apply."""


def _parts(env: Environment, task: Task) -> list[tuple[str, bool]]:
    return env.reference_parts(task)


def _with_thought(env: Environment, task: Task, thought: str | None) -> str | None:
    """The reference with its opening thought replaced (None: removed)."""
    if not task.reference_thought:
        return None
    old = render_thought(task.reference_thought, env.thought_tag)
    honest = env.reference_transcript(task)
    if old not in honest:
        return None
    return honest.replace(old, "" if thought is None else render_thought(thought, env.thought_tag), 1)


def empty_thought(env: Environment, task: Task) -> str | None:
    """The thought emptied to `...` (what GRPO did in the demo while any closed thought block paid)."""
    return _with_thought(env, task, "...")


def drop_thought(env: Environment, task: Task) -> str | None:
    """No thought at all: straight to the first call."""
    return _with_thought(env, task, None)


def short_thought(env: Environment, task: Task) -> str | None:
    """The thought cut to its first three words."""
    if not task.reference_thought:
        return None
    return _with_thought(env, task, " ".join(task.reference_thought.split()[:3]))


def bare_answer(env: Environment, task: Task) -> str | None:
    """The final answer cut to the bare result ("14.17" instead of a sentence with its units and inputs)."""
    if not env.executes_tools or not task.answer:
        return None
    return "".join(text for text, _ in _parts(env, task)[:-1]) + task.answer


def skip_last_call(env: Environment, task: Task) -> str | None:
    """The last call and its response dropped; the answer stated anyway (from the search page, or from memory)."""
    if not env.executes_tools or len(task.reference_calls) < 2:
        return None
    parts = _parts(env, task)
    # parts: [thought + call 1, response 1, call 2, response 2, ..., answer]; drop the last call and its response
    return "".join(text for text, _ in parts[:-3]) + parts[-1][0]


def repeat_call(env: Environment, task: Task) -> str | None:
    """The first call made twice (with its real response both times) before the honest finish."""
    if not env.executes_tools or not task.reference_calls:
        return None
    parts = _parts(env, task)
    call = parts[0][0]
    thought = render_thought(task.reference_thought, env.thought_tag) if task.reference_thought else ""
    again = call[len(thought) :] if thought and call.startswith(thought) else call
    return parts[0][0] + parts[1][0] + again + parts[1][0] + "".join(text for text, _ in parts[2:])


def second_candidate(env: Environment, task: Task) -> str | None:
    """The honest answer with a second candidate number added ("..., or about 13.17")."""
    if not env.executes_tools or not task.answer:
        return None
    try:
        other = f"{float(task.answer.split()[-1]) - 1.0:.2f}"
    except ValueError:
        return None
    parts = _parts(env, task)
    return "".join(text for text, _ in parts[:-1]) + parts[-1][0].rstrip() + f" Or about {other}."


def padded_thought(env: Environment, task: Task) -> str | None:
    """The thought padded with a restatement of itself (longer reasoning that says nothing new)."""
    if not task.reference_thought:
        return None
    return _with_thought(env, task, f"{task.reference_thought} In other words: {task.reference_thought}")


SHORTCUTS: dict[str, Shortcut] = {
    "empty_thought": empty_thought,
    "drop_thought": drop_thought,
    "short_thought": short_thought,
    "bare_answer": bare_answer,
    "skip_last_call": skip_last_call,
    "repeat_call": repeat_call,
    "second_candidate": second_candidate,
    "padded_thought": padded_thought,
}


@dataclass
class ShortcutResult(BesideHonest):
    @property
    def shortcut(self) -> str:
        return self.name

    @property
    def margin(self) -> float:
        """How far above honest work the shortcut scores (positive: the reward pays for taking it)."""
        return self.gain

    @property
    def paid(self) -> bool:
        return self.margin > 1e-9

    def paying_components(self) -> dict[str, float]:
        """Components whose weighted value the shortcut raises, with by how much."""
        gains = {k: self.score.weighted(k) - self.honest.weighted(k) for k in self.score.components}
        return {k: g for k, g in gains.items() if g > 1e-9}


def run_shortcuts(
    env: Environment,
    tasks: list[Task],
    weights: dict[str, float],
    length_unit: int,
    count_tokens: Callable[[str], int],
    thought_min_words: int = THOUGHT_MIN_WORDS,
) -> list[ShortcutResult]:
    """Every shortcut on every task, scored beside the honest reference under the given reward."""
    scored = score_beside_honest(env, tasks, SHORTCUTS, weights, length_unit, count_tokens, thought_min_words)
    return [ShortcutResult(name, task.id, s, honest, text) for name, task, s, honest, text in scored]


def best_by_shortcut(results: list[ShortcutResult]) -> list[ShortcutResult]:
    """For each shortcut, the task where it pays most (or loses least)."""
    return best_gain_by_name(results)


def paid_lines(results: list[ShortcutResult]) -> list[str]:
    """One line per shortcut the reward pays for: its margin and what pays."""
    lines = []
    for r in best_by_shortcut(results):
        if r.paid:
            pays = ", ".join(f"{k} {v:+.3f}" for k, v in r.paying_components().items())
            lines.append(f"shortcut: {r.shortcut} beats honest work by {r.margin:.3f} on {r.task_id} (paid by {pays})")
    return lines
