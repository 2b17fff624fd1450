"""Scoring a transcript: every component's value and reason, their weighted sum, and the `F:+1.0 | ...` breakdown.

A reward component that raises is not scored 0: its value is NaN, the error is kept on the result, and the trainer
skips the step and counts it. Every component runs under a time limit per episode (`reward.timeout_s`; a TRL-shaped
one that limit times its batch's episodes), since verifiers and rewards are user code and degenerate model text
(30 repeated letters) can make a backtracking one run for minutes: one that runs past it is stopped and scores 0
with the reason (`verifier timed out after 5 s`), counted as an error; the step goes on.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grpolab.envs.base import Environment, Task
from grpolab.protocol import ParsedTranscript
from grpolab.rewards.components import (
    DEFAULT_LENGTH_UNIT,
    SCORE_TIMEOUT_S,
    THOUGHT_MIN_WORDS,
    RewardComponent,
    RewardContext,
)
from grpolab.rewards.replay import Recording, Replay, replay
from grpolab.rewards.rubric import DEFAULT_RUBRIC, rubric_of
from grpolab.timelimit import StillRunning, TimedOut, call_with_time_limit


@dataclass
class Score:
    components: dict[str, float]
    """Unweighted component values."""
    reasons: dict[str, str]
    weights: dict[str, float]
    errors: dict[str, str] = field(default_factory=dict)
    """Components that raised, with the error."""
    valid_calls: int = 0
    """Schema-valid tool calls in the episode (tool_call_prob counts episodes with at least one)."""
    letters: dict[str, str] = field(default_factory=dict)
    """Each component's short form in the breakdown (from the environment's rubric; default: the name)."""

    @property
    def solved(self) -> bool:
        """The strict verifier's verdict: full completion credit."""
        return self.components.get("completion") == 1.0

    @property
    def total(self) -> float:
        return sum(self.weights.get(k, 0.0) * v for k, v in self.components.items())

    def weighted(self, name: str) -> float:
        return self.weights.get(name, 0.0) * self.components[name]

    @property
    def breakdown(self) -> str:
        return breakdown(self.components, self.weights, self.letters)

    def to_json(self) -> dict[str, Any]:
        return {
            "total": _finite_or_none(self.total),
            "components": {k: _finite_or_none(v) for k, v in self.components.items()},
            "weighted": {k: _finite_or_none(self.weighted(k)) for k in self.components},
            "reasons": self.reasons,
            "breakdown": self.breakdown,
            "errors": self.errors,
            "valid_calls": self.valid_calls,
        }


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _short_number(x: float) -> str:
    if not math.isfinite(x):
        return "nan"
    text = f"{x:+.2f}"
    return text[:-1] if text.endswith("0") else text


def breakdown(components: dict[str, float], weights: dict[str, float], letters: dict[str, str] | None = None) -> str:
    """`F:+1.0 | S:+1.5 | C:+3.0 | L:-0.15 | polite:+0.5` (weighted values; a component without a letter shows
    its name)."""
    short = {**DEFAULT_RUBRIC.letters(), **(letters or {})}
    return " | ".join(f"{short.get(k, k)}:{_short_number(weights.get(k, 0.0) * v)}" for k, v in components.items())


def score_transcript(
    env: Environment,
    task: Task,
    text: str,
    weights: dict[str, float] | None = None,
    length_unit: int = DEFAULT_LENGTH_UNIT,
    gen_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    thought_min_words: int = THOUGHT_MIN_WORDS,
    timeout_s: float = SCORE_TIMEOUT_S,
) -> Score:
    """Score an assistant transcript (tool responses included) by re-executing its calls.

    `gen_tokens` is the number of policy tokens when the caller has them (the trainer); otherwise the model's own
    text is counted with `count_tokens` (the run's model's: `models.model_token_counter(cfg.model)`; default: the
    embedded model's tokenizer).
    """
    items = [(task, text, gen_tokens)]
    return score_transcripts(env, items, weights, length_unit, count_tokens, thought_min_words, timeout_s=timeout_s)[0]


