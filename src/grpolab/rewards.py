"""Reward components (format, schema, completion, length), their weighted sum, and why each gave what it gave.

Scoring works on text: the transcript's tool calls are re-executed in order against the environment's real
tools, so a `<tool_response>` that differs from the real one (or answers no call) is a fabrication. The trainer
scores its own episodes the same way, so a dry-run and training can never disagree.

A reward component that raises is not scored 0: its value is NaN, the error is kept on the result, and the
trainer skips the step and counts it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grpolab.config import DEFAULT_WEIGHTS, REWARD_ORDER
from grpolab.envs.base import Environment, Evidence, Task
from grpolab.protocol import ParsedTranscript, ToolCall, parse_transcript, response_json
from grpolab.tools import ToolBox

SHORT_NAMES = {"format": "F", "schema": "S", "completion": "C", "length": "L", "code_block": "B"}


def respond_to_call(toolbox: ToolBox, call: ToolCall) -> dict[str, Any]:
    """The response the environment gives a call: the tool's output, or an error for a malformed call."""
    if not call.ok:
        return {"error": call.error}
    return toolbox.execute(call.name, call.arguments)


@dataclass
class Replay:
    """A transcript re-executed against the real tools."""

    parsed: ParsedTranscript
    calls: list[ToolCall] = field(default_factory=list)
    call_problems: list[str | None] = field(default_factory=list)
    """Why each call is not schema-valid (None when it is), checked once per transcript."""
    real_responses: list[dict[str, Any]] = field(default_factory=list)
    fabricated: list[str] = field(default_factory=list)
    """Why each fabricated tool_response is one."""
    unanswered_calls: int = 0
    evidence: Evidence | None = None
    generated_text: str = ""
    """The model's own text (everything except tool_response blocks), what the length reward counts."""


def replay(env: Environment, task: Task, text: str) -> Replay:
    parsed = parse_transcript(text)
    out = Replay(parsed=parsed)
    toolbox = env.toolbox_for(task)
    evidence = Evidence(prompt=task.prompt, calls=[], responses=[])
    pending: tuple[ToolCall, dict[str, Any]] | None = None
    generated: list[str] = []
    for seg in parsed.segments:
        if seg.kind == "tool_response":
            if pending is None:
                out.fabricated.append("a <tool_response> that answers no call")
            else:
                call, real = pending
                if response_json(seg.text) != real:
                    out.fabricated.append(f"response to {call.name or 'a malformed call'} differs from the real one")
                else:
                    evidence.calls.append((call.name or "", call.arguments or {}))
                    evidence.responses.append((call.name or "", real))
                pending = None
            continue
        generated.append(_segment_source(seg.kind, seg.text, seg.closed))
        if seg.kind == "text" and not seg.text.strip():
            continue
        if pending is not None:  # the model went on without the environment's response
            out.unanswered_calls += 1
            pending = None
        if seg.kind == "tool_call" and seg.call is not None and not env.executes_tools:
            out.calls.append(seg.call)  # the call is the answer: nothing runs, nothing comes back
        elif seg.kind == "tool_call" and seg.call is not None:
            real = respond_to_call(toolbox, seg.call)
            out.calls.append(seg.call)
            out.real_responses.append(real)
            pending = (seg.call, real)
    if pending is not None:
        out.unanswered_calls += 1
    out.call_problems = [call_problem(c, toolbox) for c in out.calls]
    out.evidence = evidence
    out.generated_text = "".join(generated)
    return out


def _segment_source(kind: str, body: str, closed: bool) -> str:
    if kind == "text":
        return body
    return f"<{kind}>{body}</{kind}>" if closed else f"<{kind}>{body}"


# ---- the components: (replay, task, env, context) -> (value, reason) -------------------------------------------


@dataclass
class RewardContext:
    gen_tokens: int
    length_unit: int


RewardFn = Callable[[Replay, Task, Environment, RewardContext], tuple[float, str]]


def format_reward(r: Replay, task: Task, env: Environment, ctx: RewardContext) -> tuple[float, str]:
    """Protocol compliance, four checks of equal weight: tags, call JSON, real responses, a final answer."""
    problems = []
    tag_errors = [e for e in r.parsed.errors if not e.startswith("tool call")]
    if tag_errors:
        problems.append(tag_errors[0])
    bad_calls = [c for c in r.calls if not c.ok]
    if bad_calls:
        problems.append(bad_calls[0].error or "malformed call")
    if r.fabricated or r.unanswered_calls:
        problems.append(r.fabricated[0] if r.fabricated else "a call the environment never answered")
    answer = r.parsed.final_answer
    if not answer and env.executes_tools:
        problems.append("no final answer after the last tool response")
    elif "<tool" in answer or "</" in answer:
        problems.append("tag fragments in the final answer")
    value = 1.0 - len(problems) / 4
    return value, "well-formed" if not problems else "; ".join(problems)


def call_problem(call: ToolCall, toolbox: ToolBox) -> str | None:
    """Why a call is not schema-valid (malformed, unknown tool, bad arguments), or None."""
    if not call.ok:
        return call.error
    tool = toolbox.get(call.name) if call.name else None
    if tool is None:
        return f"unknown tool {call.name!r}"
    return tool.validation_error(call.arguments)


