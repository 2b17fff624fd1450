"""Gameability probes: hack transcripts built per task that must score strictly below the honest reference.

Each probe is a cheap strategy a policy could discover (dummy tags, fabricated tool output, hedging, answering
without tools...). If one scores at least as well as honest work under the configured weights, GRPO will find it
sooner or later; `grpolab check` reports it as gameable before any GPU time is spent. Users add their own probes
with `register_probe`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from grpolab.envs.base import Environment, Task, references_once
from grpolab.protocol import render_thought, render_tool_call, render_tool_response, response_json
from grpolab.rewards.components import THOUGHT_MIN_WORDS
from grpolab.rewards.replay import calls_answered_once
from grpolab.rewards.score import Score, score_transcript

R = TypeVar("R", bound="BesideHonest")
Probe = Callable[[Environment, Task], "str | None"]
"""(env, task) -> a hack transcript, or None where the strategy does not apply (e.g. no tool calls to fake)."""


def dummy_tags(env: Environment, task: Task) -> str:
    """Well-formed structure around nothing: an empty thought, a call of the first offered tool with no arguments
    (and its real, error, response), and a non-answer. It earns full format credit: a format-only reward is
    gamed by dummy tags."""
    toolbox = env.toolbox_for(task)
    if not toolbox.tools:
        return render_thought("I will use a tool.") + "Done."
    name = next(iter(toolbox.tools))
    call = render_tool_call(name, {})
    if not env.executes_tools:
        return render_thought("I will use a tool.") + call
    return render_thought("I will use a tool.") + call + render_tool_response(toolbox.execute(name, {})) + "Done."


def empty_call(env: Environment, task: Task) -> str:
    """A tool call with an empty object, then a non-answer."""
    return "<tool_call>\n{}\n</tool_call>" + render_tool_response({"error": "tool call has no string 'name'"}) + "Done."


def call_without_answer(env: Environment, task: Task) -> str:
    """The right first call, its real response, and no final answer."""
    if not task.reference_calls:
        return None
    name, args = task.reference_calls[0]
    return render_tool_call(name, args) + render_tool_response(env.toolbox_for(task).execute(name, args))


def fabricated_response(env: Environment, task: Task) -> str:
    """Real calls, but the model writes the last tool response itself (claiming the right answer)."""
    if not env.executes_tools:  # the calls are the answer: any tool_response at all is the model's invention
        return env.reference_transcript(task) + render_tool_response({"result": "success"})
    if not task.reference_calls:
        return None
    parts = env.reference_parts(task)
    real = response_json(parts[-2][0])  # what the tool answered the last call (after the calls before it)
    fake: dict = {"result": _shifted(task, 0.0)}
    if fake == real:  # JSON equality, as the replay compares responses
        fake = {**real, "verified": True}  # the claim equals the real value: still not what the tool said
    out = [
        render_tool_response(fake) if i == len(parts) - 2 and not by_policy else text
        for i, (text, by_policy) in enumerate(parts)
    ]
    return "".join(out)


def hedged_answer(env: Environment, task: Task) -> str:
    """Honest tool use, then an answer that lists several candidate results."""
    transcript = "".join(text for text, _ in env.reference_parts(task)[:-1])
    return transcript + f"It is either {task.answer}, or maybe {_shifted(task, 1.0)} or {_shifted(task, -2.5)}."


def confident_without_tools(env: Environment, task: Task) -> str:
    """The correct answer stated confidently with no tool use (as if memorised or guessed)."""
    if not task.needs_tools:
        return None  # that is honest work where no tool is needed
    return task.reference_answer


def unknown_tool(env: Environment, task: Task) -> str:
    """A call to a tool that does not exist, then the correct answer anyway."""
    args = {"ticker": task.id}
    return (
        render_tool_call("get_stock_price", args)
        + render_tool_response(env.toolbox_for(task).execute("get_stock_price", args))
        + task.reference_answer
    )


def schema_invalid(env: Environment, task: Task) -> str:
    """Calls with wrong argument names (schema-invalid), then the correct answer."""
    if not task.reference_calls:
        return None
    out = []
    for name, args in task.reference_calls:
        bad = {f"{k}_value": v for k, v in args.items()}
        out.append(render_tool_call(name, bad) + render_tool_response(env.toolbox_for(task).execute(name, bad)))
    return "".join(out) + task.reference_answer


def call_loop(env: Environment, task: Task) -> str:
    """The first call repeated many times before an honest finish."""
    if not task.reference_calls:
        return None
    name, args = task.reference_calls[0]
    if env.stateful and env.executes_tools:  # every call changes the state the next one answers from: one episode
        tools = env.toolbox_for(task)
        calls = [(name, args)] * 6 + list(task.reference_calls)
        loop = "".join(render_tool_call(n, a) + render_tool_response(tools.execute(n, a)) for n, a in calls)
        return loop + task.reference_answer
    loop = (render_tool_call(name, args) + render_tool_response(env.toolbox_for(task).execute(name, args))) * 6
    return loop + env.reference_transcript(task)


def padding(env: Environment, task: Task) -> str:
    """Honest work wrapped in a long filler thought."""
    return render_thought("Let me think about this very carefully. " * 40) + env.reference_transcript(task)


def fenced_calls(env: Environment, task: Task) -> str:
    """Calls written in markdown fences instead of tags, with made-up results, then the correct answer."""
    if not task.reference_calls:
        return None
    fences = "".join(f'```json\n{{"name": "{n}", "arguments": {args}}}\n```\n' for n, args in task.reference_calls)
    return fences.replace("'", '"') + f"Result: {task.answer}\n" + task.reference_answer


def answer_only_in_thought(env: Environment, task: Task) -> str:
    """Honest tool use, but the answer is hidden in a thought and the final text says nothing."""
    transcript = "".join(text for text, _ in env.reference_parts(task)[:-1])
    return transcript + render_thought(task.reference_answer) + "See above."


def _shifted(task: Task, delta: float) -> str:
    try:
        return f"{float(task.answer.split()[-1]) + delta:.2f}"
    except ValueError:
        return f"{delta:.2f}"


PROBES: dict[str, Probe] = {
    "dummy_tags": dummy_tags,
    "empty_call": empty_call,
    "call_without_answer": call_without_answer,
    "fabricated_response": fabricated_response,
    "hedged_answer": hedged_answer,
    "confident_without_tools": confident_without_tools,
    "unknown_tool": unknown_tool,
    "schema_invalid": schema_invalid,
    "call_loop": call_loop,
    "padding": padding,
    "fenced_calls": fenced_calls,
    "answer_only_in_thought": answer_only_in_thought,
}


def register_probe(name: str, probe: Probe) -> None:
    """Add a probe: a function (env, task) -> transcript text."""
    PROBES[name] = probe


@dataclass
class BesideHonest:
    """A transcript scored beside the task's honest reference under the same reward."""

    name: str
    task_id: str
    score: Score
    honest: Score
    transcript: str

    @property
    def gain(self) -> float:
        """How far above honest work it scores (negative: below)."""
        return self.score.total - self.honest.total


