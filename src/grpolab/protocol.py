"""The episode protocol of docs/design.md: parse an assistant transcript into segments, and render the pieces.

    <thought>...</thought>            optional reasoning (`<think>...</think>` for a model whose own format has it)
    <tool_call>{"name": ..., "arguments": {...}}</tool_call>
    <tool_response>{...}</tool_response>   written by the environment, never by the model
    final answer                       the text after the last tool response

Model output is untrusted input: `parse_transcript` never raises. Anything malformed (unclosed or nested tags,
stray closing tags, bad JSON, a call that is not {"name": str, "arguments": object}) becomes an error string on
the result, and the caller decides what it costs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

TAGS = ("thought", "tool_call", "tool_response")
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
THOUGHT_TAG = "thought"
"""The lab's own thought tag (what the embedded SmolLM2 learns)."""
THINK_TAG = "think"
"""The reasoning block of models whose own format has one (Qwen3, DeepSeek-R1, SmolLM3): the parser reads it as a
thought, and such a model is asked for it (`grpolab.formats.thought_tag_of`)."""
THOUGHT_TAGS = (THOUGHT_TAG, THINK_TAG)
_TAG_RE = re.compile(r"<(/?)(thought|think|tool_call|tool_response)>")
_THOUGHT_BLOCK = re.compile(r"<thought>(.*?)</thought>\n?", re.S)
_FENCE_RE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|$)", re.S | re.I)
_PYTHON_FENCE_RE = re.compile(r"```[ \t]*(?:python|py|python3)[ \t]*\n", re.I)
MAX_ERRORS = 20  # a megabyte of junk tags should not produce a megabyte of error strings

SegmentKind = Literal["text", "thought", "tool_call", "tool_response"]


@dataclass
class ToolCall:
    """One `<tool_call>` block: its raw text and, when it parses, the tool name and arguments."""

    raw: str
    name: str | None = None
    arguments: dict[str, Any] | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Segment:
    kind: SegmentKind
    text: str
    closed: bool = True
    call: ToolCall | None = None


