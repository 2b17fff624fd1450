"""How an episode is written in tokens: the lab's inline protocol, or the model's own chat template.

`rollout.format = "inline"` (the default, and what the embedded SmolLM2 learns): one assistant turn in which the
environment splices `<tool_response>` blocks after each `</tool_call>` (`grpolab.protocol`).

`rollout.format = "chat_template"`: how users deploy agents. The tools go to `apply_chat_template(..., tools=...)`,
each tool result is a `role: "tool"` message rendered by the model's own template, and calls are read in the
template family's syntax:
- `hermes` (Hermes, Qwen 2/2.5/3, SmolLM3 and many others): `<tool_call>{"name", "arguments"}</tool_call>` inside
  the assistant turn; generation pauses at `</tool_call>`;
- `llama3`: the whole assistant turn is one JSON object `{"name", "parameters"}` ending at end of turn.
Token-in/token-out is kept: the ids the model generated are never re-tokenised. After a call, the conversation so far
(prompt, assistant turns as generated, tool messages) is rendered by the template and must extend the text of the
ids so far; what the template adds (end of turn, the tool message, the next assistant header) is tokenised on its own
and spliced in with mask 0. A template that re-renders earlier turns differently is refused at the start with an
error that names it (`check_template`).

Either format asks for thoughts in the model's own tag: `<think>` when its chat template has one (Qwen3), else the
lab's `<thought>` (`thought_tag_of`); it sets the tag on the environment it renders prompts for (`bind`).

Whatever the format, rewards score a canonical inline transcript (`transcript`): the assistant's text with its calls
as `<tool_call>` blocks and each real response as a `<tool_response>` block, so rewards, probes and alarms are the
same in both modes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from grpolab.errors import UserError
from grpolab.protocol import (
    THINK_TAG,
    THOUGHT_TAG,
    TOOL_CALL_CLOSE,
    ToolCall,
    opening_thought_end,
    parse_call,
    parse_transcript,
    render_thought,
    render_tool_call,
    render_tool_response,
)

FORMATS = ("inline", "chat_template")
_IGNORES_TOOLS = "the chat template of {} ignores `tools` (the model would never see them)"
_IGNORES_TOOLS_FIX = "use rollout.format = 'inline', or a model whose chat template renders tools"
SYNTAXES = ("auto", "hermes", "llama3")


class EpisodeLike(Protocol):
    prompt_ids: list[int]
    completion_ids: list[int]
    turn_start: int
    log: list[tuple[str, Any]]


def stop_token_ids(tokenizer: Any) -> set[int]:
    """End-of-turn ids: EOS and the chat families' turn ends present in this vocabulary."""
    ids = {tokenizer.eos_token_id}
    for tok in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>"):
        tid = tokenizer.convert_tokens_to_ids(tok)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            ids.add(tid)
    return {i for i in ids if i is not None}


def thought_tag_of(tokenizer: Any) -> str:
    """The thought tag a model is asked for: `think` when its chat template has a `<think>` block (Qwen3,
    DeepSeek-R1, SmolLM3), else the lab's `thought`."""
    template = getattr(tokenizer, "chat_template", None) or ""
    return THINK_TAG if f"<{THINK_TAG}>" in str(template) else THOUGHT_TAG


class InlineFormat:
    """The lab's protocol: one assistant turn, tool responses spliced as `<tool_response>` blocks."""

    name = "inline"
    call_at_stop = False

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.stops = stop_token_ids(tokenizer)
        self.thought_tag = thought_tag_of(tokenizer)

    def bind(self, env: Any) -> None:
        """Set the environment's prompts and references to this model's thought tag."""
        env.thought_tag = self.thought_tag

    def prompt_ids(self, env: Any, task: Any) -> list[int]:
        self.bind(env)
        text = self.tokenizer.apply_chat_template(env.messages(task), add_generation_prompt=True, tokenize=False)
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def closes_call(self, tail: str) -> bool:
        return TOOL_CALL_CLOSE in tail

    def parse_turn(self, text: str) -> ToolCall | None:
        parsed = parse_transcript(text)
        return parsed.calls[-1] if parsed.calls else None

    def response_ids(self, e: EpisodeLike, turn_text: str, response: dict[str, Any]) -> list[int] | None:
        return self.tokenizer(render_tool_response(response), add_special_tokens=False).input_ids

    def transcript(self, e: EpisodeLike) -> str:
        return self.tokenizer.decode(e.completion_ids, skip_special_tokens=True)

    def render_call(self, name: str, arguments: dict[str, Any]) -> str:
        return render_tool_call(name, arguments)

    def reference_tokens(self, env: Any, task: Any) -> tuple[list[int], list[int], list[int]]:
        """(prompt ids, completion ids, mask) of the task's reference transcript, tokenised piece by piece exactly
        as a rollout builds it (policy text mask 1, each tool response on its own with mask 0), ending the turn."""
        self.bind(env)
        ids: list[int] = []
        mask: list[int] = []
        for text, by_policy in env.reference_parts(task):
            piece = self.tokenizer(text, add_special_tokens=False).input_ids
            ids += piece
            mask += [1 if by_policy else 0] * len(piece)
        return self.prompt_ids(env, task), [*ids, self.tokenizer.eos_token_id], [*mask, 1]


