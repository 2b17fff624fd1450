"""A verifiers environment (Prime Intellect's `verifiers` 0.4) run by grpolab, unchanged: `from_verifiers`, `load`.

verifiers 0.4.0 has one API, `verifiers.v1` (`import verifiers.v1 as vf`); the classic `vf.ToolEnv`,
`vf.MultiTurnEnv`, `vf.Rubric` and `vf.Parser` of verifiers 0.1-0.3 are gone from it (0.3 kept them under
`verifiers.legacy`). An environment there is a `vf.Taskset` (its `load()` yields `vf.Task`s, each a `vf.TaskData`
row with the task's own fields), the `vf.Toolset`s its tasks use (`@vf.tool` methods: typed Python functions), and
the task's `@vf.reward(weight=...)` methods, which score a finished `vf.Trace`; `vf.load_environment(EnvConfig)`
puts the taskset under an `Env` (the single-agent one unless the taskset bundles its own). What grpolab takes:

- **Tasks.** Each task of the taskset is a grpolab `Task`: its prompt (the last user message of a Messages
  prompt), `answer` from the row's `answer` field, `meta` the row's own fields (they reach TRL-shaped rewards as
  columns). Held out: rows whose `split` field says so (heldout, test, eval, validation), else a stable hash of the
  row's `id` (or prompt) under `heldout_fraction`, as env data splits rows (`envs.data.env.heldout_by_hash`).
  verifiers has no reference solutions: a row's `reference_calls` (`[{"name", "arguments"}]`), `reference_answer` and
  `reference_thought` fields are used where present (SFT seeding, `grpolab check`'s honest baseline), else the
  reference is the answer alone.
- **Instructions.** The row's `system_prompt`, and a Messages prompt's system messages and earlier turns (few-shot,
  rendered under grpolab's protocol), are the task's instructions in grpolab's system prompt.
- **Tools.** Every `@vf.tool` of the task's toolsets (`Task.toolsets`) and the taskset's shared ones
  (`Taskset.toolsets`), named as verifiers' chat loop advertises them (`<server>_<tool>`, bare with `TOOL_PREFIX =
  None`), with the JSON schema MCP derives from the signature, called in this process with MCP's argument
  validation; an async tool runs on the environment's event loop. A return value that is not a dict is the response
  `{"result": value}`.
- **State.** A toolset with a `vf.State` of its own, a task whose state type has fields, or a per-task toolset with
  `setup_task` makes the environment stateful: each episode builds the task's toolsets afresh (`setup`, then
  `setup_task(row)`, as verifiers does for each rollout's tool server) over one new state object, which the
  toolsets' `self.state` and the rewards' `trace.state` both are (docs/stateful.md).
- **Rewards.** Each `@vf.reward` is a component of the environment's rubric (`self.rubric.add`), named as the
  method (`vf_NAME` where that is a built-in's name), with its verifiers weight as default weight. It is called as
  verifiers calls it (`verifiers.v1.utils.decorators.invoke`): `task` (the row) and `trace` by parameter name,
  awaited when async; a reward returning keyed scores scores their sum. The `vf.Trace` it reads is built from the
  transcript: the prompt's messages, one assistant message per turn (a `<thought>` as `reasoning_content`, the tool
  calls as `tool_calls`), the real tool responses as tool messages, and the episode's state.
- **The verifier** (grpolab's completion component, C) is one of those rewards: `verifier=NAME`, else the one of
  highest weight (the first in verifiers' own order on a tie). Completion is 1 when it reaches `pass_score` (1.0),
  else its value where that lies in [0, 1] (partial credit), else 0. Its own component's default weight is 0, so that
  it is not paid twice (named in the weights, it is logged); `verifiers_weights(env)` gives the weights under which
  grpolab's total is verifiers' own weighted sum.

Refused with a UserError naming what and why: an `Env` with its own `run()` (the environment speaks turns of its
own: a simulated user, several agents, best-of-n; grpolab's rollout inserts tool responses only), a harness other
than verifiers' chat loops (`bash`, `null`), a prompt-less task (the user opens the conversation), tasks that need a
container or a sandbox (`NEEDS_CONTAINER`, `setup`/`finalize` hooks, rewards that take a `runtime`), LLM judges
(`TaskConfig.judges`: grpolab has no model endpoint at scoring time), an unbounded taskset without `limit`. Not
applied: `@vf.stop` hooks and `@vf.metric`s (grpolab's rollout ends turns by its own rules), the `bash` harness's
shell tool (grpolab plays the agent as verifiers' `null` harness does: a chat loop with the task's tools).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import inspect
import json
import os
import re
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema

from grpolab.envs.base import SPLITS, Environment, EpisodeOnCall, EpisodeState, Evidence, Split, Task, Verdict
from grpolab.envs.data.env import heldout_by_hash
from grpolab.errors import UserError
from grpolab.plugins import is_path
from grpolab.protocol import render_system_prompt, render_tool_call, render_tool_response, response_json
from grpolab.reward_defaults import BUILTIN_NAMES
from grpolab.tools import DEFAULT_TIMEOUT_S, Tool, ToolBox

if TYPE_CHECKING:
    from grpolab.rewards.replay import Replay

VERIFIERS_VERSION = "0.4.0"
"""The verifiers release this adapter reads (`pip install 'grpolab[verifiers]'` installs it)."""
INSTALL_FIX = "pip install 'grpolab[verifiers]'"
SUPPORTED_HARNESSES = ("bash", "null")
"""verifiers' own chat loops: grpolab's rollout plays the agent as they do (a chat loop over the task's tools)."""
HELDOUT_SPLITS = {"heldout": "heldout", "test": "heldout", "eval": "heldout", "validation": "heldout"}
SPLIT_NAMES = {"train": "train", **HELDOUT_SPLITS}
DEFAULT_INSTRUCTIONS = "Use the tools to work out the answer, then give the final answer."
POLL_S = 0.05
"""How often a call waiting on the event loop wakes: a time limit raised into the waiting thread lands then."""


def verifiers_api() -> Any:
    """`verifiers.v1` (verifiers 0.4's API), or a UserError naming the install line when verifiers is missing or
    another release."""
    try:
        import verifiers
    except ModuleNotFoundError as exc:
        if exc.name == "verifiers":
            raise UserError(
                "verifiers environments need the package 'verifiers', which is not installed", INSTALL_FIX
            ) from None
        raise
    version = str(getattr(verifiers, "__version__", ""))
    if not version.startswith("0.4."):
        raise UserError(
            f"grpolab reads verifiers {VERIFIERS_VERSION}'s API (verifiers.v1); the installed verifiers is {version}",
            f"{INSTALL_FIX} (verifiers=={VERIFIERS_VERSION})",
        )
    import verifiers.v1 as vf

    return vf


class _Loop:
    """One event loop on a thread of its own, where the environment's async verifiers code runs (tools, rewards,
    toolset setup): what a toolset's `setup` opens (a client, a connection) stays bound to the loop its calls run
    on, as in verifiers' tool server. A forked child starts its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="grpolab-verifiers-loop", daemon=True)
                thread.start()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
            return self._loop

    def run(self, awaitable: Awaitable[Any]) -> Any:
        """Await `awaitable` on the loop and return its result (or raise its error). The waiting thread polls, so a
        time limit raised into it (`grpolab.timelimit`) lands; the call is then cancelled on the loop."""
        loop = self._running()
        if threading.current_thread() is self._thread:
            raise RuntimeError("verifiers code awaited from its own event loop")

        async def awaited() -> Any:
            return await awaitable

        future = asyncio.run_coroutine_threadsafe(awaited(), loop)
        try:
            while True:
                done, _ = concurrent.futures.wait([future], timeout=POLL_S)
                if done:
                    return future.result()
        finally:
            if not future.done():
                future.cancel()

    def resolve(self, value: Any) -> Any:
        """`value`, awaited on the loop when it is awaitable (an async hook's coroutine)."""
        return self.run(value) if inspect.isawaitable(value) else value


LOOP = _Loop()
"""The loop every verifiers environment of this process runs its async code on."""


@dataclass
class VerifiersTool(Tool):
    """A verifiers `@vf.tool` as a grpolab tool: its name as verifiers advertises it, the JSON schema MCP derives from
    its signature, and a caller that runs it (in this process: its toolset's state lives here)."""

    tool_name: str = ""
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.isolate = False
        self.schema = {
            "type": "function",
            "function": {"name": self.tool_name, "description": self.description, "parameters": self.input_schema},
        }
        self._validator = jsonschema.Draft202012Validator(self.input_schema)


def _untitled(node: Any) -> Any:
    """A JSON schema without pydantic's `title` strings (they repeat the names), property names kept."""
    if isinstance(node, list):
        return [_untitled(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
            out[key] = {name: _untitled(sub) for name, sub in value.items()}
        else:
            out[key] = _untitled(value)
    return out


def tool_response(value: Any) -> dict[str, Any]:
    """A tool's return value as grpolab's response: a dict (a pydantic model dumped), else `{"result": value}`."""
    import pydantic
    import pydantic_core

    if isinstance(value, pydantic.BaseModel):
        value = value.model_dump(mode="json")
    value = pydantic_core.to_jsonable_python(value, fallback=str)
    return value if isinstance(value, dict) else {"result": value}


def tool_text(response: dict[str, Any]) -> str:
    """A grpolab response as the text of verifiers' tool message (what MCP turns a return value into)."""
    import pydantic_core

    value: Any = response["result"] if set(response) == {"result"} else response
    return value if isinstance(value, str) else pydantic_core.to_json(value, indent=2).decode()


def toolset_tools(toolset: Any, state: Any, loop: _Loop, timeout_s: float) -> list[VerifiersTool]:
    """The `@vf.tool` methods of one toolset as grpolab tools, each call seeing `state` as the toolset's
    `self.state` (verifiers sets the rollout's state in a context variable around each call:
    `ServerBase._with_state`)."""
    from mcp.server.mcpserver.utilities.func_metadata import func_metadata
    from verifiers.v1.mcp.server import _call_state
    from verifiers.v1.utils.decorators import discover_decorated

    prefix = toolset.server_name
    tools = []
    for fn in discover_decorated(toolset, "tool"):
        raw = getattr(fn, "tool_name", None) or fn.__name__
        meta = func_metadata(fn, structured_output=False)
        tools.append(
            VerifiersTool(
                _caller(fn, meta, state, loop, _call_state),
                timeout_s,
                tool_name=f"{prefix}_{raw}" if prefix else raw,
                description=(fn.__doc__ or "").strip(),
                input_schema=_untitled(meta.arg_model.model_json_schema(by_alias=True)),
            )
        )
    return tools


def _caller(fn: Callable[..., Any], meta: Any, state: Any, loop: _Loop, var: Any) -> Callable[..., dict[str, Any]]:
    """A tool's call: the arguments validated as MCP validates them, `state` set around the call (on the loop for
    an async tool), the return value as a response."""

    def call(**arguments: Any) -> dict[str, Any]:
        kwargs = meta.validate_arguments(arguments)
        token = var.set(state)
        try:
            out = fn(**kwargs)
        finally:
            var.reset(token)
        if inspect.isawaitable(out):
            out = loop.run(_with_state(out, state, var))
        return tool_response(out)

    call.__name__ = call.__qualname__ = getattr(fn, "__name__", "tool")
    return call


async def _with_state(awaitable: Awaitable[Any], state: Any, var: Any) -> Any:
    token = var.set(state)
    try:
        return await awaitable
    finally:
        var.reset(token)


@dataclass
class _Message:
    """One assistant turn of a transcript, or a tool message after it."""

    role: str
    content: str = ""
    thoughts: list[str] = field(default_factory=list)
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    """(call id, tool name, arguments as JSON text)."""
    call_id: str = ""
    name: str = ""


def replay_messages(r: Replay) -> list[_Message]:
    """The transcript's turns as chat messages: one assistant message per turn (its thoughts, text and calls), and
    after each answered call the tool message with the response the tools really gave (`Replay.real_responses`).
    A `<tool_response>` answering no call is left out: the tools never said it. The last turn's text is the final
    answer (`ParsedTranscript.final_answer`) where there is one, else all its text."""
    messages: list[_Message] = []
    turn = _Message("assistant")
    texts: list[str] = []
    pending: tuple[str, str] | None = None
    answered = 0
    n_calls = 0
    for seg in r.parsed.segments:
        if seg.kind == "tool_response":
            if pending is not None:
                real = r.real_responses
                response = real[answered] if answered < len(real) else response_json(seg.text)
                answered += 1
                turn.content = "".join(texts).strip()
                messages.append(turn)
                content = tool_text(response) if isinstance(response, dict) else str(response)
                messages.append(_Message("tool", content, call_id=pending[0], name=pending[1]))
                turn, texts = _Message("assistant"), []
            pending = None
            continue
        if seg.kind == "text" and not seg.text.strip():
            texts.append(seg.text)
            continue
        pending = None
        if seg.kind == "thought":
            turn.thoughts.append(seg.text.strip())
        elif seg.kind == "text":
            texts.append(seg.text)
        elif seg.kind == "tool_call" and seg.call is not None:
            n_calls += 1
            call = seg.call
            arguments = json.dumps(call.arguments) if call.ok else seg.text.strip()
            call_id = f"call_{n_calls}"
            turn.calls.append((call_id, call.name or "", arguments))
            pending = (call_id, call.name or "")
    turn.content = (r.parsed.final_answer if not turn.calls else "") or "".join(texts).strip()
    if turn.content or turn.thoughts or turn.calls or not messages:
        messages.append(turn)
    return messages


def evidence_messages(final_answer: str, evidence: Evidence) -> list[_Message]:
    """An episode as chat messages from its executed calls, their real responses and the final answer (what a
    verifier is given)."""
    messages: list[_Message] = []
    for i, ((name, arguments), (_, response)) in enumerate(zip(evidence.calls, evidence.responses), start=1):
        messages.append(_Message("assistant", calls=[(f"call_{i}", name, json.dumps(arguments))]))
        messages.append(_Message("tool", tool_text(response), call_id=f"call_{i}", name=name))
    messages.append(_Message("assistant", final_answer))
    return messages


def _bundled(cls: type, base: type) -> list[type]:
    """Subclasses of `base` that the package of `cls` exports through `__all__` (how verifiers finds a taskset's own
    Env or Harness: `verifiers.v1.utils.loaders.environment_class`)."""
    names = [cls.__module__, cls.__module__.split(".")[0]]
    found: list[type] = []
    for name in dict.fromkeys(names):
        module = sys.modules.get(name)
        for attr in getattr(module, "__all__", None) or []:
            obj = getattr(module, attr, None)
            if isinstance(obj, type) and issubclass(obj, base) and obj is not base and obj not in found:
                found.append(obj)
    return found


def _own_run(vf: Any, cls: type) -> bool:
    """Whether an Env class plays its episodes its own way (not the single-agent env's one `agent.run(task)`)."""
    return not (issubclass(cls, vf.SingleAgentEnv) and cls.run is vf.SingleAgentEnv.run)


def _refuse_own_run(label: str, cls: type) -> UserError:
    return UserError(
        f"verifiers environment {label!r} plays its episodes with its own {cls.__name__}.run() (an Env subclass: "
        "the environment speaks turns of its own, such as a simulated user's messages, other agents or best-of-n "
        "attempts), which grpolab cannot run yet: grpolab's rollout has one speaker, the policy, and inserts only tool "
        "responses between its turns (grpolab.engine.rollout), so there is no place for a user turn",
        "play the environment's side through a tool instead (a vf.Toolset whose tool answers as the user would; "
        "examples/verifiers_env/vf_guess.py plays a multi-turn game that way), or train it with verifiers' own trainer",
    )


def from_verifiers(obj: Any, **settings: Any) -> VerifiersEnv:
    """A grpolab environment from a verifiers 0.4 environment: a `vf.Env` (what `vf.load_environment` returns), its
    `vf.EnvConfig`, a `vf.Taskset` or a Taskset class. `settings` are `VerifiersEnv`'s (verifier, pass_score,
    heldout_fraction, thought_required, limit, tool_timeout_s). What cannot run here is a UserError (module doc)."""
    vf = verifiers_api()
    if isinstance(obj, vf.EnvConfig):
        try:
            obj = vf.load_environment(obj)
        except Exception as exc:  # verifiers' own loading errors name the taskset and the fix
            raise UserError(f"verifiers could not load {obj.env_id!r} ({type(exc).__name__}: {exc})") from None
    if isinstance(obj, vf.Env):
        label = obj.config.env_id or type(obj.taskset).__name__
        if _own_run(vf, type(obj)):
            raise _refuse_own_run(label, type(obj))
        for seat, harness in obj.config.agent_harnesses().items():
            if harness.id not in SUPPORTED_HARNESSES:
                raise UserError(
                    f"verifiers environment {label!r} runs its {seat!r} agent with the harness {harness.id!r}, an "
                    "agent program of its own that grpolab cannot run: grpolab's rollout plays the agent as verifiers' "
                    f"chat loops do ({', '.join(SUPPORTED_HARNESSES)}: the model calls the task's tools, turn by turn)",
                    "pin the seat to verifiers' chat loop (--env.agent.harness.id null) or drop the bundled Harness",
                )
        taskset = obj.taskset
    elif isinstance(obj, type) and issubclass(obj, vf.Taskset):
        from verifiers.v1.utils.generic import concrete_type

        config_cls = concrete_type(obj, vf.TasksetConfig, origin=vf.Taskset) or vf.TasksetConfig
        taskset, label = obj(config_cls()), obj.__name__
    elif isinstance(obj, vf.Taskset):
        taskset, label = obj, obj.config.id or type(obj).__name__
    else:
        raise UserError(
            f"{type(obj).__name__} is not a verifiers environment",
            "pass a vf.Env (vf.load_environment(...)), its vf.EnvConfig, or a vf.Taskset",
        )
    if not isinstance(obj, vf.Env):  # a taskset alone: what verifiers would run it under is what its package bundles
        for env_cls in _bundled(type(taskset), vf.Env):
            if _own_run(vf, env_cls):
                raise _refuse_own_run(label, env_cls)
        for harness_cls in _bundled(type(taskset), vf.Harness):
            raise UserError(
                f"verifiers taskset {label!r} bundles its own agent program ({harness_cls.__name__}), which grpolab "
                "cannot run: grpolab's rollout plays the agent as verifiers' chat loops do",
                "load the taskset without its Harness",
            )
    return VerifiersEnv(taskset, label=label, **settings)


class VerifiersEnv(Environment):
    """A verifiers 0.4 taskset as a grpolab environment (module doc): its tasks, tools, state and rewards."""

    executes_tools = True

    def __init__(
        self,
        taskset: Any,
        *,
        label: str = "",
        verifier: str = "",
        pass_score: float = 1.0,
        heldout_fraction: float = 0.2,
        thought_required: bool = True,
        limit: int | None = None,
        tool_timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        vf = self._vf = verifiers_api()
        from verifiers.v1.state import state_cls
        from verifiers.v1.task import Task as VfTask

        self.label = label or type(taskset).__name__
        self.name = f"verifiers:{self.label}"
        self.description = f"verifiers {VERIFIERS_VERSION} environment {self.label} ({type(taskset).__name__})"
        if not 0 < heldout_fraction < 1:
            raise UserError(f"heldout_fraction must lie between 0 and 1, not {heldout_fraction}", "use e.g. 0.2")
        self.pass_score = float(pass_score)
        self.heldout_fraction = heldout_fraction
        self.thought_required = thought_required
        self.tool_timeout_s = tool_timeout_s
        self.example = ""
        self._loop = LOOP
        self._taskset = taskset
        vf_tasks = self._read(taskset, limit)
        task_cls = type(vf_tasks[0])
        self._check(task_cls, vf_tasks[0], VfTask)
        # one state type for the rollout: the task's (what rewards read as trace.state), else a toolset's own
        self._shared = list(type(taskset).toolsets(taskset.config))
        template = list(task_cls.toolsets(vf_tasks[0].config))
        candidates = [state_cls(task_cls), *(state_cls(type(ts)) for ts in (*template, *self._shared))]
        self._state_cls = next((c for c in candidates if c is not vf.State), vf.State)
        per_task_setup = any(type(ts).setup_task is not _base_setup_task() for ts in template)
        self.stateful = self._state_cls is not vf.State or per_task_setup
        for ts in self._shared:  # taskset-scoped servers: set up once, never given a task (as verifiers serves them)
            self._setup(ts)
        if not self.stateful:  # pure tools: one toolset of each kind for every episode
            for ts in template:
                self._setup(ts)
        self._template = template
        # the tools of every episode (a stateful environment's: their schemas; its episodes build their own)
        self.toolbox = ToolBox(self._tools([*template, *self._shared], self._state_cls()))
        self._build_tasks(vf_tasks)
        self._add_rewards(vf_tasks[0], verifier)

    # --- reading the taskset ------------------------------------------------------------------------------------

    def _read(self, taskset: Any, limit: int | None) -> list[Any]:
        if limit is not None:
            taskset = taskset.take(limit)
        elif not taskset.bounded:
            raise UserError(
                f"verifiers taskset {self.label!r} is infinite (INFINITE = True)",
                "give limit=N: how many tasks to read",
            )
        try:
            tasks = list(taskset)
        except Exception as exc:  # the taskset's own load()
            raise UserError(f"verifiers taskset {self.label!r} failed to load ({type(exc).__name__}: {exc})") from None
        if not tasks:
            raise UserError(f"verifiers taskset {self.label!r} has no tasks", "check its load() and config")
        kinds = sorted({type(t).__name__ for t in tasks})
        if len(kinds) > 1:
            raise UserError(f"verifiers taskset {self.label!r} yields tasks of several types {kinds}")
        return tasks

    def _check(self, task_cls: type, task: Any, base: type) -> None:
        """What a task needs that grpolab does not have: a UserError naming it."""
        name = task_cls.__name__
        if getattr(task_cls, "NEEDS_CONTAINER", False):
            raise UserError(
                f"verifiers task {name} needs a container (NEEDS_CONTAINER), which grpolab does not provide",
                "use a task whose tools are Python toolsets",
            )
        hooks = [h for h in ("setup", "finalize", "stage_verifier") if getattr(task_cls, h) is not getattr(base, h)]
        if hooks:
            raise UserError(
                f"verifiers task {name} defines {', '.join(hooks)}(trace, runtime), which prepares or reads a sandbox "
                "that grpolab does not provide",
                "move per-task preparation into a toolset's setup_task(task)",
            )
        if task.config.judges:
            raise UserError(
                f"verifiers task {name} is scored by LLM judges ({len(task.config.judges)} in TaskConfig.judges); "
                "grpolab has no model endpoint at scoring time",
                "score with @vf.reward methods, or drop the judges from the task's config",
            )
        rewards = task.hooks("reward")
        if not rewards:
            raise UserError(f"verifiers task {name} has no @vf.reward method", "give it one: it is the verifier")
        for fn in rewards:
            runtime = inspect.signature(fn).parameters.get("runtime")
            if runtime is not None and runtime.default is inspect.Parameter.empty:
                raise UserError(
                    f"verifiers reward {name}.{fn.__name__} takes a runtime (a sandbox), which grpolab does not "
                    "provide",
                    "score from the trace (trace.last_reply, trace.messages, trace.state)",
                )

    def _build_tasks(self, vf_tasks: list[Any]) -> None:
        base_fields = set(self._vf.TaskData.model_fields)
        self._vf_tasks: dict[str, Any] = {}
        self._instructions: dict[str, str] = {}
        self._tasks: dict[Split, list[Task]] = {split: [] for split in SPLITS}
        instructions: list[str] = []
        for vf_task in vf_tasks:
            data = vf_task.data
            task_id = self._task_id(data)
            prompt, own = self._prompt(data, task_id)
            fields = data.model_dump(mode="json", exclude=base_fields)
            answer = fields.get("answer")
            shown = "" if answer is None else answer if isinstance(answer, str) else json.dumps(answer)
            calls = [(c["name"], c.get("arguments", {})) for c in fields.get("reference_calls") or []]
            task = Task(
                id=task_id,
                prompt=prompt,
                answer=shown,
                truth=answer,
                kind=str(fields.get("kind") or self.label),
                needs_tools=bool(self.toolbox.tools),
                reference_calls=calls,
                reference_thought=str(fields.get("reference_thought") or self._thought(calls)),
                reference_answer=str(fields.get("reference_answer") or shown),
                meta=fields,
            )
            split = SPLIT_NAMES.get(str(fields.get("split", "")).lower())
            if split is None:
                key = data.id or data.prompt_text
                split = "heldout" if heldout_by_hash(key, self.heldout_fraction) else "train"
            self._tasks[split].append(task)  # type: ignore[index]
            self._vf_tasks[task_id] = vf_task
            self._instructions[task_id] = own
            instructions.append(own)
        for split in SPLITS:
            if not self._tasks[split]:
                raise UserError(
                    f"no {split} tasks in verifiers taskset {self.label!r} ({len(vf_tasks)} tasks; without a `split` "
                    f"field a task is held out by a hash of its id, about {self.heldout_fraction:.0%} of them)",
                    "give the rows a `split` field, or change heldout_fraction",
                )
        # the instructions most tasks share are the environment's (`grpolab envs`); a task's own still apply to it
        self.instructions = max(dict.fromkeys(instructions), key=instructions.count)

    def _thought(self, calls: list[tuple[str, dict[str, Any]]]) -> str:
        """A reference thought where thoughts are asked for (as env data writes one): the tools it calls."""
        if not self.thought_required:
            return ""
        if calls:
            return f"I will call {', '.join(dict.fromkeys(n for n, _ in calls))} to work out the answer."
        return "I can answer this question directly."

    def _task_id(self, data: Any) -> str:
        task_id = str(data.id or data.name or f"{self.label}-{data.idx}")
        return task_id if task_id not in self._vf_tasks else f"{task_id}-{data.idx}"

    def _prompt(self, data: Any, task_id: str) -> tuple[str, str]:
        """The task's user prompt, and its instructions: the system prompt, then any few-shot turns before the
        last user message, under grpolab's protocol."""
        from verifiers.v1.types import content_text

        vf = self._vf
        system = [data.system_prompt] if data.system_prompt else []
        prompt = data.prompt
        if prompt is None:
            raise UserError(
                f"verifiers task {task_id!r} has no prompt (the user opens the conversation), which needs a "
                "simulated user that grpolab does not have",
                "give each task a prompt",
            )
        if isinstance(prompt, str):
            return prompt, "\n\n".join(system) or DEFAULT_INSTRUCTIONS
        last = max((i for i, m in enumerate(prompt) if isinstance(m, vf.UserMessage)), default=None)
        if last is None:
            raise UserError(f"verifiers task {task_id!r} has a prompt without a user message", "end it with one")
        shots: list[str] = []
        for message in prompt[:last]:
            text = content_text(message.content) if hasattr(message, "content") else ""
            if isinstance(message, vf.SystemMessage):
                system.append(text)
            elif isinstance(message, vf.UserMessage):
                shots.append(f"User: {text}")
            elif isinstance(message, vf.AssistantMessage):
                calls = "".join(
                    render_tool_call(c.name, _arguments(c.arguments)) + "\n" for c in message.tool_calls or []
                )
                shots.append(f"Assistant: {calls}{text or ''}".rstrip())
            elif isinstance(message, vf.ToolMessage):
                shots.append(render_tool_response({"result": text}).strip())
        instructions = "\n\n".join(system) or DEFAULT_INSTRUCTIONS
        if shots:
            instructions += "\n\nExample:\n" + "\n".join(shots)
        return content_text(prompt[last].content), instructions

    # --- tools and episodes -------------------------------------------------------------------------------------

    def _tools(self, toolsets: Iterable[Any], state: Any) -> list[Tool]:
        tools: list[Tool] = []
        seen: dict[str, str] = {}
        for ts in toolsets:
            for tool in toolset_tools(ts, state, self._loop, self.tool_timeout_s):
                if tool.name in seen:
                    raise UserError(
                        f"verifiers toolsets {seen[tool.name]} and {type(ts).__name__} both advertise a tool "
                        f"{tool.name!r}",
                        "give one a distinct TOOL_PREFIX",
                    )
                seen[tool.name] = type(ts).__name__
                tools.append(tool)
        return tools

    def toolbox_for(self, task: Task) -> ToolBox:
        """The task's tools: the shared ones, or in a stateful environment their schemas (`self.toolbox`, what the
        prompt shows) with calls on an episode started at the first one (`EpisodeOnCall`)."""
        if not self.stateful:
            return self.toolbox
        return EpisodeOnCall(self, task, list(self.toolbox.tools.values()))

    def start_episode(self, task: Task) -> EpisodeState:
        """A stateful environment's episode: the task's toolsets built afresh and set up for this row (`setup`, then
        `setup_task(row)`), over one new state that the tools and the rewards share."""
        if not self.stateful:
            return super().start_episode(task)
        vf_task = self._vf_task(task)
        state = self._state_cls()
        toolsets = list(type(vf_task).toolsets(vf_task.config))
        opened: list[Any] = []
        try:
            for ts in toolsets:
                opened.append(ts)
                self._loop.resolve(ts.setup())
                self._loop.resolve(ts.setup_task(vf_task.data))
        except BaseException:
            self._close(opened)
            raise
        tools = self._tools([*toolsets, *self._shared], state)
        return EpisodeState(tools, state=state, close=lambda: self._close(opened))

    def _setup(self, toolset: Any) -> None:
        """A toolset's task-agnostic `setup()` (verifiers runs it when its server starts)."""
        try:
            self._loop.resolve(toolset.setup())
        except Exception as exc:  # the user's toolset failing is a bad environment, not a crash
            raise UserError(
                f"verifiers toolset {type(toolset).__name__}.setup() failed ({type(exc).__name__}: {exc})"
            ) from None

    def _close(self, toolsets: list[Any]) -> None:
        """What a toolset's setup entered into its exit stack (verifiers closes it when its server stops)."""
        for ts in toolsets:
            stack = getattr(ts, "_exit_stack", None)
            if stack is not None:
                self._loop.run(stack.aclose())

    # --- prompts ------------------------------------------------------------------------------------------------

    def _instructions_for(self, task: Task | None) -> str:
        return self._instructions.get(task.id, self.instructions) if task is not None else self.instructions

    def system_prompt(self, task: Task | None = None) -> str:
        return render_system_prompt(
            self.toolbox.schemas,
            self._instructions_for(task),
            self.example,
            self.thought_required,
            False,
            self.thought_tag,
        )

    def chat_instructions(self, task: Task) -> str:
        saved, self.instructions = self.instructions, self._instructions_for(task)
        try:
            return super().chat_instructions(task)
        finally:
            self.instructions = saved

    def tasks(self, split: Split) -> list[Task]:
        return list(self._tasks[split])

    # --- scoring ------------------------------------------------------------------------------------------------

    def _vf_task(self, task: Task) -> Any:
        vf_task = self._vf_tasks.get(task.id)
        if vf_task is None:
            raise UserError(f"task {task.id!r} is not a task of verifiers environment {self.label!r}")
        return vf_task

    def _add_rewards(self, task: Any, verifier: str) -> None:
        rewards = task.hooks("reward")  # verifiers' order: priority, then name
        self.vf_weights: dict[str, float] = {fn.__name__: float(getattr(fn, "_vf_weight", 1.0)) for fn in rewards}
        if verifier and verifier not in self.vf_weights:
            raise UserError(
                f"verifiers environment {self.label!r} has no reward {verifier!r}",
                f"name one of: {', '.join(self.vf_weights)}",
            )
        top = max(self.vf_weights.values())
        self.verifier = verifier or next(n for n, w in self.vf_weights.items() if w == top)
        self.components: dict[str, str] = {}
        """Each verifiers reward's component name in grpolab's rubric."""
        for fn in rewards:
            name = fn.__name__
            component = re.sub(r"\W", "_", name)
            if component in BUILTIN_NAMES or not component.isidentifier():  # a built-in's name: vf_NAME
                component = f"vf_{component}"
            self.components[name] = component
            weight = self.vf_weights[name]
            doc = " ".join((fn.__doc__ or "").split())
            role = f"the verifier (completion); weight 0 here, {weight:g} in verifiers" if name == self.verifier else ""
            self.rubric.add(
                component,
                _component(self, name),
                weight=0.0 if name == self.verifier else weight,
                description=f"verifiers reward {name}" + (f": {doc}" if doc else "") + (f" ({role})" if role else ""),
                shape="grpolab",
            )

    def trace(self, task: Task, messages: list[_Message], state: Any = None) -> Any:
        """A `vf.Trace` of `task` holding `messages` after the prompt (the row's system prompt and prompt messages)
        and `state` (a new state of the task's type where None): what a verifiers reward reads."""
        vf = self._vf
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, TraceTask, VersionInfo

        vf_task = self._vf_task(task)
        data = vf_task.data
        prompt: list[Any] = []
        if data.system_prompt:
            prompt.append(vf.SystemMessage(content=data.system_prompt))
        prompt += [vf.UserMessage(content=data.prompt)] if isinstance(data.prompt, str) else list(data.prompt)
        nodes: list[Any] = []

        def add(message: Any, sampled: bool = False) -> None:
            nodes.append(MessageNode(parent=len(nodes) - 1 if nodes else None, message=message, sampled=sampled))

        for message in prompt:
            add(message)
        for m in messages:
            if m.role == "tool":
                add(vf.ToolMessage(tool_call_id=m.call_id, content=m.content, name=m.name or None))
                continue
            calls = [vf.ToolCall(id=i, name=n, arguments=a) for i, n, a in m.calls] or None
            reasoning = "\n".join(m.thoughts) or None
            add(vf.AssistantMessage(content=m.content, reasoning_content=reasoning, tool_calls=calls), sampled=True)
        tools = [
            vf.Tool(
                name=t["function"]["name"],
                description=t["function"]["description"],
                parameters=t["function"]["parameters"],
            )
            for t in self.toolbox.schemas
        ]
        return vf.Trace(
            verifiers=VersionInfo(version=VERIFIERS_VERSION),
            task=TraceTask(type=type(vf_task).__name__, data=data, key=vf_task.key, hash=vf_task.hash),
            agent=AgentInfo(config=vf.AgentConfig()),
            tools=tools,
            nodes=nodes,
            state=state if state is not None else self._state_cls(),
            is_completed=True,
            ok=True,
            stop_condition="agent_completed",
        )

    def reward(self, name: str, task: Task, trace: Any) -> tuple[float, str]:
        """One verifiers reward on a trace, called as verifiers calls it (`task` and `trace` by parameter name,
        awaited when async): (score, reason). Keyed scores score their sum."""
        from verifiers.v1.utils.decorators import invoke

        vf_task = self._vf_task(task)
        fns = {fn.__name__: fn for fn in vf_task.hooks("reward")}
        out = self._loop.resolve(invoke(fns[name], {"task": vf_task.data, "trace": trace}))
        if isinstance(out, Mapping):
            values = {str(k): float(v) for k, v in out.items()}
            return sum(values.values()), ", ".join(f"{k} = {v:g}" for k, v in values.items()) or f"{name}: no scores"
        if isinstance(out, bool) or not isinstance(out, (int, float)):
            raise TypeError(f"verifiers reward {name} returned a {type(out).__name__}, not a number")
        return float(out), f"{name} = {float(out):g}"

    def verify(self, task: Task, final_answer: str, evidence: Evidence) -> Verdict:
        """The verifier reward on the episode (its calls, their real responses, the final answer, its state):
        passed when it reaches `pass_score`; else its value as partial credit where that lies in [0, 1]."""
        trace = self.trace(task, evidence_messages(final_answer, evidence), evidence.state)
        value, reason = self.reward(self.verifier, task, trace)
        passed = value >= self.pass_score
        return Verdict(passed, reason, 1.0 if passed else value if 0 <= value <= 1 else 0.0)


def _base_setup_task() -> Any:
    from verifiers.v1.mcp.server import ServerBase

    return ServerBase.setup_task


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {"input": text}
    return value if isinstance(value, dict) else {"input": value}


def _component(env: VerifiersEnv, name: str) -> Callable[..., tuple[float, str]]:
    """The grpolab-shaped component of one verifiers reward: the transcript as a trace (its turns, the real tool
    responses, the episode's state), scored by the reward."""

    def scored(replay: Replay, task: Task, environment: Environment, ctx: Any) -> tuple[float, str]:
        trace = replay.__dict__.get("_vf_trace")
        if trace is None:  # one trace per transcript, read by every reward
            state = replay.evidence.state if replay.evidence is not None else None
            trace = replay.__dict__["_vf_trace"] = env.trace(task, replay_messages(replay), state)
        return env.reward(name, task, trace)

    scored.__name__ = f"verifiers_{name}"
    return scored


def verifiers_weights(env: VerifiersEnv) -> dict[str, float]:
    """Reward weights under which grpolab's total is verifiers' own weighted sum: each reward's component at its
    verifiers weight, grpolab's built-in format, schema, completion and length at 0 (`--weights name=value,...`)."""
    weights = dict.fromkeys(("format", "schema", "completion", "length"), 0.0)
    return {**weights, **{env.components[n]: w for n, w in env.vf_weights.items()}}


def load(
    spec: str, args: Mapping[str, Any] | None = None, base_dir: str | Path | None = None, **settings: Any
) -> VerifiersEnv:
    """The verifiers environment `spec` names, adapted (`from_verifiers`). `spec` is a module or a .py path (relative
    to `base_dir`, default the working directory), optionally `:attribute`. The attribute (default the module's
    `load_environment`) is called with `args` when it is a function, built with `args` as its config when it is a
    Taskset class; a module without `load_environment` is loaded as a verifiers taskset package (its `__all__`
    exports the Taskset), as `vf.load_environment` would, with `args` as the taskset's config."""
    vf = verifiers_api()
    args = dict(args or {})
    target, attr = _split_spec(spec)
    module = _import(target, Path(base_dir) if base_dir is not None else Path.cwd())
    obj = getattr(module, attr or "load_environment", None)
    if obj is None and attr:
        raise UserError(f"{target} has no attribute {attr!r}", f"name one it defines: {target}:NAME")
    try:
        if obj is None:
            config = vf.resolve_env_config({"taskset": {"id": module.__name__, **args}})
            result = vf.load_environment(config)
        elif isinstance(obj, type) and issubclass(obj, vf.Taskset):
            from verifiers.v1.utils.generic import concrete_type

            config_cls = concrete_type(obj, vf.TasksetConfig, origin=vf.Taskset) or vf.TasksetConfig
            result = obj(config_cls.model_validate(args))
        elif callable(obj) and not isinstance(obj, type):
            result = obj(**args)
        else:
            result = obj
    except UserError:
        raise
    except Exception as exc:  # whatever the user's loader raises is a bad spec, not a crash
        raise UserError(
            f"verifiers environment {spec!r} could not be built ({type(exc).__name__}: {exc})",
            "check its load_environment(**kwargs) and the arguments given",
        ) from None
    return from_verifiers(result, **settings)


def from_config(settings: Any, spec: str = "") -> VerifiersEnv:
    """`env = "verifiers"`: the environment a config's verifiers section names (`env`: a module or .py path,
    optionally `:attribute`; `args` for its load_environment) with its settings (verifier, pass_score,
    heldout_fraction, thought_required, limit), read by attribute name. `spec` (`env = "my_env.py:load_environment"`)
    names the environment in the section's place."""
    spec = spec or str(getattr(settings, "env", "") or "")
    if not spec:
        raise UserError(
            "env 'verifiers' names no verifiers environment",
            'set it in the config: [verifiers] env = "path/to/my_env.py" (or a module, optionally :attribute)',
        )
    names = ("verifier", "pass_score", "heldout_fraction", "thought_required", "limit", "tool_timeout_s")
    given = {n: getattr(settings, n) for n in names if getattr(settings, n, None) is not None}
    return load(spec, getattr(settings, "args", None) or {}, **given)


def _split_spec(spec: str) -> tuple[str, str]:
    """`path/env.py:attr`, `pkg.module:attr`, `path/env.py` or `pkg.module` -> (module or path, attribute or '')."""
    head, sep, tail = spec.rpartition(":")
    if sep and tail.isidentifier() and head and not head.endswith(("/", "\\")):
        return head, tail
    return spec, ""


def _import(target: str, base_dir: Path) -> Any:
    """A module by name, or a .py file imported by its stem with its folder on `sys.path` (so that verifiers'
    loader, which imports a taskset by id, finds it too)."""
    if not is_path(target):
        try:
            return importlib.import_module(target)
        except Exception as exc:
            raise UserError(
                f"cannot import verifiers environment {target!r} ({type(exc).__name__}: {exc})",
                "install it, put its folder on PYTHONPATH, or give the path of its .py file",
            ) from None
    path = (base_dir / target).resolve()
    if not path.is_file():
        raise UserError(f"no verifiers environment file {path}", "give the path of a .py file")
    stem = path.stem
    loaded = sys.modules.get(stem)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        if where is None or Path(where).resolve() != path:
            raise UserError(
                f"{path} would be imported as {stem!r}, which is already the module {where or stem}",
                "rename the file",
            )
        return loaded
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        return importlib.import_module(stem)
    except Exception as exc:
        raise UserError(f"cannot import {path} ({type(exc).__name__}: {exc})", "fix the file") from None
