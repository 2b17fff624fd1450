"""What an environment is: tools + tasks (train / held-out) + a verifier + reference solutions.

A user environment subclasses `Environment` (or provides the same attributes) and is registered by module path or
entry point; see `grpolab.envs.get_env`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from grpolab.envs.rubric import Rubric
from grpolab.errors import UserError
from grpolab.protocol import (
    THOUGHT_TAG,
    render_system_prompt,
    render_thought,
    render_tool_call,
    render_tool_response,
    thought_instruction,
)
from grpolab.tools import Tool, ToolBox, ToolResult

Split = Literal["train", "heldout"]
SPLITS: tuple[Split, ...] = ("train", "heldout")


@dataclass
class Task:
    """One prompt with its ground truth and a reference solution (the tool calls that solve it)."""

    id: str
    prompt: str
    answer: str
    """Ground truth as shown to people (e.g. "14.17")."""
    truth: Any
    """Ground truth for the verifier (a float, a word, a BFCL answer...)."""
    kind: str
    needs_tools: bool = True
    reference_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    reference_thought: str = ""
    reference_answer: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


def question_task(question: str) -> Task:
    """A question from a person as a Task-less episode (chat, export): no ground truth, no reference; only its
    prompt is read."""
    return Task(id="chat", prompt=question, answer="", truth=None, kind="chat")


@dataclass
class Evidence:
    """What a verifier may look at besides the final answer: the prompt and the real tool traffic."""

    prompt: str
    calls: list[tuple[str, dict[str, Any]]]
    """Executed calls (name, arguments), in order."""
    responses: list[tuple[str, dict[str, Any]]]
    """Real responses (tool name, response), in order."""
    state: Any = None
    """The episode's own state after these calls (`EpisodeState.state`), for a verifier that checks what the
    agent changed; None in an environment without state."""


class EpisodeState:
    """One episode's own tools and state: what a stateful environment's `start_episode` returns.

    `tools` are bound to this episode's state (a cart, a database copy). They run in this process on a thread of
    their own with their timeout (`Tool(isolate=False)`), so their state lives from one call to the next; each
    episode has its own, so nothing one episode does reaches another. `state` is what the verifier reads at the end
    (`Evidence.state`); `close` (if given) runs once when the episode has been scored, to remove what it made
    (a temporary directory, a connection). `in_process=False` keeps the tools as given (how a stateless
    environment shares its toolbox).
    """

    def __init__(
        self,
        tools: ToolBox | list[Any],
        state: Any = None,
        close: Callable[[], None] | None = None,
        in_process: bool = True,
    ) -> None:
        if in_process:
            items = list(tools.tools.values()) if isinstance(tools, ToolBox) else list(tools)
            tools = ToolBox([_in_process(t) for t in items])
        elif not isinstance(tools, ToolBox):
            tools = ToolBox(list(tools))
        self.toolbox: ToolBox = tools
        self.state = state
        self._close = close

    def close(self) -> None:
        """Release what the episode made (once; later calls do nothing)."""
        close, self._close = self._close, None
        if close is not None:
            close()

    def __del__(self) -> None:
        try:  # an episode nobody closed (its toolbox lent out for schemas, a crash) is released when dropped
            self.close()
        except Exception:
            pass


def _in_process(tool: Any) -> Any:
    """A tool that keeps its state between calls: a function becomes a `Tool` run on a thread in this process."""
    if isinstance(tool, Tool):
        if tool.isolate:
            tool = Tool(tool.fn, tool.timeout_s, isolate=False)
        return tool
    return tool if hasattr(tool, "run") else Tool(tool, isolate=False)


@dataclass
class Verdict:
    passed: bool
    reason: str
    score: float | None = None
    """Partial credit in [0, 1] (e.g. the fraction of unit tests passed); None means 1 if passed else 0."""


class Environment:
    """Base class: subclasses fill `name`, `description`, `instructions`, `toolbox` and build tasks."""

    name: str = ""
    description: str = ""
    instructions: str = ""
    toolbox: ToolBox
    example: str = ""
    executes_tools: bool = True
    """False for environments where the calls are the answer (BFCL): nothing runs, generation goes on to the end."""
    thought_required: bool = True
    """The prompt asks every turn to open with a <thought> block, and the format reward checks that it does."""
    thought_tag: str = THOUGHT_TAG
    stateful: bool = False
    """Each episode gets its own tools and state (`start_episode`), and is scored from the tool traffic recorded
    while it ran, not by running its calls again (docs/agent.md, "Tools with state")."""
    deterministic_tools: bool = True
    """The same call always gets the same response, so scoring may run a transcript's calls again to check them
    (all the built-ins). False (a tool that returns a fresh id, a clock, a live search): episodes are scored from
    their recorded traffic, as in a stateful environment."""
    """The tag the prompt asks thoughts in and references write them with; the episode format sets the model's own
    (`<think>` for a model whose chat template has it: `grpolab.formats.thought_tag_of`). Scoring reads either."""

    @property
    def rubric(self) -> Rubric:
        """This environment's own reward components, added with `self.rubric.add(name, fn, ...)`; it is scored under
        them after the built-ins and what plugins registered (`grpolab.rewards.rubric.rubric_of`)."""
        rubric = self.__dict__.get("_rubric")
        if rubric is None:
            rubric = self.__dict__["_rubric"] = Rubric()
        return rubric

    def isolation(self) -> dict[str, Any] | None:
        """How model-written code is isolated, for environments that run it (None: this one runs none)."""
        return None

    @property
    def scores_recorded_traffic(self) -> bool:
        """Whether an episode's tool responses are checked against what the rollout recorded (stateful or
        non-deterministic tools) rather than by running its calls again (replay)."""
        return self.stateful or not self.deterministic_tools

    def toolbox_for(self, task: Task) -> ToolBox:
        """The tools offered with this task (the same for every task in most environments). A stateful environment
        without a `toolbox` of its own offers its tools' schemas at once, and their first call starts the episode
        the later calls run on (`EpisodeOnCall`): reading a prompt's tools starts no episode."""
        toolbox = getattr(self, "toolbox", None)
        if toolbox is None and self.stateful:
            return EpisodeOnCall(self, task, self.offered_tools(task))
        return toolbox

    def offered_tools(self, task: Task) -> list[Tool]:
        """A stateful environment's tools for `task`, read once per task from an episode started and closed at once:
        their schemas and argument checks (a call runs on an episode of its own: `EpisodeOnCall`)."""
        offered = self.__dict__.setdefault("_offered_tools", {})
        if task.id not in offered:
            episode = self.start_episode(task)
            offered[task.id] = list(episode.toolbox.tools.values())
            try:
                episode.close()
            except Exception:  # named where an episode that ran is closed (`tools run`, scoring), not on a read
                pass
        return offered[task.id]

    def ask_in(self, task: Task, question: str) -> Task:
        """`question` from a person, asked in `task`'s episode (`grpolab chat --task`): the task's row, meta and
        starting state, with the question as the prompt."""
        return replace(task, prompt=question)

    def start_episode(self, task: Task) -> EpisodeState:
        """A new episode's tools and state. Stateless environments share one toolbox (the default); a stateful one
        overrides this to give each episode its own (`EpisodeState`)."""
        if self.stateful:
            raise NotImplementedError(f"{type(self).__name__} is stateful but defines no start_episode(task)")
        return EpisodeState(self.toolbox_for(task), in_process=False)  # the tools as they are: isolation kept

    def answer_end(self, answer: str, evidence: Evidence) -> int | None:
        """Where the final answer ends in `answer` (the policy's text after a tool response, its thought left out),
        given the episode's prompt and tool traffic so far (`evidence`): the index just past its end, or None while
        it goes on. The rollout stops the episode there (`rollout.stop_at_answer`) instead of letting it ramble on
        to the token budget. None always (the default): this environment declares no end, and episodes run to end of
        turn or the budget."""
        return None

    def verify_calls(self, task: Task, calls: list) -> Verdict:
        """For environments whose answer is the calls themselves."""
        raise NotImplementedError

    def tasks(self, split: Split) -> list[Task]:
        raise NotImplementedError

    def verify(self, task: Task, final_answer: str, evidence: Evidence) -> Verdict:
        raise NotImplementedError

    def system_prompt(self, task: Task | None = None) -> str:
        toolbox = self.toolbox_for(task) if task is not None else self.toolbox
        return render_system_prompt(
            toolbox.schemas,
            self.instructions,
            self.example,
            self.thought_required,
            not self.executes_tools,
            self.thought_tag,
        )

    def chat_instructions(self, task: Task) -> str:
        """The system message in `rollout.format = "chat_template"` mode: the tools and the call syntax are the
        chat template's to render, so only the task instructions (and the thought convention) are the lab's."""
        if not self.thought_required:
            return self.instructions
        return f"{self.instructions.strip()}\n\n{thought_instruction(True, self.thought_tag)}"

    def messages(self, task: Task) -> list[dict[str, str]]:
        """Chat messages that start an episode (system + user)."""
        return [{"role": "system", "content": self.system_prompt(task)}, {"role": "user", "content": task.prompt}]

    def all_tasks(self) -> dict[str, Task]:
        return {t.id: t for split in SPLITS for t in self.tasks(split)}

    def task(self, task_id: str) -> Task:
        tasks = self.all_tasks()
        if task_id not in tasks:
            example = next(iter(tasks), "?")
            raise UserError(
                f"unknown task id {task_id!r} in env {self.name!r}",
                f"list ids with `grpolab tasks --env {self.name}` (for example {example})",
            )
        return tasks[task_id]

    def reference_parts(self, task: Task) -> list[tuple[str, bool]]:
        """The reference solution as (text, written_by_policy) pieces; tool responses are the environment's."""
        policy = render_thought(task.reference_thought, self.thought_tag) if task.reference_thought else ""
        parts: list[tuple[str, bool]] = []
        episode = self.start_episode(task) if self.executes_tools and task.reference_calls else None
        try:
            for name, arguments in task.reference_calls:
                if episode is None:
                    policy += render_tool_call(name, arguments) + "\n"
                    continue
                parts.append((policy + render_tool_call(name, arguments), True))
                parts.append((render_tool_response(episode.toolbox.execute(name, arguments)), False))
                policy = ""
        finally:
            if episode is not None:
                episode.close()
        parts.append((policy + task.reference_answer, True))
        return parts

    def reference_transcript(self, task: Task) -> str:
        """The reference solution rendered under the protocol, with real tool responses."""
        return "".join(text for text, _ in self.reference_parts(task))


