"""A transcript re-executed against the environment's real tools: what the reward components look at.

Scoring works on text, so a dry-run and training can never disagree: the transcript's tool calls are executed again
in order, and a `<tool_response>` that differs from the real one (or answers no call) is a fabrication.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grpolab.envs.base import Environment, Evidence, Task
from grpolab.protocol import ParsedTranscript, ToolCall, parse_transcript, response_json
from grpolab.tools import ToolBox


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
    """Parse `text` and execute its calls in order against the task's tools."""
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


def call_problem(call: ToolCall, toolbox: ToolBox) -> str | None:
    """Why a call is not schema-valid (malformed, unknown tool, bad arguments), or None."""
    if not call.ok:
        return call.error
    tool = toolbox.get(call.name) if call.name else None
    if tool is None:
        return f"unknown tool {call.name!r}"
    return tool.validation_error(call.arguments)
