"""The built-in reward components, the table that names them, and `register_reward` for a plugin's own.

Each component maps a replayed transcript to (value, reason): the reason says why it gave what it gave, so a zero is
inspectable. A `RewardComponent` is the single home of a component's name, short letter, default weight, function
and description; an environment is scored under a `rewards.rubric.Rubric` of them (the built-ins, what plugins
registered, its own).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grpolab.envs.numeric import ANSWER_TOLERANCE, extract_numbers
from grpolab.envs.rubric import Completions, RewardComponent, Shape, check_letters, make_component
from grpolab.errors import UserError
from grpolab.protocol import has_python_block

# defined in a leaf that the config imports without the environments; re-exported (`X as X`) for scoring, preflight,
# the alarms and the simulator, which read them here
from grpolab.reward_defaults import BUILTIN_NAMES as BUILTIN_NAMES
from grpolab.reward_defaults import DEFAULT_LENGTH_UNIT as DEFAULT_LENGTH_UNIT
from grpolab.reward_defaults import MAX_REPLAYED_CALLS as MAX_REPLAYED_CALLS
from grpolab.reward_defaults import SCORE_TIMEOUT_S as SCORE_TIMEOUT_S
from grpolab.reward_defaults import THOUGHT_MIN_WORDS as THOUGHT_MIN_WORDS

if TYPE_CHECKING:  # the table is read by the config, which must not import the tools (and transformers) with it
    from grpolab.envs.base import Environment, Task
    from grpolab.rewards.replay import Replay


@dataclass
class RewardContext:
    gen_tokens: int
    """Policy tokens of the episode (tool output excluded)."""
    length_unit: int
    thought_min_words: int = 3
    """A thought earns its format check only with at least this many words (`reward.thought_min_words`)."""


_WORD = re.compile(r"[^\W\d_]{2,}")


def thought_words(text: str) -> int:
    """Words (two or more letters) in a thought: `...` has none, "I need the ACME Q3 report" has four."""
    return len(_WORD.findall(text))


PAST_REPLAY_CAP = f"not run: past the replay cap ({MAX_REPLAYED_CALLS} calls per transcript)"
"""Why a call past the cap earns no schema credit."""

RewardFn = Callable[["Replay", "Task", "Environment", RewardContext], tuple[float, str]]
"""grpolab's shape of a component's function; TRL's is `fn(prompts, completions, **kwargs) -> list[float | None]`."""


def format_reward(r: Replay, task: Task, env: Environment, ctx: RewardContext) -> tuple[float, str]:
    """Adherence to the protocol's structure, checks of equal weight; a check pays only for something attempted.

    - thought: the turn opens with a closed `<thought>` block holding at least `thought_min_words` words (where
      the env's prompt asks for one): a closed block around nothing does not pay (docs/design.md says why);
    - tags: protocol tags are present and well-formed (where the task needs tools; elsewhere: no broken tags);
    - calls: where the task needs tools, at least one call, every call valid JSON and answered by the environment,
      no `<tool_response>` written by the model; elsewhere no malformed or fabricated ones;
    - answer: a final answer after the last response, free of tag fragments (where calls are not the answer).
    Free text with no tag at all therefore earns at most 0.5 (answer, and calls where none are needed); a
    well-formed structure around nothing (a worded thought, a junk call, "Done.") earns 1.0, which is why a
    format-only reward is gameable and `grpolab check` says so."""
    failed: list[str] = []
    checks = 0

    def check(ok: bool, problem: str) -> None:
        nonlocal checks
        checks += 1
        if not ok:
            failed.append(problem)

    first = r.parsed.opening
    if env.thought_required:
        if first is None or first.kind != "thought" or not first.closed:
            check(False, "the turn does not open with a <thought>")
        else:
            words = thought_words(first.text)
            check(
                words >= ctx.thought_min_words, f"the thought is empty ({words} words, {ctx.thought_min_words} needed)"
            )
    tag_errors = [e for e in r.parsed.errors if not e.startswith("tool call")]
    has_tags = any(s.kind != "text" for s in r.parsed.segments)
    if tag_errors:
        check(False, tag_errors[0])
    else:
        check(has_tags or not task.needs_tools, "no protocol tags at all")
    bad_calls = [c for c in r.calls if not c.ok]
    if bad_calls:
        check(False, bad_calls[0].error or "malformed call")
    elif r.fabricated or r.unanswered_calls:
        check(False, r.fabricated[0] if r.fabricated else "a call the environment never answered")
    else:
        check(bool(r.calls) or not task.needs_tools, "no tool call, but the task needs one")
    answer = r.parsed.final_answer
    if "<tool" in answer or "</" in answer:
        check(False, "tag fragments in the final answer")
    elif env.executes_tools:
        check(bool(answer), "no final answer after the last tool response")
    value = 1.0 - len(failed) / max(checks, 1)
    return value, "well-formed" if not failed else "; ".join(failed)


def schema_reward(r: Replay, task: Task, env: Environment, ctx: RewardContext) -> tuple[float, str]:
    """Fraction of calls that name a real tool with arguments valid under its JSON schema; a call that timed out,
    or one past the replay cap, earns nothing (its reason says which)."""
    if not r.calls:
        return (0.0, "no tool call, but the task needs one") if task.needs_tools else (1.0, "no call needed")
    problems = r.call_problems
    valid = sum(p is None for p in problems)
    first_problem = next((p for p in problems if p and p != PAST_REPLAY_CAP), "")
    reason = f"{valid}/{len(r.calls)} calls valid" + (f" ({first_problem})" if first_problem else "")
    if r.unreplayed_calls:
        reason += f"; {r.unreplayed_calls} calls past the replay cap ({MAX_REPLAYED_CALLS} per transcript) earn nothing"
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
        return verdict_score(verdict.score), verdict.reason
    return (1.0 if verdict.passed else 0.0), verdict.reason


