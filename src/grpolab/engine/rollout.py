"""Batched multi-turn rollouts under the protocol, token-in/token-out.

Each episode keeps the token ids exactly as generated; tool responses are tokenised on their own and appended with
mask 0. The transcript is never re-tokenised between turns (that drift would break the importance ratio).

Departure from a `generate` call: our own decode loop, so that each episode can stop at `</tool_call>` or end of
turn on its own, and so that we keep the sampling policy's per-token log-probs. The loop is built for a memory-bound
CPU (one decode step reads every weight once, whatever the batch), using `grpolab.engine.decoder`:
- every episode of a step (prompts x G) decodes in one batch; each prompt is prefilled once and forked G times;
- an episode that finishes leaves the batch (its KV rows are dropped), so the batch shrinks instead of feeding pad
  tokens, and sampling and log-softmax run on live rows only;
- a tool response enters as one chunk fed to the rows that made a call, not one forced token per decode step;
- the end of a tool call is detected on token ids: each id's text is looked up once, and only tokens that can end
  `</tool_call>` trigger a check of the episode's text tail.
Models the fast decoder does not support decode one episode at a time through `model.forward` (same results).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from grpolab.config import LabConfig
from grpolab.engine.decoder import FastDecoder, supports
from grpolab.engine.gather import full_parameters
from grpolab.engine.phases import NO_PHASES, Phases
from grpolab.envs.base import Environment, EpisodeState, Evidence, Task
from grpolab.formats import InlineFormat, episode_format
from grpolab.models import cache_keyword, cache_of
from grpolab.protocol import TOOL_CALL_CLOSE, opening_thought_end
from grpolab.rewards.replay import Recording, call_result
from grpolab.rewards.score import Score
from grpolab.tools import ToolBox, ToolResult
from grpolab.vocabulary import PHASE_COMPACT, PHASE_DECODE, PHASE_PREFILL, PHASE_SAMPLE, PHASE_TOOL_PREFILL, PHASE_TOOLS


@dataclass
class Episode:
    """One sampled trajectory: ids as generated, mask (1 = policy token, 0 = tool output) and sampling log-probs."""

    task: Task
    group: int
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: int = 0
    tool_errors: int = 0
    done: bool = False
    stop_reason: str = ""
    score: Score | None = None
    text: str = ""
    turn_start: int = 0
    """Index in completion_ids where the current policy turn began."""
    tail: str = ""
    """The last characters of the policy's text (where `</tool_call>` is looked for)."""
    said: str = ""
    """The policy's text of the current turn after a tool response (where the environment's answer end is looked
    for, `rollout.stop_at_answer`)."""
    log: list[tuple[str, Any]] = field(default_factory=list)
    """Finished assistant turns and tool results, for chat-template episodes (`grpolab.formats`)."""
    evidence: Evidence | None = None
    """The prompt and the calls executed so far with their responses (what `env.answer_end` reads)."""
    episode_state: EpisodeState | None = None
    """A stateful environment's tools and state for this episode alone (`Environment.start_episode`)."""
    results: list[ToolResult] = field(default_factory=list)
    """What each executed call gave, in order: the responses inserted into the transcript (mask 0)."""

    def __post_init__(self) -> None:
        if self.evidence is None:
            state = self.episode_state.state if self.episode_state is not None else None
            self.evidence = Evidence(prompt=self.task.prompt, calls=[], responses=[], state=state)

    def toolbox(self, env: Environment) -> ToolBox:
        """The tools this episode's calls run on: its own in a stateful environment, else the task's."""
        return self.episode_state.toolbox if self.episode_state is not None else env.toolbox_for(self.task)

    def recording(self) -> Recording:
        """The tool traffic as it ran, what scoring checks the transcript's responses against."""
        if self.episode_state is None:
            return Recording(list(self.results))
        return Recording(list(self.results), self.episode_state.state, self.episode_state.toolbox)

    def close(self) -> None:
        """Release the episode's own state (a stateful environment's temporary files); idempotent."""
        if self.episode_state is not None:
            self.episode_state.close()

    @property
    def n_policy_tokens(self) -> int:
        return sum(self.mask)

    @property
    def truncated(self) -> bool:
        """Cut by the token budget (`rollout.max_new_tokens`); an episode the answer-stop rule ended is not."""
        return self.stop_reason == "budget"


