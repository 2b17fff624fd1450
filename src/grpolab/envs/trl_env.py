"""A Hugging Face TRL `environment_factory` class as a grpolab environment, its code unchanged.

TRL's GRPOTrainer (1.16) takes `environment_factory=MyEnv`: a class called with no arguments whose instances have
`reset(**row_columns) -> str | None`, whose public methods are the tools (typed, with Google docstrings), and that
may own the reward with `get_reward() -> float`. `env = "my_env.py:MyEnv"` in a config runs such a class here as it
is: `grpolab.envs.get_env` wraps any class of that shape (a callable `reset`, not grpolab's interface) in `TrlEnv`.

- Tasks: the config's `data` rows, read and checked exactly as env `data` reads them (docs/data-env.md). `reset`
  gets each row's columns as TRL passes a dataset's: `prompt` (TRL's conversational form: one user message),
  `answer` and every key of the row's `meta`.
- Tools: the class's public functions, found as TRL finds them (on the class, sorted by name; `reset`,
  `get_reward` and `_private` names left out); their schemas are read once, from one probe instance.
- Episodes (`stateful = True`): one instance per live episode, pooled and reset as TRL pools them ("construct
  once, reset often"). An episode's tools are its instance's bound methods, run in this process (`EpisodeState`;
  async ones to completion); its state, which the verifier and a reward function's `environments` read, is the
  instance. Nothing is closed: TRL never closes an instance, and a public `close` would be one of its tools.
- The prompt: what `reset` returns for a row is appended to the row's prompt, as TRL appends it to the last user
  message, read once when the tasks load (on the probe instance). The episodes of a group share one prompt, so each
  episode's own reset must return that same text for its row; one that does not (a board drawn at random at every
  reset) is refused, at load where two resets of the first row differ, else when the episode starts, with the fix:
  draw it from the row (a seed column under `meta`).
- The verifier: `data_env.verifier` where the config sets one; else `get_reward()` on the episode's instance, its
  value clamped to [0, 1] the completion reward, the task solved at 1 or more (TRL's convention for a solved task,
  and the rule for a grpolab verifier's score). A class without get_reward needs `data_env.verifier`.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import math
import numbers
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from grpolab.envs.base import EpisodeOnCall, EpisodeState, Evidence, Split, Task, Verdict
from grpolab.envs.data.env import DataEnv
from grpolab.envs.data.rows import Row, TaskRow
from grpolab.envs.data.verifiers import AnswerCheck, check_for
from grpolab.errors import UserError
from grpolab.tools import Tool, ToolBox, failure_text

if TYPE_CHECKING:  # the config stands above the environments
    from grpolab.config import DataEnvConfig

RESERVED = ("reset", "get_reward")
"""Public methods TRL does not offer as tools."""
DOCS = "docs/trl-env.md"


def has_function(cls: type, name: str) -> bool:
    """Whether the class defines `name` as a function, as TRL looks for `reset` and `get_reward`."""
    return any(n == name for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction))


def tool_names(cls: type) -> list[str]:
    """The class's tools as TRL finds them: its public functions (inherited ones too) by name, sorted."""
    members = inspect.getmembers(cls, predicate=inspect.isfunction)  # on the class: properties are not evaluated
    return [n for n, _ in members if n not in RESERVED and not n.startswith("_")]


