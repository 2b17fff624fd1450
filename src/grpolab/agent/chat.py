"""Talk to an agent: a question in; its thoughts, real tool calls, tool responses and answer out, as they happen.

`ChatSession.send(question)` is a generator of `ChatEvent`s, so a terminal (`grpolab chat`) and a web box can both
render an episode while it is being generated. Each question runs through the rollout's own turn logic
(`grpolab.engine.rollout.TurnRules` with the run's episode format, inline or chat_template): the same prompt, the same
stop rules (end of turn, end of call, the token budget, the tool-call limit), the same tool execution and the same
splicing of the response tokens. So a greedy chat answer to a held-out prompt is that task's greedy held-out
episode, and events are read off the canonical inline transcript the rewards score, whatever the format.

Departures from the rollout, and why:
- One sequence through `model.forward` with transformers' cache (as the rollout's `_decode_one`), not the batched
  decoder: a chat has one episode, and any architecture works. Greedy by default, as the lab evaluates.
- A question is not a Task: it becomes a Task-less episode (an empty ground truth) with the env's system prompt and
  env-level tools; environments whose tools come with each task (bfcl: the calls are the answer and nothing runs)
  are refused.
- Each question is a fresh episode, as trained and evaluated. With `keep_history` (inline format only), earlier
  questions and transcripts are rendered through the chat template ahead of the new one (the model never
  trained so).
- `delta` events stream the canonical transcript; where the format rewrites it after the fact (llama3-style calls
  become `<tool_call>` blocks once parsed) a delta is skipped, and the structured events stay exact.

Model output is untrusted: parsing never raises (`protocol.parse_transcript`), a malformed call gets an error
response, a tool that raises becomes an error response, and the context window is checked before each forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch

from grpolab.agent.export import merged_model
from grpolab.config import LabConfig, RolloutConfig
from grpolab.engine.policy import engine_model, load_run_policy
from grpolab.engine.rollout import Episode, SamplingSettings, TurnRules, sample_next
from grpolab.envs import env_for
from grpolab.envs.base import Environment, EpisodeState, Task, question_task
from grpolab.errors import UserError
from grpolab.models import cache_keyword, cache_of
from grpolab.protocol import parse_transcript, response_json

EventKind = Literal["delta", "thought", "text", "tool_call", "tool_response", "answer", "error"]
STOP_MESSAGES = {
    "budget": "stopped: the token budget ({max_new_tokens} tokens) ran out",
    "turn_limit": "stopped: the tool-call limit ({max_turns} calls) was reached; the last call was not run",
    "stray_close": "stopped: </tool_call> closed no open tool call",
    "context": "stopped: the model's context window is full",
    "template_mismatch": "stopped: the chat template did not extend what the model wrote",
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
    max_new_tokens: int = RolloutConfig.model_fields["max_new_tokens"].default
    """Tokens the model may write per question (tool responses not counted), as rollout.max_new_tokens."""
    max_turns: int = RolloutConfig.model_fields["max_turns"].default
    """Tool calls per question, as rollout.max_turns."""
    temperature: float = 0.0
    """0 = greedy (the default, as held-out evaluation); otherwise sampled at this temperature."""
    top_p: float = 1.0
    seed: int = 0
    keep_history: bool = False
    format: str = "inline"
    """The run's rollout.format: the lab's inline protocol or the model's chat template."""
    tool_syntax: str = "auto"
    stop_at_answer: bool = RolloutConfig.model_fields["stop_at_answer"].default
    """The run's rollout.stop_at_answer: the reply ends where the environment says its answer ends."""

    @classmethod
    def from_config(cls, cfg: LabConfig, **overrides: Any) -> ChatSettings:
        """The run's rollout limits and format; sampling stays greedy unless overridden."""
        r = cfg.rollout
        base = cls(
            r.max_new_tokens,
            r.max_turns,
            seed=cfg.seed,
            format=r.format,
            tool_syntax=r.tool_syntax,
            stop_at_answer=r.stop_at_answer,
        )
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})

    def sampling(self) -> SamplingSettings:
        greedy = self.temperature <= 0
        temperature = 1.0 if greedy else self.temperature
        return SamplingSettings(
            self.max_new_tokens,
            self.max_turns,
            temperature,
            self.top_p,
            self.format,
            self.tool_syntax,
            greedy,
            stop_at_answer=self.stop_at_answer,
        )