@dataclass
class SamplingSettings:
    """The rollout section of the config (`rollout.*`), plus what evaluation and benchmarks change."""

    max_new_tokens: int
    max_turns: int
    temperature: float
    top_p: float
    format: str = "inline"
    """`rollout.format`: the lab's inline protocol or the model's chat template."""
    tool_syntax: str = "auto"
    greedy: bool = False
    min_new_tokens: int = 0
    """Stop tokens are masked out until an episode has this many policy tokens (benchmarks: equal-length steps)."""
    stop_at_answer: bool = False
    """`rollout.stop_at_answer`: end the episode where the environment says its final answer ends."""


def sampling_settings(cfg: LabConfig, greedy: bool = False, **overrides: Any) -> SamplingSettings:
    """The rollout section of the lab config as sampling settings (greedy for evaluation)."""
    r = cfg.rollout
    settings = SamplingSettings(r.max_new_tokens, r.max_turns, r.temperature, r.top_p, r.format, r.tool_syntax, greedy)
    return replace(settings, stop_at_answer=r.stop_at_answer, **overrides)


def prompt_ids(tokenizer: Any, env: Environment, task: Task, fmt: Any = None) -> list[int]:
    """The token ids that open an episode of `task` (system, user, assistant header) in the episode format."""
    return (fmt or InlineFormat(tokenizer)).prompt_ids(env, task)


Choose = Callable[[list["Episode"], Tensor], tuple[Tensor, Tensor]]
"""(live episodes, their (R, V) logits) -> next ids (R,) and their log-probs (R,)."""


def sample_next(logits: Tensor, s: SamplingSettings, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """(R, V) logits -> sampled ids (R,) and their log-probs under the sampling distribution (R,)."""
    scaled = logits if s.greedy else logits / s.temperature
    logp = torch.log_softmax(scaled, dim=-1)
    if s.greedy:
        ids = logits.argmax(dim=-1)
    else:
        probs = logp.exp()
        if s.top_p < 1.0:
            sorted_p, idx = probs.sort(dim=-1, descending=True)
            keep = sorted_p.cumsum(-1) - sorted_p < s.top_p
            probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p * keep)
        # inverse-CDF sampling: one uniform per row (torch.multinomial took 20 ms for 16 x 49,152 on this CPU, as
        # much as a third of a decode step; this takes under 1 ms and draws from the same distribution)
        cdf = probs.cumsum(-1)  # (R, V)
        # drawn on the generator's device (the CPU's: the same seed draws the same uniforms on any device)
        where = generator.device if generator is not None else cdf.device
        u = torch.rand((len(cdf), 1), generator=generator, dtype=cdf.dtype, device=where).to(cdf.device) * cdf[:, -1:]
        ids = torch.searchsorted(cdf, u).squeeze(-1).clamp(max=cdf.shape[-1] - 1)
    return ids, logp.gather(-1, ids[:, None]).squeeze(-1)


def answer_start(turn: str) -> int | None:
    """Where the answer may begin in the policy's text of a turn: after the turn's thought (`<thought>` or
    `<think>`) when it opens one, None while that thought is still open."""
    return opening_thought_end(turn)


def answer_end_in_turn(env: Environment, turn: str, evidence: Evidence) -> int | None:
    """Where the final answer ends in the policy's text of a turn after a tool response (`env.answer_end`, given the
    episode's tool traffic so far), or None. The answer is the text after the turn's thought (`answer_start`), and
    text holding a tag (a call under way) is never an answer."""
    start = answer_start(turn)
    if start is None:
        return None
    answer = turn[start:]
    if "<" in answer:
        return None
    end = env.answer_end(answer, evidence)
    return None if end is None else start + end