def synchronous(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, or for a coroutine function one that runs it to completion (TRL awaits async tools and rewards)."""
    if not inspect.iscoroutinefunction(fn):
        return fn

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(fn(*args, **kwargs))

    return run


def _not_here(name: str) -> Callable[..., Any]:
    def refused(**arguments: Any) -> Any:
        raise RuntimeError(f"{name} runs on an episode's own instance (TrlEnv.start_episode), not on the probe")

    return refused


def _shown(text: str | None) -> str:
    return repr(text if text is None or len(text) <= 60 else text[:60] + "...")


class TrlEnv(DataEnv):
    """A TRL environment class's instances as episodes, over the config's rows (module docstring)."""

    description = "A TRL environment_factory class: its methods the tools, reset per episode, get_reward the verifier"
    stateful = True

    def __init__(
        self,
        name: str,
        factory: Callable[[], Any],
        files: list[str] | None,
        settings: DataEnvConfig | None,
        probe: Any = None,
    ):
        self.name = name
        self.factory = factory
        if not files:
            raise UserError(
                f"env {name!r} is a TRL environment class and has no tasks: the config's data is empty",
                f'name the rows its reset() is called with: data = ["tasks.jsonl"] in the config (rows as env data '
                f"reads them; {DOCS})",
            )
        if settings is None:
            raise UserError(f"env {name!r} has no [data_env] settings", "build it with grpolab.envs.env_for(config)")
        if settings.tools:
            raise UserError(
                f"data_env.tools = {settings.tools!r} is env data's; the tools of env {name!r} are its class's "
                "public methods",
                "remove data_env.tools from the config",
            )
        self._lock = threading.Lock()
        self._pool: list[Any] = []
        self._rows: dict[str, tuple[str, dict[str, Any], str | None]] = {}
        """Task id -> (its prompt with reset's text, the columns reset is called with, what reset returned)."""
        self._asked: dict[str, set[str]] = {}
        """Task id -> the prompts of questions asked in its episode (`ask_in`): reset with that row's columns."""
        self._probe = probe if probe is not None else self._new()
        self._cls = type(self._probe)
        if not has_function(self._cls, "reset"):
            raise UserError(
                f"env {name!r}: {self._cls.__name__} defines no reset method",
                "define reset(self, **kwargs) -> str | None, as TRL's environment_factory requires",
            )
        self.owns_reward = has_function(self._cls, "get_reward")
        """Whether the class defines get_reward (the verifier where the config names none)."""
        self._templates = self._read_tools()
        super().__init__(files, settings)

    # ---- what env data builds from the config, here from the class ----

    no_tools = "the environment class has no public methods, so no tools"

    def _read_tools(self) -> dict[str, Tool]:
        """One Tool per public method, by attribute name: its schema and argument check, read once from the probe.
        Its function refuses to run: calls run on an episode's instance (`_bind`)."""
        templates: dict[str, Tool] = {}
        for attr in tool_names(self._cls):
            try:
                tool = Tool(getattr(self._probe, attr), isolate=False)
            except Exception as exc:  # transformers' TypeHintParsingException, DocstringParsingException...
                raise UserError(
                    f"tool {attr!r} of env {self.name!r} has no JSON schema ({exc})",
                    "give every argument a type hint and describe it under 'Args:' in the method's docstring (TRL "
                    "reads the same), or make the method private (_name) if it is no tool",
                ) from None
            tool.fn = _not_here(attr)
            templates[attr] = tool
        return templates

    def _toolbox(self) -> ToolBox:
        return ToolBox(list(self._templates.values()))

    def _check(self) -> AnswerCheck:
        if self.settings.verifier:
            return check_for(self.settings)
        if self.owns_reward:
            return AnswerCheck(lambda answer: answer, self._reward_verdict, user_code=True)
        raise UserError(
            f"env {self.name!r} has no verifier: {self._cls.__name__} defines no get_reward() and the config sets "
            "no data_env.verifier",
            "define get_reward(self) -> float on the class (1.0 when the task is solved), or set data_env.verifier "
            "(exact, numeric, regex, json, or module:function) in the config",
        )

    @property
    def verifier_name(self) -> str:
        return self.settings.verifier or ("get_reward" if self.owns_reward else "exact")

    def _reward_verdict(self, final_answer: str, task: Task, evidence: Evidence) -> Verdict:
        """get_reward() of the episode's instance: its value clamped to [0, 1] is the score, 1 or more passes. A
        value that is not a finite number raises (the completion reward is then NaN, and the step skipped)."""
        instance = evidence.state
        get_reward = getattr(instance, "get_reward", None)
        if not callable(get_reward):
            raise TypeError(f"the episode's state is a {type(instance).__name__}, not an instance with get_reward()")
        value = synchronous(get_reward)()
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise TypeError(
                f"{type(instance).__name__}.get_reward() returned {value!r}; return a finite float (1.0: solved)"
            )
        value = float(value)
        return Verdict(value >= 1.0, f"get_reward() = {value:g}", score=min(max(value, 0.0), 1.0))

    def _task(self, row: Row, parsed: TaskRow, ids: dict[str, str]) -> tuple[Task, Split] | str:
        """The row as env data reads it, its prompt followed by what reset returns for it (on the probe)."""
        built = super()._task(row, parsed, ids)
        if isinstance(built, str):
            return built
        task, split = built
        columns = {**parsed.meta, "prompt": [{"role": "user", "content": parsed.prompt}], "answer": parsed.answer}
        observation = self._reset(self._probe, columns, f"{row.where}")
        if observation is not None and not isinstance(observation, str):
            raise UserError(
                f"{row.where}: reset() of env {self.name!r} returned a {type(observation).__name__}",
                "return the text to append to the prompt, or None (grpolab prompts are text)",
            )
        if not self._rows:  # the first row, reset again: a text drawn at random differs
            again = self._reset(self._probe, columns, f"{row.where}")
            if again != observation:
                raise self._differs(f"{row.where}: reset() returned {_shown(observation)}, then {_shown(again)}")
        if observation:
            task.prompt += observation  # as TRL appends it to the last user message
        self._rows[task.id] = (task.prompt, columns, observation)
        return task, split

    def _differs(self, what: str) -> UserError:
        return UserError(
            f"{what} for the same row of env {self.name!r}: the episodes of a group share one prompt, read once",
            "make reset's text depend on the row alone (draw anything random from a seed column under the row's "
            f"meta; {DOCS})",
        )

    def _reset(self, instance: Any, columns: dict[str, Any], where: str) -> Any:
        try:
            return synchronous(instance.reset)(**copy.deepcopy(columns))
        except Exception as exc:  # a user's reset: a bad row or a bug, named either way
            raise UserError(
                f"{where}: reset() of env {self.name!r} raised {failure_text(exc)}",
                f"fix reset, or the row: it is called with the row's columns ({', '.join(columns)}), as TRL calls it",
            ) from None

    # ---- episodes ----

    def _new(self) -> Any:
        try:
            return self.factory()
        except Exception as exc:  # whatever a user's constructor raises is a bad env, not a crash
            raise UserError(
                f"env {self.name!r} could not be built ({failure_text(exc)})",
                "fix its constructor: TRL builds it the same way, with no arguments",
            ) from None

    def _take(self) -> Any:
        with self._lock:
            if self._pool:
                return self._pool.pop()
        return self._new()

    def _release(self, instance: Any) -> None:
        with self._lock:
            if all(i is not instance for i in self._pool):
                self._pool.append(instance)

    def _bind(self, instance: Any) -> list[Tool]:
        """The episode's tools: each template (schema, argument check) with the instance's own method."""
        tools = []
        for attr, template in self._templates.items():
            tool = copy.copy(template)
            tool.fn = synchronous(getattr(instance, attr))
            tools.append(tool)
        return tools

    def start_episode(self, task: Task) -> EpisodeState:
        """An instance from the pool (or a new one), reset with the task's row; its methods are the episode's tools,
        it is the episode's state, and it goes back to the pool when the episode closes."""
        known = self._row(task)
        columns = known[1] if known is not None else self.reset_columns(task)
        instance = self._take()
        try:
            observation = self._reset(instance, columns, f"task {task.id!r}")
            if known is not None and observation != known[2]:
                raise self._differs(f"task {task.id!r}: reset() returned {_shown(observation)}, not {_shown(known[2])}")
        except BaseException:
            self._release(instance)
            raise
        return EpisodeState(self._bind(instance), state=instance, close=functools.partial(self._release, instance))

    def _row(self, task: Task) -> tuple[str, dict[str, Any], str | None] | None:
        known = self._rows.get(task.id)
        if known is None or (known[0] != task.prompt and task.prompt not in self._asked.get(task.id, ())):
            return None  # not a chat question of that id, unless it was asked in that row's episode
        return known

    def ask_in(self, task: Task, question: str) -> Task:
        """The question with what reset answered for the task's row appended, as TRL appends it (who is signed in);
        its episodes reset with that row's columns."""
        known = self._row(task)
        asked = super().ask_in(task, question + ((known[2] or "") if known else ""))
        if known is not None:
            self._asked.setdefault(task.id, set()).add(asked.prompt)
        return asked

    def reset_columns(self, task: Task) -> dict[str, Any]:
        """What reset is called with for a task: its row's columns as TRL passes a dataset's (the conversational
        prompt, the answer, each meta key); for a task of no row (a chat question), the prompt alone."""
        known = self._row(task)
        return copy.deepcopy(known[1]) if known is not None else {"prompt": [{"role": "user", "content": task.prompt}]}

    def toolbox_for(self, task: Task) -> ToolBox:
        """The tools offered with a task: their schemas at once, and a call runs on an episode of that task started
        at the first call (the later calls see its effects), released with the toolbox."""
        return EpisodeOnCall(self, task, list(self.toolbox.tools.values()))