@dataclass
class _Shown:
    """What one `send` has reported so far."""

    segments: int = 0
    """Transcript segments already reported as events."""
    text: str = ""
    """Transcript text already reported as deltas."""


class ChatSession:
    """A conversation with one agent (model + tokenizer + the environment whose tools it calls)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        env: Environment,
        settings: ChatSettings | None = None,
        task_id: str | None = None,
    ):
        self.model, self.tokenizer, self.env = model, tokenizer, env
        self.settings = settings or ChatSettings()
        if not env.executes_tools:
            raise UserError(
                f"env {env.name!r} runs no tools (its functions come with each task and the calls are the answer)",
                "chat with a run of an environment that has real tools (finance, arithmetic, code)",
            )
        self.task = self._task_named(task_id) if task_id is not None else None
        """Where questions are asked (`--task`): that task's row, meta and starting state."""
        try:
            env.toolbox_for(self.question(""))
        except Exception:
            raise UserError(
                f"env {env.name!r} has no tools outside its own tasks", "chat with finance, arithmetic or code"
            ) from None
        self._turns = self._rules()  # built here too, so a bad chat template is refused before any question
        self.history: list[dict[str, str]] = []
        self.last_transcript = ""
        self._state: EpisodeState | None = None
        """A stateful environment's tools and state, made at the first question and kept for the conversation."""
        self._generator = torch.Generator(device="cpu").manual_seed(self.settings.seed)
        config = getattr(model, "config", None)
        self._context = getattr(config, "max_position_embeddings", None) or 1 << 62

    def _task_named(self, task_id: str) -> Task:
        tasks = self.env.all_tasks()
        if task_id not in tasks:
            shown = ", ".join(list(tasks)[:5]) + (", ..." if len(tasks) > 5 else "")
            raise UserError(f"env {self.env.name!r} has no task {task_id[:80]!r}", f"--task one of: {shown}")
        return tasks[task_id]

    def question(self, text: str) -> Task:
        """The episode a question starts: in the `--task`'s row and state, or a task-less one."""
        return self.env.ask_in(self.task, text) if self.task is not None else question_task(text)

    @classmethod
    def from_run(cls, run: Path, task_id: str | None = None, **overrides: Any) -> ChatSession:
        """The agent of a run directory at its latest checkpoint (LoRA merged, as `export-model` writes it)."""
        policy, tokenizer, cfg, _ = load_run_policy(run)
        settings = ChatSettings.from_config(cfg, **overrides)
        return cls(merged_model(policy), tokenizer, env_for(cfg), settings, task_id)

    @classmethod
    def from_config(cls, cfg: LabConfig, task_id: str | None = None, **overrides: Any) -> ChatSession:
        """cfg.model (smollm2, tiny, an HF id or an exported folder) with cfg.env's tools and prompt."""
        model, tokenizer = engine_model(cfg.model, cfg)
        return cls(model, tokenizer, env_for(cfg), ChatSettings.from_config(cfg, **overrides), task_id)

    def messages(self, question: str) -> list[dict[str, str]]:
        """The chat that starts this question's inline episode: system prompt, history (if kept), the question."""
        system = {"role": "system", "content": self.env.system_prompt(self.question(question))}
        return [system, *self.history, {"role": "user", "content": question}]

    def _rules(self) -> Any:
        """The rollout's turn logic (stops, call detection, tool execution, splicing) for the current settings."""
        if self.settings.keep_history and self.settings.format != "inline":
            raise UserError("keep_history works with rollout.format = inline only", "ask each question on its own")
        return TurnRules(self.tokenizer, self.env, self.settings.sampling())

    def _prompt_ids(self, task: Task) -> list[int]:
        if not self.history:
            return self._turns.fmt.prompt_ids(self.env, task)
        text = self.tokenizer.apply_chat_template(
            self.messages(task.prompt), add_generation_prompt=True, tokenize=False
        )
        return self.tokenizer(text, add_special_tokens=False).input_ids

    @torch.no_grad()
    def send(self, question: str, deltas: bool = False) -> Iterator[ChatEvent]:
        """Run one episode for `question`, yielding events as they happen; the last one is always `answer`."""
        self._turns = self._rules()  # settings may have changed since the last question
        task = self.question(question)
        if self.env.stateful and self._state is None:  # one state for the conversation: a cart outlives a question
            try:
                self._state = self.env.start_episode(task)
            except UserError as exc:  # a TRL class whose reset needs its row's columns, not a question alone
                if self.task is not None:
                    raise
                raise UserError(exc.problem, f"{exc.fix}; or ask in one of its tasks' episodes: --task ID") from None
        e = Episode(task, 0, self._prompt_ids(task), episode_state=self._state)
        shown, s = _Shown(), self._turns.s
        device = next(self.model.parameters()).device
        feed, cache, fed = e.prompt_ids, None, 0
        while feed:
            if fed + len(feed) > self._context:
                e.stop_reason = "context"
                break
            kwargs = {cache_keyword(self.model): cache} if cache is not None else {}
            out = self.model(input_ids=torch.tensor([feed], device=device), use_cache=True, logits_to_keep=1, **kwargs)
            fed, cache = fed + len(feed), cache_of(out)
            token, logp = sample_next(out.logits[:, -1, :].float(), s, self._generator)
            feed = self._turns.after(e, int(token), float(logp))  # [] when the episode ends
            yield from self._progress(e, shown, deltas)
        yield from self._finish(e, shown, deltas)

    # ---- events ----

    def _transcript(self, e: Any) -> str:
        return self._turns.fmt.transcript(e)

    def _progress(self, e: Any, shown: _Shown, deltas: bool, final: bool = False) -> Iterator[ChatEvent]:
        """Events for what became complete since the last call: new text (deltas) and finished segments."""
        text = self._transcript(e)
        if deltas and text.startswith(shown.text):
            new = text[len(shown.text) :]
            if not final:
                new = new.rstrip("\ufffd")  # half of a multi-byte character: wait for the rest
            if new:
                shown.text += new
                yield ChatEvent("delta", text=new)
        segments = parse_transcript(text).segments
        if final:  # everything up to the trailing plain text, which is the answer
            done = max((i + 1 for i, seg in enumerate(segments) if seg.kind != "text"), default=0)
        elif segments and (segments[-1].kind == "text" or not segments[-1].closed):
            done = len(segments) - 1  # the last segment may still grow
        else:
            done = len(segments)
        last_call: str | None = None
        for i, seg in enumerate(segments[:done]):
            if seg.kind == "tool_call" and seg.call is not None:
                last_call = seg.call.name
            if i < shown.segments:
                continue
            if seg.kind == "thought":
                yield ChatEvent("thought", text=seg.text.strip())
            elif seg.kind == "text" and seg.text.strip():
                yield ChatEvent("text", text=seg.text.strip())
            elif seg.kind == "tool_call" and seg.call is not None:
                c = seg.call
                yield ChatEvent("tool_call", text=c.error or "", name=c.name, arguments=c.arguments, raw=c.raw)
            elif seg.kind == "tool_response":  # only the environment writes these: the real response
                yield ChatEvent("tool_response", name=last_call, response=response_json(seg.text))
        shown.segments = max(shown.segments, done)

    def _finish(self, e: Any, shown: _Shown, deltas: bool) -> Iterator[ChatEvent]:
        yield from self._progress(e, shown, deltas, final=True)
        transcript = self._transcript(e)
        if e.stop_reason in STOP_MESSAGES:
            yield ChatEvent("error", text=STOP_MESSAGES[e.stop_reason].format(**asdict(self.settings)))
        self.last_transcript = transcript
        if self.settings.keep_history:
            self.history += [{"role": "user", "content": e.task.prompt}, {"role": "assistant", "content": transcript}]
        yield ChatEvent("answer", text=parse_transcript(transcript).final_answer, stop=e.stop_reason)