class TurnRules:
    """What happens after each sampled token: stop, go on, or run the tool call the token just closed."""

    def __init__(self, tokenizer: Any, env: Environment, s: SamplingSettings, phases: Phases = NO_PHASES):
        self.tokenizer, self.env, self.s, self.phases = tokenizer, env, s, phases
        self.fmt = episode_format(tokenizer, s.format, s.tool_syntax)
        self.fmt.bind(env)
        self.stops = self.fmt.stops
        self.pieces: dict[int, str] = {}
        self.close_char = TOOL_CALL_CLOSE[-1]
        self.answer_rule = s.stop_at_answer and env.executes_tools

    def piece(self, token: int) -> str:
        text = self.pieces.get(token)
        if text is None:
            text = self.pieces[token] = self.tokenizer.decode([token])
        return text

    def after(self, e: Episode, token: int, logprob: float) -> list[int]:
        """Record a sampled token; the ids to feed next: [token], [token, *tool response], or [] when done."""
        e.completion_ids.append(token)
        e.mask.append(1)
        e.logprobs.append(logprob)
        if token in self.stops:
            if self.fmt.call_at_stop and self.env.executes_tools and self._turn_call(e) is not None:
                return self._splice(e, token)
            e.done, e.stop_reason = True, "eos"
            return []
        piece = self.piece(token)
        if self.answer_rule and e.turns and self._answer_over(e, piece):
            e.done, e.stop_reason = True, "answer"
            return []
        e.tail = (e.tail + piece)[-len(TOOL_CALL_CLOSE) - 8 :]
        if self.env.executes_tools and self.close_char in piece and self.fmt.closes_call(e.tail):
            return self._splice(e, token)
        if e.n_policy_tokens >= self.s.max_new_tokens:
            e.done, e.stop_reason = True, "budget"
            return []
        return [token]

    def _answer_over(self, e: Episode, piece: str) -> bool:
        """Whether the final answer ended with this token or just before it (then the token is taken back: it opens
        the rambling)."""
        before = len(e.said)
        e.said += piece
        assert e.evidence is not None
        end = answer_end_in_turn(self.env, e.said, e.evidence)
        if end is None:
            return False
        if end <= before:
            e.completion_ids.pop()
            e.mask.pop()
            e.logprobs.pop()
        return True

    def _turn_text(self, e: Episode) -> str:
        return self.tokenizer.decode([t for t in e.completion_ids[e.turn_start :] if t not in self.stops])

    def _turn_call(self, e: Episode) -> Any:
        return self.fmt.parse_turn(self._turn_text(e))

    def _splice(self, e: Episode, token: int) -> list[int]:
        """The model ended a tool call: run it and return [token, *response tokens], or [] when the episode ends."""
        response = self._respond(e)
        if response is None:
            return []
        e.completion_ids += response
        e.mask += [0] * len(response)
        e.logprobs += [0.0] * len(response)
        e.turn_start, e.tail, e.said = len(e.completion_ids), "", ""
        return [token, *response]

    def _respond(self, e: Episode) -> list[int] | None:
        """Execute the turn's call and return the response tokens (mask 0), or end the episode."""
        if e.turns >= self.s.max_turns:
            e.done, e.stop_reason = True, "turn_limit"
            return None
        if e.n_policy_tokens >= self.s.max_new_tokens:
            e.done, e.stop_reason = True, "budget"
            return None
        text = self._turn_text(e)
        call = self.fmt.parse_turn(text)
        if call is None:  # `</tool_call>` closed something that was not an open call: nothing to execute
            e.done, e.stop_reason = True, "stray_close"
            return None
        with self.phases(PHASE_TOOLS, calls=1):
            result = call_result(e.toolbox(self.env), call)
        e.results.append(result)
        response = result.response
        assert e.evidence is not None
        e.evidence.calls.append((call.name or "", call.arguments or {}))
        e.evidence.responses.append((call.name or "", response))
        e.tool_errors += "error" in response
        e.turns += 1
        ids = self.fmt.response_ids(e, text, response)
        if ids is None:  # the chat template did not extend what was generated: nothing consistent to splice
            e.done, e.stop_reason = True, "template_mismatch"
        return ids


def _suppress_stops(logits: Tensor, episodes: list[Episode], turns: TurnRules, s: SamplingSettings) -> None:
    short = [i for i, e in enumerate(episodes) if e.n_policy_tokens < s.min_new_tokens]
    if short:
        rows = torch.tensor(short, device=logits.device)[:, None]
        logits[rows, torch.tensor(sorted(turns.stops), device=logits.device)] = -math.inf