@dataclass
class _Syntax:
    name: str
    call_at_stop: bool
    """The call is the whole turn and ends at end of turn (llama3), not at a closing tag (hermes)."""


SYNTAX = {"hermes": _Syntax("hermes", False), "llama3": _Syntax("llama3", True)}


class ChatTemplateFormat:
    """The model's own chat template: tools in the template, tool results as `role: "tool"` messages."""

    name = "chat_template"

    def __init__(self, tokenizer: Any, syntax: str = "auto"):
        self.tokenizer = tokenizer
        self.stops = stop_token_ids(tokenizer)
        self.thought_tag = thought_tag_of(tokenizer)
        template = getattr(tokenizer, "chat_template", None) or ""
        self.template_name = getattr(tokenizer, "name_or_path", "") or "this model's"
        if "tools" not in template:
            raise UserError(_IGNORES_TOOLS.format(self.template_name), _IGNORES_TOOLS_FIX)
        if syntax == "auto":
            syntax = "hermes" if "<tool_call>" in template else "llama3" if "parameters" in template else ""
            if not syntax:
                raise UserError(
                    f"cannot tell the tool-call syntax of the chat template of {self.template_name}",
                    "set rollout.tool_syntax = 'hermes' or 'llama3'",
                )
        self.syntax = SYNTAX[syntax]
        self.call_at_stop = self.syntax.call_at_stop

    # ---- rendering ----

    def _messages(self, env: Any, task: Any) -> list[dict[str, Any]]:
        return [{"role": "system", "content": env.chat_instructions(task)}, {"role": "user", "content": task.prompt}]

    def _tools(self, env: Any, task: Any) -> list[dict[str, Any]]:
        return env.toolbox_for(task).schemas

    def _render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        return self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)

    def prompt_ids(self, env: Any, task: Any) -> list[int]:
        text = self._render(self._messages(env, task), self._tools(env, task))
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def bind(self, env: Any) -> None:
        """Remember the environment (the template needs its messages and tools to render a conversation) and set
        its prompts and references to this model's thought tag."""
        self.env = env
        env.thought_tag = self.thought_tag

    # ---- calls ----

    def closes_call(self, tail: str) -> bool:
        return not self.call_at_stop and TOOL_CALL_CLOSE in tail

    def parse_turn(self, text: str) -> ToolCall | None:
        if not self.call_at_stop:
            parsed = parse_transcript(text)
            return parsed.calls[-1] if parsed.calls else None
        _, body = _split_thought(text)
        if not body.startswith("{"):
            return None
        call = parse_call(body.replace('"parameters"', '"arguments"', 1))
        return call if call.name else None

    def render_call(self, name: str, arguments: dict[str, Any]) -> str:
        if self.call_at_stop:
            return json.dumps({"name": name, "parameters": arguments})
        return render_tool_call(name, arguments)

    # ---- splicing ----

    def _conversation(self, e: EpisodeLike, upto: str | None) -> list[dict[str, Any]]:
        task = e.task  # type: ignore[attr-defined]
        messages = self._messages(self.env, task)
        for kind, value in e.log:
            if kind == "assistant":
                messages.append({"role": "assistant", "content": value})
            else:
                messages.append({"role": "tool", "name": value[0], "content": json.dumps(value[1])})
        if upto is not None:
            messages.append({"role": "assistant", "content": upto})
        return messages

    def response_ids(self, e: EpisodeLike, turn_text: str, response: dict[str, Any]) -> list[int] | None:
        """The template's rendering after the generated ids: end of turn, the tool message, the next header.
        None when the rendered conversation does not extend what was generated (the episode ends there)."""
        task = e.task  # type: ignore[attr-defined]
        call = self.parse_turn(turn_text)
        name = call.name if call is not None and call.name else ""
        messages = self._conversation(e, turn_text)
        messages.append({"role": "tool", "name": name, "content": json.dumps(response)})
        full = self._render(messages, self._tools(self.env, task))
        so_far = self.tokenizer.decode(e.prompt_ids + e.completion_ids, skip_special_tokens=False)
        if not full.startswith(so_far):
            return None
        e.log += [("assistant", turn_text), ("tool", (name, response))]
        return self.tokenizer(full[len(so_far) :], add_special_tokens=False).input_ids

    def transcript(self, e: EpisodeLike) -> str:
        """The canonical inline transcript the rewards score: assistant text, calls as tags, real responses."""
        parts = []
        for kind, value in e.log:
            if kind == "assistant":
                parts.append(self._canonical(value))
            else:
                parts.append(render_tool_response(value[1]))
        tail = [t for t in e.completion_ids[e.turn_start :] if t not in self.stops]
        parts.append(self._canonical(self.tokenizer.decode(tail, skip_special_tokens=True)))
        return "".join(parts)

    def reference_tokens(self, env: Any, task: Any) -> tuple[list[int], list[int], list[int]]:
        """The reference transcript in this template: each call turn as the model would write it (mask 1), the
        template's tool messages between them (mask 0), then the final answer and end of turn."""
        self.bind(env)
        e = _Draft(task, self.prompt_ids(env, task))
        mask: list[int] = []
        thought = render_thought(task.reference_thought, self.thought_tag) if task.reference_thought else ""
        tools = env.toolbox_for(task)  # one for the whole transcript: a stateful env's calls see each other's effects
        for i, (name, args) in enumerate(task.reference_calls):
            turn = (thought if i == 0 else "") + self.render_call(name, args)
            piece = self.tokenizer(turn, add_special_tokens=False).input_ids
            piece += [self.tokenizer.eos_token_id] if self.call_at_stop else []
            e.completion_ids += piece
            mask += [1] * len(piece)
            if not env.executes_tools:
                continue
            suffix = self.response_ids(e, turn, tools.execute(name, args)) or []
            e.completion_ids += suffix
            mask += [0] * len(suffix)
            e.turn_start = len(e.completion_ids)
        final = self.tokenizer(("" if task.reference_calls else thought) + task.reference_answer).input_ids
        final = [t for t in final if t not in self.stops] + [self.tokenizer.eos_token_id]
        return e.prompt_ids, e.completion_ids + final, mask + [1] * len(final)

    def _canonical(self, text: str) -> str:
        if not self.call_at_stop:
            return text
        call = self.parse_turn(text)
        if call is None or not call.ok:
            return text
        thought, _ = _split_thought(text)
        return thought + render_tool_call(call.name, call.arguments or {})


