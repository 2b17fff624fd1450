"""A transcript checked against the environment's real tool traffic: what the reward components look at.

Two kinds of evidence, one parser. An episode the rollout generated carries its recording: each response the
environment inserted (the text with mask 0, in order) and the episode's state. Where the environment says its tools
have state or answer differently each time (`Environment.scores_recorded_traffic`), scoring reads that record: a
`<tool_response>` must be the one the environment inserted there, so a tool that answered differently the second
time is not a fabrication and a response the model wrote itself still is. Everywhere else (text given to `reward
score`, probes, the built-in environments, whose tools are deterministic) the transcript's calls are executed again
in order, on a fresh episode of a stateful environment, and a `<tool_response>` that differs from the real one (or
answers no call) is a fabrication. A call is
run when its response is read (a call nobody answered costs nothing), and at most `MAX_REPLAYED_CALLS` per
transcript: the response to a call past the cap cannot be checked, so it counts as fabricated, and the call earns
no schema credit; the reasons say so. Nor does a call that timed out: a policy must not be paid for calls that
cost seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from grpolab.envs.base import Environment, EpisodeState, Evidence, Task
from grpolab.protocol import ParsedTranscript, ToolCall, parse_transcript, response_json
from grpolab.rewards.components import MAX_REPLAYED_CALLS, PAST_REPLAY_CAP
from grpolab.tools import ToolBox, ToolResult


def call_result(toolbox: ToolBox, call: ToolCall) -> ToolResult:
    """What the environment gives a call (the tool's output, or an error for a malformed call), and whether it
    timed out."""
    if not call.ok:
        return ToolResult({"error": call.error})
    return toolbox.call(call.name, call.arguments)


_ANSWERED: ContextVar[dict[int, tuple[ToolBox, dict[str, ToolResult]]] | None] = ContextVar("answered", default=None)
"""Inside `calls_answered_once`: per toolbox (by id; the toolbox is kept, so its id is not reused), each call's
result by its tool and arguments."""


@contextmanager
def calls_answered_once() -> Iterator[None]:
    """Within it, replaying a call that a toolbox already answered (the same tool, the same arguments) reads the
    first answer instead of running the tool again; a stateful environment's calls always run (each replay is an
    episode of its own). Where the tools are deterministic (the built-in environments, the scaffold's) the first
    answer is the one a second run gives; where they answer differently each time, every edit of a task is now
    checked against one answer instead of a new one each (the honest transcript's own responses, from the reference
    run, may differ from it as before). The probes and shortcuts score some twenty edits of each task's honest
    transcript, most with its calls: each of a user's tools ran in a forked child per call, 168 forks in one `grpolab
    check` on the tiny model, 12 distinct calls; a fork costs more the larger the process (17 ms there, with the model
    loaded). Nested uses share the outer one."""
    if _ANSWERED.get() is not None:
        yield
        return
    token = _ANSWERED.set({})
    try:
        yield
    finally:
        _ANSWERED.reset(token)


def _replayed(toolbox: ToolBox, call: ToolCall, stateful: bool) -> ToolResult:
    """`call_result`, from the first answer to the same call inside `calls_answered_once`."""
    answered = _ANSWERED.get()
    if answered is None or stateful or not call.ok:
        return call_result(toolbox, call)
    try:
        key = json.dumps([call.name, call.arguments], sort_keys=True, default=str)
    except (RecursionError, ValueError):  # arguments JSON cannot key: run it
        return call_result(toolbox, call)
    results = answered.setdefault(id(toolbox), (toolbox, {}))[1]
    if key not in results:
        results[key] = call_result(toolbox, call)
    return results[key]


@dataclass
class Recording:
    """One episode's tool traffic as it ran: the results whose responses the environment inserted into the
    transcript (provenance: mask 0), in order, and the episode's state after them."""

    results: list[ToolResult] = field(default_factory=list)
    state: Any = None
    toolbox: ToolBox | None = None
    """The episode's tools (their schemas judge the calls); None: the task's."""


@dataclass
class Replay:
    """A transcript re-executed against the real tools."""

    parsed: ParsedTranscript
    calls: list[ToolCall] = field(default_factory=list)
    call_problems: list[str | None] = field(default_factory=list)
    """Why each call is not schema-valid (None when it is), checked once per transcript."""
    real_responses: list[dict[str, Any]] = field(default_factory=list)
    """What the tools answered the calls that were run (those answered in the transcript, up to the cap)."""
    fabricated: list[str] = field(default_factory=list)
    """Why each fabricated tool_response is one."""
    unanswered_calls: int = 0
    unreplayed_calls: int = 0
    """Answered calls past MAX_REPLAYED_CALLS: not run, their responses not checked."""
    evidence: Evidence | None = None
    generated_text: str = ""
    """The model's own text (everything except tool_response blocks), what the length reward counts."""
    episode: EpisodeState | None = None
    """The fresh episode a stateful environment's calls were run again in (closed once scored)."""

    def close(self) -> None:
        if self.episode is not None:
            self.episode.close()


def replay(env: Environment, task: Task, text: str, recording: Recording | None = None) -> Replay:
    """Parse `text` and check its tool responses: against `recording` when given (what the rollout recorded),
    otherwise by executing its answered calls in order against the task's tools (at most MAX_REPLAYED_CALLS), in a
    fresh episode of a stateful environment (the caller closes it: `Replay.close`)."""
    parsed = parse_transcript(text)
    out = Replay(parsed=parsed)
    if recording is None and env.stateful:
        out.episode = env.start_episode(task)
    toolbox = (
        out.episode.toolbox
        if out.episode is not None
        else recording.toolbox
        if recording is not None and recording.toolbox is not None
        else env.toolbox_for(task)
    )
    state = recording.state if recording is not None else out.episode.state if out.episode is not None else None
    evidence = Evidence(prompt=task.prompt, calls=[], responses=[], state=state)
    pending: ToolCall | None = None
    generated: list[str] = []
    not_credited: dict[int, str] = {}  # call index -> why it earns no schema credit though its arguments are valid
    for seg in parsed.segments:
        if seg.kind == "tool_response":
            if pending is None:
                out.fabricated.append("a <tool_response> that answers no call")
            elif recording is not None:
                _check_recorded(out, evidence, pending, seg.text, recording, not_credited)
            elif len(out.real_responses) >= MAX_REPLAYED_CALLS:
                out.unreplayed_calls += 1
                not_credited[len(out.calls) - 1] = PAST_REPLAY_CAP
                out.fabricated.append(
                    f"the response to call {len(out.calls)} was not checked: scoring runs at most "
                    f"{MAX_REPLAYED_CALLS} calls per transcript (the replay cap)"
                )
            else:
                call, result = pending, _replayed(toolbox, pending, stateful=out.episode is not None)
                out.real_responses.append(result.response)
                if result.timed_out:
                    not_credited[len(out.calls) - 1] = f"{result.response['error']}: no credit for a timed-out call"
                if response_json(seg.text) != result.response:
                    out.fabricated.append(f"response to {call.name or 'a malformed call'} differs from the real one")
                else:
                    evidence.calls.append((call.name or "", call.arguments or {}))
                    evidence.responses.append((call.name or "", result.response))
            pending = None
            continue
        generated.append(_segment_source(seg.kind, seg.text, seg.closed))
        if seg.kind == "text" and not seg.text.strip():
            continue
        if pending is not None:  # the model went on without the environment's response
            out.unanswered_calls += 1
            pending = None
        if seg.kind == "tool_call" and seg.call is not None:
            out.calls.append(seg.call)
            if env.executes_tools:  # otherwise the call is the answer: nothing runs, nothing comes back
                pending = seg.call
    if pending is not None:
        out.unanswered_calls += 1
    out.call_problems = [call_problem(c, toolbox) or not_credited.get(i) for i, c in enumerate(out.calls)]
    out.evidence = evidence
    out.generated_text = "".join(generated)
    return out


def _check_recorded(
    out: Replay, evidence: Evidence, call: ToolCall, text: str, recording: Recording, not_credited: dict[int, str]
) -> None:
    """A `<tool_response>` answering `call`, checked against the response the environment inserted there."""
    k = len(out.real_responses)
    if k >= len(recording.results):
        out.fabricated.append(f"a response to {call.name or 'a malformed call'} the environment did not insert")
        return
    result = recording.results[k]
    out.real_responses.append(result.response)
    if result.timed_out:
        not_credited[len(out.calls) - 1] = f"{result.response.get('error')}: no credit for a timed-out call"
    if response_json(text) != result.response:
        out.fabricated.append(f"response to {call.name or 'a malformed call'} differs from the one recorded")
    else:
        evidence.calls.append((call.name or "", call.arguments or {}))
        evidence.responses.append((call.name or "", result.response))


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