@torch.no_grad()
def run_episodes(
    model: Any,
    tokenizer: Any,
    env: Environment,
    tasks: list[Task],
    group_size: int,
    s: SamplingSettings,
    generator: torch.Generator | None = None,
    phases: Phases = NO_PHASES,
    choose: Choose | None = None,
) -> list[Episode]:
    """Sample `group_size` episodes per task (ordered by group), executing tool calls as they are made.

    `choose` picks the live episodes' next tokens from their logits (default: `sample_next` with `s`); forced
    decoding (teacher forcing a known transcript through the engine, as the tests do) passes its own."""
    turns = TurnRules(tokenizer, env, s, phases)
    prompts = [turns.fmt.prompt_ids(env, t) for t in tasks]
    episodes: list[Episode] = []
    try:
        for g, (t, p) in enumerate(zip(tasks, prompts)):
            for _ in range(group_size):  # a stateful environment: every episode its own tools and state
                episodes.append(Episode(t, g, p, episode_state=env.start_episode(t) if env.stateful else None))
        if supports(model):
            with full_parameters(model):  # a ZeRO-3 or FSDP model: gathered once for the whole rollout
                dec = FastDecoder(model)
                _decode_batched(dec, episodes, prompts, group_size, turns, s, generator, phases, choose)
        else:
            for e in episodes:
                _decode_one(model, e, turns, s, generator, choose)
    except BaseException:
        for e in episodes:
            e.close()
        raise
    for e in episodes:
        e.text = turns.fmt.transcript(e)
    return episodes


def _decode_batched(
    dec: FastDecoder,
    episodes: list[Episode],
    prompts: list[list[int]],
    group_size: int,
    turns: TurnRules,
    s: SamplingSettings,
    generator: torch.Generator | None,
    phases: Phases,
    choose: Choose | None = None,
) -> None:
    device = dec.param.device
    shared = shared_prefix(prompts)
    kv = dec.new_cache(1 if shared else len(prompts))
    rest = [p[shared:] for p in prompts]
    width = max(len(p) for p in rest)
    ids = torch.zeros((len(prompts), width), dtype=torch.long, device=device)  # right-padded prompts
    for i, p in enumerate(rest):
        ids[i, : len(p)] = torch.tensor(p, device=device)
    lengths = torch.tensor([len(p) for p in rest], device=device)
    with phases(PHASE_PREFILL, tokens=shared + int(lengths.sum()), padded=shared + ids.numel()):
        if shared:  # the prompts' common start (a long system prompt) once, forked into one row per prompt
            start = torch.tensor([prompts[0][:shared]], device=device)
            _prefill(dec, kv, [prompts[0][:shared]], start, torch.tensor([shared], device=device))
            kv.keep(torch.zeros(len(prompts), dtype=torch.long, device=device))
        hidden = _prefill(dec, kv, rest, ids, lengths)  # one prefill per prompt...
        fork = torch.arange(len(prompts), device=device).repeat_interleave(group_size)
        kv.keep(fork)  # ...forked into its G episodes
        logits = dec.logits(hidden).index_select(0, fork)  # (B, V)
    live = list(range(len(episodes)))  # episode index of each buffer row
    while live:
        rows = [episodes[i] for i in live]
        with phases(PHASE_SAMPLE, tokens=len(rows)):
            if s.min_new_tokens:
                _suppress_stops(logits, rows, turns, s)
            sampled, logp = choose(rows, logits) if choose else sample_next(logits, s, generator)
            feeds = [turns.after(e, t, lp) for e, t, lp in zip(rows, sampled.tolist(), logp.tolist())]
        going = [r for r, f in enumerate(feeds) if f]
        if len(going) < len(live):  # finished episodes leave the batch
            with phases(PHASE_COMPACT, rows=len(live) - len(going)):
                kv.keep(torch.tensor(going, dtype=torch.long, device=device))
            live, feeds = [live[r] for r in going], [feeds[r] for r in going]
        if not live:
            break
        long = [r for r, f in enumerate(feeds) if len(f) > 1]
        if long:  # tool responses: all but their last token as one chunk, fed to just those rows
            chunk = [feeds[r][:-1] for r in long]
            n = max(len(c) for c in chunk)
            ids = torch.zeros((len(long), n), dtype=torch.long, device=device)
            for j, c in enumerate(chunk):
                ids[j, : len(c)] = torch.tensor(c, device=device)
            counts = torch.tensor([len(c) for c in chunk], device=device)
            with phases(PHASE_TOOL_PREFILL, tokens=int(counts.sum()), padded=ids.numel()):
                dec.feed(kv, ids, counts, rows=torch.tensor(long, device=device))
        last = torch.tensor([f[-1] for f in feeds], device=device)[:, None]  # (R, 1)
        with phases(PHASE_DECODE, tokens=len(live), steps=1, context=int(kv.lengths.sum())):
            logits = dec.logits(dec.feed(kv, last, torch.ones(len(live), dtype=torch.long, device=device)))