def _split_thought(text: str) -> tuple[str, str]:
    """(a leading closed `<thought>` or `<think>` block with its newline, the rest stripped)."""
    body = text.strip()
    end = opening_thought_end(body)
    if end:
        return body[:end] + "\n", body[end:].strip()
    return "", body


@dataclass
class _Draft:
    """A reference transcript under construction (what `response_ids` reads of an episode)."""

    task: Any
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    turn_start: int = 0
    log: list[tuple[str, Any]] = field(default_factory=list)


def check_template(fmt: ChatTemplateFormat, env: Any, task: Any) -> None:
    """Refuse, before any training, a template that hides the tools or re-renders earlier turns."""
    tools = fmt._tools(env, task)
    messages = fmt._messages(env, task)
    if tools and fmt._render(messages, tools) == fmt._render(messages, []):
        raise UserError(_IGNORES_TOOLS.format(fmt.template_name), _IGNORES_TOOLS_FIX)
    if not task.reference_calls:
        return
    name, args = task.reference_calls[0]
    thought = render_thought(task.reference_thought, fmt.thought_tag) if task.reference_thought else ""
    turn = thought + fmt.render_call(name, args)
    prompt = fmt._render(messages, tools)
    first = [*messages, {"role": "assistant", "content": turn}, {"role": "tool", "name": name, "content": "{}"}]
    if not fmt._render(first, tools).startswith(prompt + turn):
        raise UserError(
            f"the chat template of {fmt.template_name} does not keep the conversation's prefix (it re-renders the "
            "assistant's turn), so generated token ids could not be kept as generated",
            "use rollout.format = 'inline', or a template that renders assistant content verbatim",
        )


def episode_format(tokenizer: Any, name: str = "inline", syntax: str = "auto") -> InlineFormat | ChatTemplateFormat:
    if name == "chat_template":
        return ChatTemplateFormat(tokenizer, syntax)
    return InlineFormat(tokenizer)


def checked_format(tokenizer: Any, env: Any, name: str, syntax: str = "auto") -> InlineFormat | ChatTemplateFormat:
    """The episode format of a run, bound to its environment; a chat template is checked before any training."""
    fmt = episode_format(tokenizer, name, syntax)
    fmt.bind(env)
    if isinstance(fmt, ChatTemplateFormat):
        tasks = env.tasks("train")
        check_template(fmt, env, next((t for t in tasks if t.reference_calls), tasks[0]))
    return fmt