def score_transcripts(
    env: Environment,
    items: list[tuple[Task, str, int | None]],
    weights: dict[str, float] | None = None,
    length_unit: int = DEFAULT_LENGTH_UNIT,
    count_tokens: Callable[[str], int] | None = None,
    thought_min_words: int = THOUGHT_MIN_WORDS,
    recordings: list[Recording | None] | None = None,
    timeout_s: float = SCORE_TIMEOUT_S,
) -> list[Score]:
    """Score (task, transcript, policy tokens or None) items under the environment's rubric: grpolab-shaped
    components one transcript at a time, TRL-shaped ones in one call over all of them. Weights are checked against
    the rubric (an unknown name is a UserError) and default to its default weights. `recordings` (one per item, or
    None) are the episodes' recorded tool traffic, checked instead of running the calls again."""
    rubric = rubric_of(env)
    weights = rubric.resolve(dict(rubric.default_weights() if weights is None else weights))
    recordings = recordings or [None] * len(items)
    replays: list[Replay] = []
    try:
        for (task, text, _), recording in zip(items, recordings):
            replays.append(replay(env, task, text, recording))
        return _score_replays(env, items, replays, weights, length_unit, count_tokens, thought_min_words, timeout_s)
    finally:
        for r in replays:  # a stateful environment's fresh episodes, once every component has read them
            r.close()


def _score_replays(
    env: Environment,
    items: list[tuple[Task, str, int | None]],
    replays: list[Replay],
    weights: dict[str, float],
    length_unit: int,
    count_tokens: Callable[[str], int] | None,
    thought_min_words: int,
    timeout_s: float,
) -> list[Score]:
    rubric = rubric_of(env)
    components = rubric.components
    contexts = []
    for r, (_, _, gen_tokens) in zip(replays, items):
        if gen_tokens is None:
            if count_tokens is None:
                from grpolab.models import EMBEDDED, model_token_counter  # transformers: only when counted here

                count_tokens = model_token_counter(EMBEDDED)
            gen_tokens = count_tokens(r.generated_text)
        contexts.append(RewardContext(gen_tokens, length_unit, thought_min_words))
    values: list[dict[str, float]] = [{} for _ in items]
    reasons: list[dict[str, str]] = [{} for _ in items]
    errors: list[dict[str, str]] = [{} for _ in items]
    # a stateful environment's episodes, as TRL passes its environments to a TRL-shaped component
    states = (
        [r.evidence.state if r.evidence is not None else None for r in replays]
        if getattr(env, "stateful", False)
        else None
    )
    # the standard components are always computed (logged even at weight 0), then any others that are weighted
    for name in rubric.scored(weights):
        c = components[name]
        if c.shape == "trl":
            results = _batched(
                c, [task for task, _, _ in items], [text for _, text, _ in items], timeout_s, replays, states
            )
        else:
            results = [_one(c, r, task, env, ctx, timeout_s) for r, (task, _, _), ctx in zip(replays, items, contexts)]
        for i, (value, reason, error) in enumerate(results):
            values[i][name], reasons[i][name] = value, reason
            if error:
                errors[i][name] = reason
    letters = rubric.letters()
    return [
        Score(v, why, weights, err, sum(p is None for p in r.call_problems), letters)
        for v, why, err, r in zip(values, reasons, errors, replays)
    ]


def _error(exc: Exception) -> tuple[float, str, bool]:
    return math.nan, f"error: {type(exc).__name__}: {exc}", True


def _timed_out(exc: TimedOut | StillRunning) -> tuple[float, str, bool]:
    """A component that ran past its time limit (or whose earlier calls still run past theirs): the episode fails
    it (0), with the reason, counted as an error."""
    return 0.0, str(exc), True


def _what(c: RewardComponent) -> str:
    """How a timed-out component is named: the completion component is the task's verifier."""
    return "verifier" if c.name == "completion" else f"reward {c.name}"


def _one(
    c: RewardComponent, r: Replay, task: Task, env: Environment, ctx: RewardContext, timeout_s: float
) -> tuple[float, str, bool]:
    """A grpolab-shaped component on one transcript, under its time limit: (value, reason, raised or timed out)."""
    try:
        value, reason = call_with_time_limit(lambda: c.fn(r, task, env, ctx), timeout_s, _what(c))
        return float(value), str(reason), False
    except (TimedOut, StillRunning) as exc:
        return _timed_out(exc)
    except Exception as exc:  # counted and shown, never silently 0
        return _error(exc)


TASK_COLUMNS = ("task_id", "answer", "truth", "kind")
"""The task fields a TRL-shaped component receives as keyword columns (besides the task's `meta` entries)."""