@dataclass
class ParsedTranscript:
    """A transcript split into segments, with the protocol errors found on the way."""

    segments: list[Segment] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def calls(self) -> list[ToolCall]:
        return [s.call for s in self.segments if s.kind == "tool_call" and s.call is not None]

    @property
    def opening(self) -> Segment | None:
        """The first segment that is not blank text (where a turn's opening <thought> must be), or None."""
        return next((s for s in self.segments if s.kind != "text" or s.text.strip()), None)

    @property
    def final_answer(self) -> str:
        """Plain text after the last tag-delimited segment (whitespace stripped); '' when there is none."""
        tail: list[str] = []
        for seg in reversed(self.segments):
            if seg.kind != "text":
                break
            tail.append(seg.text)
        return "".join(reversed(tail)).strip()

    def _note(self, message: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(message)


def parse_call(raw: str) -> ToolCall:
    """Parse the JSON body of a tool call. Never raises."""
    body = raw.strip()
    call = ToolCall(raw=raw)
    if not body:
        call.error = "empty tool call"
        return call
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as exc:
        call.error = f"tool call is not valid JSON ({type(exc).__name__}: {str(exc)[:80]})"
        return call
    if not isinstance(obj, dict):
        call.error = "tool call JSON is not an object"
        return call
    name, arguments = obj.get("name"), obj.get("arguments", {})
    if not isinstance(name, str) or not name:
        call.error = "tool call has no string 'name'"
        return call
    call.name = name
    if not isinstance(arguments, dict):
        call.error = "tool call 'arguments' is not an object"
        return call
    call.arguments = arguments
    extra = sorted(set(obj) - {"name", "arguments"})
    if extra:
        call.error = f"tool call has unexpected keys {extra[:3]}"
    return call


def parse_transcript(text: str) -> ParsedTranscript:
    """Split an assistant transcript into text / thought / tool_call / tool_response segments. Never raises.

    Tags do not nest: an opening tag inside an open block is an error and the block continues; a stray closing
    tag is an error and is kept as text; a block left open runs to the end of the text (marked `closed=False`).
    `<think>` and `<thought>` both open a thought segment, each closed by its own closing tag.
    """
    result = ParsedTranscript()
    if not isinstance(text, str):
        result._note(f"transcript is {type(text).__name__}, not text")
        return result
    pos = 0
    open_tag: str | None = None
    open_start = 0
    for m in _TAG_RE.finditer(text):
        closing, tag = m.group(1) == "/", m.group(2)
        if open_tag is None:
            if closing:
                result._note(f"stray </{tag}> with no opening tag")
                continue  # keep it as text: it is part of the next text segment
            if m.start() > pos:
                result.segments.append(Segment("text", text[pos : m.start()]))
            open_tag, open_start = tag, m.end()
        elif closing and tag == open_tag:
            result.segments.append(_block(_kind(open_tag), text[open_start : m.start()], closed=True))
            open_tag, pos = None, m.end()
        elif closing:
            result._note(f"</{tag}> inside <{open_tag}>")
        else:
            result._note(f"<{tag}> nested inside <{open_tag}>")
    if open_tag is not None:
        result._note(f"<{open_tag}> is never closed")
        result.segments.append(_block(_kind(open_tag), text[open_start:], closed=False))
    elif pos < len(text):
        result.segments.append(Segment("text", text[pos:]))
    for seg in result.segments:
        if seg.call is not None and seg.call.error:
            result._note(seg.call.error)
    return result


def _kind(tag: str) -> str:
    return "thought" if tag in THOUGHT_TAGS else tag


def _block(kind: str, body: str, closed: bool) -> Segment:
    seg = Segment(kind, body, closed=closed)  # type: ignore[arg-type]
    if kind == "tool_call":
        seg.call = parse_call(body)
    return seg


def render_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The text a well-behaved model writes for one call."""
    return f"{TOOL_CALL_OPEN}\n{json.dumps({'name': name, 'arguments': arguments})}\n{TOOL_CALL_CLOSE}"


def render_tool_response(response: dict[str, Any]) -> str:
    """The text the environment splices in after a call (newline-delimited so it tokenises stably)."""
    return f"\n{TOOL_RESPONSE_OPEN}\n{json.dumps(response)}\n{TOOL_RESPONSE_CLOSE}\n"


def render_thought(text: str, tag: str = THOUGHT_TAG) -> str:
    """A thought block as a model writes it: `<thought>...</thought>` and a newline, or a `<think>` block laid out
    as the chat templates that have one render it (Qwen3: newlines inside, a blank line after)."""
    if tag == THINK_TAG:
        return f"<think>\n{text}\n</think>\n\n"
    return f"<{tag}>{text}</{tag}>\n"


def retag_thoughts(text: str, tag: str) -> str:
    """`text` (a prompt's example written in the lab's tags) with each `<thought>` block rendered in `tag`."""
    if tag == THOUGHT_TAG:
        return text
    return _THOUGHT_BLOCK.sub(lambda m: render_thought(m.group(1), tag), text)


def opening_thought_end(turn: str) -> int | None:
    """Where a turn's opening thought block ends (just past its closing tag), 0 when the turn opens with none
    (leading whitespace aside), None while that block is still open."""
    text = turn.lstrip()
    start = len(turn) - len(text)
    for tag in THOUGHT_TAGS:
        if text.startswith(f"<{tag}>"):
            close = text.find(f"</{tag}>")
            return None if close < 0 else start + close + len(f"</{tag}>")
    return start


def response_json(segment_text: str) -> Any:
    """The JSON inside a tool_response block, or the stripped raw text when it is not JSON."""
    body = segment_text.strip()
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return body


PROTOCOL_INSTRUCTIONS = """You can call tools. To call one, write exactly:
<tool_call>
{"name": "TOOL_NAME", "arguments": {...}}
</tool_call>
Then stop. The tool's result comes back as <tool_response>...</tool_response>. Never write <tool_response> yourself.
{thought} When you have the result, write the final answer as plain text."""
PROTOCOL_CALLS_ARE_THE_ANSWER = """Answer with tool calls. Write each call exactly as:
<tool_call>
{"name": "TOOL_NAME", "arguments": {...}}
</tool_call>
Nothing is run and nothing is sent back: the calls are the answer.
Make one call for each thing the request asks for (a request for one thing gets one call), then end your answer.
Never write <tool_response>. {thought}"""
"""The protocol for environments whose calls are the answer (`executes_tools = False`, BFCL): nothing comes back,
so the answer ends after its last call (as the reference answers do)."""


def thought_instruction(required: bool = True, tag: str = THOUGHT_TAG) -> str:
    """The prompt's sentence on thinking: every turn opens with a thought block, or one may."""
    if required:
        return f"Start every turn with your reasoning inside <{tag}>...</{tag}>."
    return f"You may think first inside <{tag}>...</{tag}>."


def render_system_prompt(
    tool_schemas: list[dict[str, Any]],
    task_instructions: str,
    example: str = "",
    thought_required: bool = True,
    calls_are_the_answer: bool = False,
    thought_tag: str = THOUGHT_TAG,
) -> str:
    """The system prompt: the task instructions, the protocol, the tools as JSON schemas and an optional example."""
    tools = "\n".join(json.dumps(s["function"] if "function" in s else s) for s in tool_schemas)
    protocol = PROTOCOL_CALLS_ARE_THE_ANSWER if calls_are_the_answer else PROTOCOL_INSTRUCTIONS
    protocol = protocol.replace("{thought}", thought_instruction(thought_required, thought_tag))
    parts = [task_instructions.strip(), protocol, f"Tools:\n{tools}"]
    if example:
        parts.append(f"Example:\n{retag_thoughts(example, thought_tag).strip()}")
    return "\n\n".join(parts)


def code_blocks(text: str) -> list[str]:
    """Fenced code blocks in a text (an unclosed last fence runs to the end): the code env's answer format."""
    return [m.group(1) for m in _FENCE_RE.finditer(text)]


def has_python_block(text: str) -> bool:
    """A fence explicitly marked python (what the deliberately gameable `code_block` reward pays for)."""
    return bool(_PYTHON_FENCE_RE.search(text))