def verdict_score(score: object) -> float:
    """A Verdict's partial credit, checked as a verifier's plain number is: a finite number in [0, 1]. Anything
    else raises, so the component is an error (NaN, counted, the step skipped), never a reward of 5 or of inf."""
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1:
        raise ValueError(f"the verifier's Verdict has score={score!r}: a score must be a finite number in [0, 1]")
    return float(score)


def length_reward(r: Replay, task: Task, env: Environment, ctx: RewardContext) -> tuple[float, str]:
    """Generated tokens / length_unit (tool output excluded); the default weight is negative."""
    return ctx.gen_tokens / ctx.length_unit, f"{ctx.gen_tokens} generated tokens"


def code_block_reward(r: Replay, task: Task, env: Environment, ctx: RewardContext) -> tuple[float, str]:
    """DELIBERATELY GAMEABLE: 1 for any fenced python block, whatever the code does (a reward that pays for the form
    of an answer gets the form and not the answer).

    Ship it only to show reward hacking: `configs/code_hack.toml` trains on it alone and the hacking alarm fires."""
    if has_python_block(r.generated_text):
        return 1.0, "a python code block (paid whether or not it works)"
    return 0.0, "no python code block"


def lenient_completion_reward(r: Replay, task: Task, env: Environment, ctx: RewardContext) -> tuple[float, str]:
    """DELIBERATELY GAMEABLE: 1 when any number in the final answer matches the truth, however many others it lists.

    The strict verifier fails a hedge ("12.5, or maybe 13.1"); this one pays it, so a policy trained on it learns to
    list candidates. It exists to show the hedging hack (`benchmarks/hack_detection.py`); never train on it."""
    truth = task.truth.get("diff") if isinstance(task.truth, dict) else task.truth
    if not isinstance(truth, (int, float)) or isinstance(truth, bool):
        return 0.0, "no numeric truth to match"
    numbers = extract_numbers(r.parsed.final_answer)
    if any(abs(abs(n) - abs(truth)) <= ANSWER_TOLERANCE for n in numbers):
        return 1.0, f"one of {len(numbers)} numbers matches (paid however many others are listed)"
    return 0.0, "no number in the final answer matches"


# fmt: off
BUILTIN_COMPONENTS = (
    RewardComponent("format",     "F",  1.0,  format_reward,     "the transcript follows the protocol", shaping=True),
    RewardComponent("schema",     "S",  1.5,  schema_reward,     "calls name real tools with schema-valid args",
                    shaping=True),
    RewardComponent("completion", "C",  3.0,  completion_reward, "the verifier accepts the grounded answer"),
    RewardComponent("length",     "L", -0.05, length_reward,     "per length_unit generated tokens"),
    RewardComponent("code_block", "B",  0.0,  code_block_reward, "GAMEABLE: any python block", standard=False),
    RewardComponent("lenient_completion", "H", 0.0, lenient_completion_reward, "GAMEABLE: any matching number",
                    standard=False),
)
# fmt: on
"""The built-in components, in table order (`rewards.rubric.BUILTIN_RUBRIC`)."""
if BUILTIN_NAMES != {c.name for c in BUILTIN_COMPONENTS}:  # the leaf's list (reward_defaults) is this table's names
    raise RuntimeError("grpolab.reward_defaults.BUILTIN_NAMES does not name the built-in components")


def standard_names() -> list[str]:
    """The built-in standard components in table order: the order of `--weights F,S,C,L`."""
    return [c.name for c in BUILTIN_COMPONENTS if c.standard]


_REGISTERED: dict[str, RewardComponent] = {}
"""Components plugins added for every environment (`register_reward`), read live by `rubric.DEFAULT_RUBRIC`."""


def registered_components() -> dict[str, RewardComponent]:
    return dict(_REGISTERED)


def register_reward(
    name: str,
    fn: Callable[..., Any],
    letter: str | None = None,
    description: str = "",
    weight: float = 0.0,
    shape: Shape | None = None,
    shaping: bool = False,
    completions: Completions = "text",
) -> RewardComponent:
    """Add a reward component to every environment's rubric (a plugin's reward for the built-in environments); an
    environment adds its own with `self.rubric.add(...)`. Its default weight is `weight` (0: scored only where the
    config weights it); `completions="messages"` gives a TRL-shaped function TRL's conversational prompts and
    completions instead of text. A built-in name, or a letter a built-in or another registered component has, is a
    UserError (`check_letters`)."""
    if name in BUILTIN_NAMES:
        raise UserError(f"reward component {name!r} is built in", "give your component another name")
    component = make_component(name, fn, letter, weight, description, shape, shaping, completions)
    check_letters([*BUILTIN_COMPONENTS, *{**_REGISTERED, name: component}.values()])
    _REGISTERED[name] = component
    return component


def unregister_reward(name: str) -> None:
    """Remove a registered component (tests, notebooks)."""
    _REGISTERED.pop(name, None)