def schema_reward(r: Replay, task: Task, env: Environment, ctx: RewardContext) -> tuple[float, str]:
    """Fraction of calls that name a real tool with arguments valid under its JSON schema."""
    if not r.calls:
        return (0.0, "no tool call, but the task needs one") if task.needs_tools else (1.0, "no call needed")
    problems = r.call_problems
    valid = sum(p is None for p in problems)
    first_problem = next((p for p in problems if p), "")
    reason = f"{valid}/{len(r.calls)} calls valid" + (f" ({first_problem})" if first_problem else "")
    return valid / len(r.calls), reason


def completion_reward(r: Replay, task: Task, env: Environment, ctx: RewardContext) -> tuple[float, str]:
    """The task's verifier accepts the final answer, grounded in real tool output of this episode."""
    if r.fabricated:
        return 0.0, f"fabricated tool output: {r.fabricated[0]}"
    if not env.executes_tools:  # the calls are the answer (BFCL-style)
        verdict = env.verify_calls(task, r.calls)
        return (1.0 if verdict.passed else 0.0), verdict.reason
    answer = r.parsed.final_answer
    if not answer:
        return 0.0, "no final answer"
    assert r.evidence is not None
    verdict = env.verify(task, answer, r.evidence)
    if verdict.score is not None:
        return float(verdict.score), verdict.reason
    return (1.0 if verdict.passed else 0.0), verdict.reason


def length_reward(r: Replay, task: Task, env: Environment, ctx: RewardContext) -> tuple[float, str]:
    """Generated tokens / length_unit (tool output excluded); the default weight is negative."""
    return ctx.gen_tokens / ctx.length_unit, f"{ctx.gen_tokens} generated tokens"


def code_block_reward(r: Replay, task: Task, env: Environment, ctx: RewardContext) -> tuple[float, str]:
    """DELIBERATELY GAMEABLE (the seed stream's lesson): 1 for any fenced python block, whatever the code does.

    Ship it only to show reward hacking: `configs/code_hack.toml` trains on it alone and the hacking alarm fires."""
    from grpolab.envs.code import has_python_block

    if has_python_block(r.generated_text):
        return 1.0, "a python code block (paid whether or not it works)"
    return 0.0, "no python code block"


REWARDS: dict[str, RewardFn] = {
    "format": format_reward,
    "schema": schema_reward,
    "completion": completion_reward,
    "length": length_reward,
    "code_block": code_block_reward,
}
"""Reward components by name; a weight of 0 still computes and logs the component."""


def register_reward(name: str, fn: RewardFn) -> None:
    """Add a reward component (user rewards, environment-specific ones)."""
    REWARDS[name] = fn


# ---- scoring ----------------------------------------------------------------------------------------------


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

    @property
    def solved(self) -> bool:
        """The strict verifier's verdict: full completion credit."""
        return self.components.get("completion") == 1.0

    @property
    def total(self) -> float:
        return sum(self.weights.get(k, 0.0) * v for k, v in self.components.items())

    @property
    def breakdown(self) -> str:
        return breakdown(self.components, self.weights)

    def to_json(self) -> dict[str, Any]:
        return {
            "total": _finite_or_none(self.total),
            "components": {k: _finite_or_none(v) for k, v in self.components.items()},
            "weighted": {k: _finite_or_none(self.weights.get(k, 0.0) * v) for k, v in self.components.items()},
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


def breakdown(components: dict[str, float], weights: dict[str, float]) -> str:
    """`F:+1.0 | S:+1.5 | C:+3.0 | L:-0.15` (weighted values)."""
    return " | ".join(
        f"{SHORT_NAMES.get(k, k)}:{_short_number(weights.get(k, 0.0) * v)}" for k, v in components.items()
    )


def score_transcript(
    env: Environment,
    task: Task,
    text: str,
    weights: dict[str, float] | None = None,
    length_unit: int = 100,
    gen_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> Score:
    """Score an assistant transcript (tool responses included) by re-executing its calls.

    `gen_tokens` is the number of policy tokens when the caller has them (the trainer); otherwise the model's own
    text is counted with `count_tokens` (default: the embedded model's tokenizer).
    """
    weights = dict(DEFAULT_WEIGHTS if weights is None else weights)
    r = replay(env, task, text)
    if gen_tokens is None:
        counter = count_tokens or default_token_counter()
        gen_tokens = counter(r.generated_text)
    ctx = RewardContext(gen_tokens=gen_tokens, length_unit=length_unit)
    components, reasons, errors = {}, {}, {}
    # the four standard components are always computed (logged even at weight 0), then any others weighted
    for name in [*REWARD_ORDER, *(n for n in weights if n not in REWARD_ORDER)]:
        try:
            value, reason = REWARDS[name](r, task, env, ctx)
        except Exception as exc:  # counted and shown, never silently 0
            value, reason = math.nan, f"error: {type(exc).__name__}: {exc}"
            errors[name] = reason
        components[name], reasons[name] = float(value), reason
    valid_calls = sum(p is None for p in r.call_problems)
    return Score(components=components, reasons=reasons, weights=weights, errors=errors, valid_calls=valid_calls)


def default_token_counter() -> Callable[[str], int]:
    from grpolab.models import load_tokenizer

    tokenizer = load_tokenizer()
    return lambda text: len(tokenizer(text, add_special_tokens=False).input_ids)