def _batched(
    c: RewardComponent,
    tasks: list[Task],
    texts: list[str],
    timeout_s: float,
    replays: list[Replay],
    states: list[Any] | None = None,
) -> list[tuple[float, str, bool]]:
    """A TRL-shaped component on all transcripts in one call, as TRL calls its reward functions: prompts,
    completions (the transcripts, or TRL's messages: `RewardComponent.completions`), one column per task field, and
    `environments` where the environment is stateful (each episode's state, `EpisodeState.state`: a TRL environment
    class's instance, as TRL passes its environments); None is "not applicable" (0). The call's time limit is
    `timeout_s` per transcript."""
    columns: dict[str, list[Any]] = {
        "task_id": [t.id for t in tasks],
        "answer": [t.answer for t in tasks],
        "truth": [t.truth for t in tasks],
        "kind": [t.kind for t in tasks],
    }
    if states is not None:
        columns["environments"] = list(states)
    for key in dict.fromkeys(k for t in tasks for k in t.meta):
        if key not in columns and key not in ("prompts", "completions"):
            columns[key] = [t.meta.get(key) for t in tasks]
    params = inspect.signature(c.fn).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        columns = {k: v for k, v in columns.items() if k in params}  # a function that takes only some columns
    prompts: list[Any] = [t.prompt for t in tasks]
    completions: list[Any] = texts
    if c.completions == "messages":
        prompts = [[{"role": "user", "content": p}] for p in prompts]
        completions = [completion_messages(r.parsed) for r in replays]
    try:
        limit = timeout_s * len(tasks)
        out = call_with_time_limit(lambda: c.fn(prompts=prompts, completions=completions, **columns), limit, _what(c))
        if not isinstance(out, (list, tuple)) or len(out) != len(tasks):
            raise TypeError(f"returned {type(out).__name__}, not a list of {len(tasks)} floats (or None)")
        results = []
        for v in out:
            if v is None:
                results.append((0.0, "not applicable (None)", False))
            elif isinstance(v, (int, float)):
                results.append((float(v), f"{c.name} = {float(v):g}", False))
            else:
                raise TypeError(f"returned a {type(v).__name__} among its values, not a float or None")
        return results
    except (TimedOut, StillRunning) as exc:
        return [_timed_out(exc)] * len(tasks)
    except Exception as exc:  # every transcript of the batch: counted and shown, never silently 0
        return [_error(exc)] * len(tasks)


def completion_messages(parsed: ParsedTranscript) -> list[dict[str, Any]]:
    """A transcript as TRL gives a tool-calling completion to a reward function: assistant messages (their text as
    `content`, a thought as `reasoning_content` as TRL's response schemas parse one, and `tool_calls` as
    `{"type": "function", "function": {"name", "arguments"}}`), each answered call's `{"role": "tool", "name",
    "content"}` (the response as the model saw it); the final answer is the last assistant message's content. A
    call that does not parse stays in the text."""
    messages: list[dict[str, Any]] = []
    content: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    named: list[str] = []  # the turn's calls by name, in order: what each response answers

    def flush() -> None:
        if content or reasoning or calls:
            message: dict[str, Any] = {"role": "assistant", "content": "".join(content).strip()}
            if reasoning:
                message["reasoning_content"] = "\n".join(reasoning)
            if calls:
                message["tool_calls"] = list(calls)
            messages.append(message)
        content.clear()
        reasoning.clear()
        calls.clear()

    for seg in parsed.segments:
        if seg.kind == "tool_response":
            flush()
            messages.append({"role": "tool", "name": named.pop(0) if named else "", "content": seg.text.strip()})
        elif seg.kind == "tool_call" and seg.call is not None and seg.call.ok:
            calls.append({"type": "function", "function": {"name": seg.call.name, "arguments": seg.call.arguments}})
            named.append(seg.call.name or "")
        elif seg.kind == "thought":
            reasoning.append(seg.text.strip())
        elif seg.kind == "text":
            content.append(seg.text)
        else:  # a call that does not parse: the model's text, as TRL's parser leaves it
            content.append(f"<{seg.kind}>{seg.text}</{seg.kind}>" if seg.closed else f"<{seg.kind}>{seg.text}")
    flush()
    return messages or [{"role": "assistant", "content": ""}]


def score_episodes(
    env: Environment,
    episodes: list[Any],
    weights: dict[str, float],
    length_unit: int,
    thought_min_words: int = THOUGHT_MIN_WORDS,
    timeout_s: float = SCORE_TIMEOUT_S,
) -> None:
    """Score generated episodes in place (`episode.score`), counting their policy tokens as generated; TRL-shaped
    components see them all in one batch. An environment with state or non-deterministic tools is scored from
    each episode's recorded tool traffic (`Episode.recording`), and its episodes are closed once scored."""
    items = [(e.task, e.text, e.n_policy_tokens) for e in episodes]
    recorded = env.scores_recorded_traffic
    recordings = [e.recording() if recorded else None for e in episodes]
    try:
        scores = score_transcripts(env, items, weights, length_unit, None, thought_min_words, recordings, timeout_s)
    finally:
        for e in episodes:
            e.close()
    for e, s in zip(episodes, scores):
        e.score = s
