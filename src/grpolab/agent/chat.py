"""Talk to an agent: a question in; its thoughts, real tool calls, tool responses and answer out, as they happen.

`ChatSession.send(question)` is a generator of `ChatEvent`s, so a terminal (`grpolab chat`) and a web box can both
render an episode while it is being generated. It mirrors the rollout (`grpolab.engine.rollout`): the same prompt
(the env's system prompt as a chat template), the same stop rules (end of turn, `</tool_call>`, the token budget
and the tool-call limit), the same tool execution (`respond_to_call`) and the same response splicing. So a greedy
chat answer to a held-out prompt is that task's greedy held-out episode, token for token.

Departures from the rollout, and why:
- One sequence, not a batch; a tool response goes through the KV cache as one chunk (the rollout feeds it token by
  token because its batch rows move in lockstep). Greedy by default (`temperature=0`), as the lab evaluates.
- A question is not a Task: the env's system prompt and its env-level toolbox (`env.toolbox`) are used, which is
  what `Environment.system_prompt(None)` renders. Environments that run no tools (bfcl: its functions come with
  each task and the calls are the answer) are refused.
- Each question is a fresh episode, as trained and evaluated. With `keep_history`, earlier questions and
  transcripts are re-rendered through the chat template ahead of the new question (the model never trained so).

Model output is untrusted: parsing never raises (`protocol.parse_transcript`), a malformed call gets an error
response, a tool that raises becomes an error response, and the context window is checked before each forward.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch

from grpolab.config import LabConfig
from grpolab.envs.base import Environment
from grpolab.errors import UserError
from grpolab.protocol import TOOL_CALL_CLOSE, ToolCall, parse_transcript, render_tool_response

EventKind = Literal["delta", "thought", "text", "tool_call", "tool_response", "answer", "error"]
STOP_MESSAGES = {
    "budget": "stopped: the token budget ({max_new_tokens} tokens) ran out",
    "turn_limit": "stopped: the tool-call limit ({max_turns} calls) was reached; the last call was not run",
    "stray_close": "stopped: </tool_call> closed no open tool call",
    "context": "stopped: the model's context window is full",
}


@dataclass
class ChatEvent:
    """One thing that happened in an episode. `kind` says which fields are set:

    - delta: `text` newly appended to the transcript (only with `send(..., deltas=True)`);
    - thought / text: a closed `<thought>` block / prose between blocks, in `text`;
    - tool_call: `name` and `arguments` (None when the call is malformed; `text` is then the error) and `raw`;
    - tool_response: the real `response` of tool `name` (an `{"error": ...}` dict for bad calls);
    - answer: the final answer in `text` and why generation ended in `stop` (eos, budget, turn_limit, ...);
    - error: why the episode ended early, in `text`.
    """

    kind: EventKind
    text: str = ""
    name: str | None = None
    arguments: dict[str, Any] | None = None
    raw: str | None = None
    response: Any = None
    stop: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class ChatSettings:
    max_new_tokens: int = 160
    """Tokens the model may write per question (tool responses not counted), as rollout.max_new_tokens."""
    max_turns: int = 3
    """Tool calls per question, as rollout.max_turns."""
    temperature: float = 0.0
    """0 = greedy (the default, as held-out evaluation); otherwise sampled at this temperature."""
    top_p: float = 1.0
    seed: int = 0
    keep_history: bool = False

    @classmethod
    def from_config(cls, cfg: LabConfig, **overrides: Any) -> ChatSettings:
        """The run's rollout limits; sampling stays greedy unless overridden."""
        base = cls(max_new_tokens=cfg.rollout.max_new_tokens, max_turns=cfg.rollout.max_turns, seed=cfg.seed)
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})


@dataclass
class _Episode:
    """What one `send` has produced so far."""

    ids: list[int] = field(default_factory=list)
    """Completion ids: the model's tokens and the spliced tool-response tokens."""
    policy_tokens: int = 0
    turns: int = 0
    turn_start: int = 0
    emitted: int = 0
    """Transcript segments already reported as events."""
    shown: str = ""
    """Transcript text already reported as deltas."""
    stop: str = ""