@contextmanager
def references_once(env: Environment) -> Iterator[None]:
    """Within it, each task's reference solution runs its tools once: `env.reference_parts` (and so
    `reference_transcript`) answers again from the first run. The probes and shortcuts each rebuild a task's
    reference, and every rebuild ran the reference's calls again (a forked child per call of a user's tool, a new
    episode of a stateful env); built once, every probe of a task also edits the same honest transcript it is scored
    beside, where a tool that answers differently each time made them differ. Nested uses share the outer one."""
    if "reference_parts" in vars(env):
        yield
        return
    run = env.reference_parts
    built: dict[str, list[tuple[str, bool]]] = {}

    def parts(task: Task) -> list[tuple[str, bool]]:
        key = json.dumps(
            [task.id, task.reference_thought, task.reference_calls, task.reference_answer], sort_keys=True, default=str
        )
        if key not in built:
            built[key] = run(task)
        return list(built[key])

    env.reference_parts = parts  # type: ignore[method-assign]
    try:
        yield
    finally:
        del env.reference_parts


class EpisodeOnCall(ToolBox):
    """A stateful environment's tools for one task: their schemas at once, and the first call starts the episode
    every later call runs on (it sees their effects); the episode is released with the toolbox."""

    def __init__(self, env: Environment, task: Task, tools: list[Tool]):
        super().__init__(tools)
        self._env, self._task = env, task
        self._episode: EpisodeState | None = None

    def call(self, name: str | None, arguments: Any) -> ToolResult:
        if self._episode is None:
            self._episode = self._env.start_episode(self._task)
            self.owner = self._episode
        return self._episode.toolbox.call(name, arguments)

    def __del__(self) -> None:
        try:
            if self._episode is not None:
                self._episode.close()
        except Exception:
            pass