SHARED_PREFIX_MIN = 256
"""Fewest tokens the prompts of a batch must share at their start for that start to be prefilled once and forked:
tau2_retail's prompts share a ~4.5k-token policy and tool list, which was prefilled again for every task."""


def shared_prefix(prompts: list[list[int]]) -> int:
    """Tokens at the start of every prompt that all share (each keeps at least one of its own to prefill), or 0
    when that is under SHARED_PREFIX_MIN or there is one prompt."""
    if len(prompts) < 2:
        return 0
    first, n = prompts[0], min(len(p) for p in prompts) - 1
    for p in prompts[1:]:
        n = next((k for k in range(n) if p[k] != first[k]), n)
    return n if n >= SHARED_PREFIX_MIN else 0


PREFILL_SCORES_BYTES = 1 << 30
"""Attention scores one prefill call may hold (rows x heads x chunk x context x 4 bytes). Right-padded prompts of
a few hundred tokens prefill in one call as before; a 5k-token prompt (tau2_retail's) is fed a row at a time, in
column chunks past `PREFILL_COLUMNS`: 32 of them in one call wanted 29 GB of scores and were killed for memory."""
PREFILL_COLUMNS = 2048


def _prefill(dec: FastDecoder, kv: Any, prompts: list[list[int]], ids: Tensor, lengths: Tensor) -> Tensor:
    """Feed every prompt into its cache row, after what the row holds already (a shared prefix); the final hidden
    state at each prompt's last token, (P, hidden)."""
    width = ids.shape[1]
    context = int(kv.lengths.max()) + width
    if len(prompts) * dec.heads * width * context * 4 <= PREFILL_SCORES_BYTES:
        return dec.feed(kv, ids, lengths)
    device = ids.device
    per_row = max(1, PREFILL_SCORES_BYTES // (dec.heads * min(width, PREFILL_COLUMNS) * context * 4))
    hidden: list[Tensor] = [ids.new_empty(0)] * len(prompts)
    for first in range(0, len(prompts), per_row):
        group = list(range(first, min(first + per_row, len(prompts))))
        for start in range(0, max(len(prompts[i]) for i in group), PREFILL_COLUMNS):
            fed = [i for i in group if len(prompts[i]) > start]
            chunk = ids[fed, start : start + PREFILL_COLUMNS]
            valid = (lengths[fed] - start).clamp(max=PREFILL_COLUMNS)
            out = dec.feed(kv, chunk, valid, rows=torch.tensor(fed, device=device))
            for j, i in enumerate(fed):
                if len(prompts[i]) <= start + PREFILL_COLUMNS:  # its last token was in this chunk
                    hidden[i] = out[j]
    return torch.stack(hidden)


def _decode_one(
    model: Any,
    e: Episode,
    turns: TurnRules,
    s: SamplingSettings,
    generator: torch.Generator | None,
    choose: Choose | None = None,
) -> None:
    """One episode through `model.forward` with transformers' own cache (any architecture)."""
    device = next(model.parameters()).device
    out = model(input_ids=torch.tensor([e.prompt_ids], device=device), use_cache=True, logits_to_keep=1)
    keyword = cache_keyword(model)
    while True:
        logits = out.logits[:, -1, :].float()
        if s.min_new_tokens:
            _suppress_stops(logits, [e], turns, s)
        sampled, logp = choose([e], logits) if choose else sample_next(logits, s, generator)
        feed = turns.after(e, int(sampled), float(logp))
        if not feed:
            return
        ids = torch.tensor([feed], device=device)
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{keyword: cache_of(out)})