class ChatSession:
    """A conversation with one agent (model + tokenizer + the environment whose tools it calls)."""

    def __init__(self, model: Any, tokenizer: Any, env: Environment, settings: ChatSettings | None = None):
        from grpolab.engine.rollout import stop_token_ids

        if not env.executes_tools:
            raise UserError(
                f"env {env.name!r} runs no tools (its functions come with each task and the calls are the answer)",
                "chat with a run of an environment that has real tools (finance, arithmetic, code)",
            )
        self.model, self.tokenizer, self.env = model, tokenizer, env
        self.settings = settings or ChatSettings()
        self.history: list[dict[str, str]] = []
        self.last_transcript = ""
        self._stops = stop_token_ids(tokenizer)
        self._generator = torch.Generator().manual_seed(self.settings.seed)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        # transformers 5.2x renamed the forward's `past_key_values` to `cache` (the rollout handles both too)
        self._cache_kw = "cache" if "cache" in inspect.signature(type(base).forward).parameters else "past_key_values"
        config = getattr(model, "config", None)
        self._context = getattr(config, "max_position_embeddings", None) or 1 << 62

    @classmethod
    def from_run(cls, run: Path, **overrides: Any) -> ChatSession:
        """The agent of a run directory at its latest checkpoint (LoRA merged, as `export-model` writes it)."""
        from grpolab.agent.export import merged_model
        from grpolab.engine.loop import env_for, load_run_policy

        policy, tokenizer, cfg = load_run_policy(run)
        return cls(merged_model(policy), tokenizer, env_for(cfg), ChatSettings.from_config(cfg, **overrides))

    @classmethod
    def from_config(cls, cfg: LabConfig, **overrides: Any) -> ChatSession:
        """cfg.model (smollm2, tiny, an HF id or an exported folder) with cfg.env's tools and prompt."""
        from grpolab.engine.loop import env_for
        from grpolab.models import load_model

        model, tokenizer = load_model(cfg.model, seed=cfg.seed)
        return cls(model, tokenizer, env_for(cfg), ChatSettings.from_config(cfg, **overrides))

    def reset(self) -> None:
        """Forget earlier questions (only matters with keep_history)."""
        self.history.clear()

    def messages(self, question: str) -> list[dict[str, str]]:
        """The chat that starts this question's episode: system prompt, history (if kept), the question."""
        system = {"role": "system", "content": self.env.system_prompt()}
        return [system, *self.history, {"role": "user", "content": question}]

    @torch.no_grad()
    def send(self, question: str, deltas: bool = False) -> Iterator[ChatEvent]:
        """Run one episode for `question`, yielding events as they happen; the last one is always `answer`."""
        s, tok = self.settings, self.tokenizer
        text = tok.apply_chat_template(self.messages(question), add_generation_prompt=True, tokenize=False)
        prompt = tok(text, add_special_tokens=False).input_ids
        ep = _Episode()
        feed, cache, fed = prompt, None, 0
        while True:
            if fed + len(feed) > self._context:
                ep.stop = "context"
                break
            logits, cache = self._forward(feed, cache)
            fed += len(feed)
            token = self._pick(logits)
            ep.ids.append(token)
            ep.policy_tokens += 1
            feed = [token]
            if token in self._stops:
                ep.stop = "eos"
                break
            if TOOL_CALL_CLOSE in tok.decode(ep.ids[-8:]):
                yield from self._progress(ep, deltas)
                call = self._closed_call(ep)
                if call is None:
                    break
                response = self._execute(call)
                ep.turns += 1
                yield ChatEvent("tool_response", name=call.name, response=response)
                forced = tok(render_tool_response(response), add_special_tokens=False).input_ids
                ep.ids += forced
                ep.turn_start = len(ep.ids)
                feed = [token, *forced]
            elif ep.policy_tokens >= s.max_new_tokens:
                ep.stop = "budget"
                break
            yield from self._progress(ep, deltas)
        yield from self._finish(ep, question, deltas)

    # ---- one decoding step ----

    def _forward(self, feed: list[int], cache: Any) -> tuple[torch.Tensor, Any]:
        device = next(self.model.parameters()).device
        kwargs = {self._cache_kw: cache} if cache is not None else {}
        out = self.model(input_ids=torch.tensor([feed], device=device), use_cache=True, **kwargs)
        new_cache = getattr(out, "cache", None)
        return out.logits[0, -1, :].float(), new_cache if new_cache is not None else out.past_key_values

    def _pick(self, logits: torch.Tensor) -> int:
        s = self.settings
        if s.temperature <= 0:
            return int(logits.argmax())
        probs = torch.softmax(logits / s.temperature, dim=-1)
        if s.top_p < 1.0:
            sorted_p, idx = probs.sort(descending=True)
            keep = sorted_p.cumsum(-1) - sorted_p < s.top_p
            probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p * keep)
        return int(torch.multinomial(probs.cpu(), 1, generator=self._generator))

    def _closed_call(self, ep: _Episode) -> ToolCall | None:
        """The call the model just closed, or None (with ep.stop set) when the episode ends here instead."""
        if ep.turns >= self.settings.max_turns:
            ep.stop = "turn_limit"
            return None
        if ep.policy_tokens >= self.settings.max_new_tokens:
            ep.stop = "budget"
            return None
        turn = self.tokenizer.decode([t for t in ep.ids[ep.turn_start :] if t not in self._stops])
        calls = parse_transcript(turn).calls
        if not calls:
            ep.stop = "stray_close"
            return None
        return calls[-1]

    def _execute(self, call: ToolCall) -> dict[str, Any]:
        from grpolab.rewards.replay import respond_to_call

        try:
            return respond_to_call(self.env.toolbox, call)
        except Exception as exc:  # built-in tools never raise; a user environment's might
            return {"error": f"tool {call.name} failed ({type(exc).__name__}: {str(exc)[:200]})"}

    # ---- events ----

    def _transcript(self, ep: _Episode) -> str:
        return self.tokenizer.decode(ep.ids, skip_special_tokens=True)

    def _progress(self, ep: _Episode, deltas: bool, final: bool = False) -> Iterator[ChatEvent]:
        """Events for what became complete since the last call: new text (deltas) and finished segments."""
        text = self._transcript(ep)
        if deltas and text.startswith(ep.shown):
            new = text[len(ep.shown) :]
            if not final:
                new = new.rstrip("\ufffd")  # half of a multi-byte character: wait for the rest
            if new:
                ep.shown += new
                yield ChatEvent("delta", text=new)
        segments = parse_transcript(text).segments
        if final:  # everything up to the trailing plain text, which is the answer
            done = max((i + 1 for i, seg in enumerate(segments) if seg.kind != "text"), default=0)
        elif segments and (segments[-1].kind == "text" or not segments[-1].closed):
            done = len(segments) - 1  # the last segment may still grow
        else:
            done = len(segments)
        for seg in segments[ep.emitted : done]:
            if seg.kind == "thought":
                yield ChatEvent("thought", text=seg.text.strip())
            elif seg.kind == "text" and seg.text.strip():
                yield ChatEvent("text", text=seg.text.strip())
            elif seg.kind == "tool_call" and seg.call is not None:
                c = seg.call
                yield ChatEvent("tool_call", text=c.error or "", name=c.name, arguments=c.arguments, raw=c.raw)
            # tool_response segments were reported when the tool ran
        ep.emitted = max(ep.emitted, done)

    def _finish(self, ep: _Episode, question: str, deltas: bool) -> Iterator[ChatEvent]:
        yield from self._progress(ep, deltas, final=True)
        transcript = self._transcript(ep)
        if ep.stop in STOP_MESSAGES:
            yield ChatEvent("error", text=STOP_MESSAGES[ep.stop].format(**asdict(self.settings)))
        self.last_transcript = transcript
        if self.settings.keep_history:
            self.history += [{"role": "user", "content": question}, {"role": "assistant", "content": transcript}]
        yield ChatEvent("answer", text=parse_transcript(transcript).final_answer, stop=ep.stop)