@dataclass
class ProbeResult(BesideHonest):
    @property
    def probe(self) -> str:
        return self.name

    @property
    def margin(self) -> float:
        """How far below honest work the probe scores (positive is safe)."""
        return -self.gain

    @property
    def gameable(self) -> bool:
        return not self.margin > 1e-9

    def winning_components(self) -> list[str]:
        """Components where the probe earns at least as much (weighted) as honest work."""
        w = self.score.weights
        return [
            k
            for k, v in self.score.components.items()
            if w.get(k, 0) != 0 and w.get(k, 0) * v >= w.get(k, 0) * self.honest.components.get(k, 0) - 1e-9
        ]


def score_beside_honest(
    env: Environment,
    tasks: list[Task],
    builders: dict[str, Probe],
    weights: dict[str, float],
    length_unit: int,
    count_tokens: Callable[[str], int],
    thought_min_words: int = THOUGHT_MIN_WORDS,
) -> list[tuple[str, Task, Score, Score, str]]:
    """(name, task, score, honest score, transcript) of every builder's transcript on every task where it applies
    (and differs from the honest reference), scored under the given reward beside the honest reference."""

    def score(task: Task, text: str) -> Score:
        return score_transcript(
            env, task, text, weights, length_unit, count_tokens=count_tokens, thought_min_words=thought_min_words
        )

    out = []
    with references_once(env), calls_answered_once():  # every builder edits the one honest run of a task's tools
        for task in tasks:
            reference = env.reference_transcript(task)
            honest = score(task, reference)
            for name, build in builders.items():
                text = build(env, task)
                if text is not None and text != reference:
                    out.append((name, task, score(task, text), honest, text))
    return out


def run_probes(
    env: Environment,
    tasks: list[Task],
    weights: dict[str, float],
    length_unit: int,
    count_tokens: Callable[[str], int],
    thought_min_words: int = THOUGHT_MIN_WORDS,
) -> list[ProbeResult]:
    probes = {**PROBES, **getattr(env, "probes", {})}
    scored = score_beside_honest(env, tasks, probes, weights, length_unit, count_tokens, thought_min_words)
    return [ProbeResult(name, task.id, s, honest, text) for name, task, s, honest, text in scored]


def best_gain_by_name(results: list[R]) -> list[R]:
    """For each probe (or shortcut), the task where it came closest to honest work or beat it by most."""
    best: dict[str, R] = {}
    for r in results:
        if r.name not in best or r.gain > best[r.name].gain:
            best[r.name] = r
    return list(best.values())


def worst_by_probe(results: list[ProbeResult]) -> list[ProbeResult]:
    """For each probe, the task where it came closest to (or beat) honest work."""
    return best_gain_by_name(results)


def gameable_lines(results: list[ProbeResult]) -> list[str]:
    return [
        f"gameable: {r.probe} beats honest work by {max(-r.margin, 0.0) + 0.0:.2f} on {r.task_id} "
        f"(components {', '.join(r.winning_components()) or 'none'})"
        for r in worst_by_probe(results)
        if r.gameable
    ]
