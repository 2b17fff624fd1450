"""`tau2_retail`: τ²-bench's retail domain (orders, returns, exchanges) with its own tools, database and check.

Every episode gets a fresh copy of the benchmark's database and its official tools bound to it (a stateful
environment, docs/stateful.md). Completion is the benchmark's own verdict for these tasks (reward basis: database
and communicated information): the database after the agent's calls must hash equal to the database after the
task's reference actions, and the final answer must state every piece of information the task requires.
`actions` (A) is partial credit: the fraction of the reference actions the episode made, under the benchmark's
matching rule. The customer is not simulated (grpolab's solo setting: `grpolab.envs.tau2.tasks`).
"""

from __future__ import annotations

import functools
from typing import Any

from grpolab.envs.base import Environment, EpisodeState, Evidence, Split, Task, Verdict
from grpolab.envs.tau2.package import tau2
from grpolab.envs.tau2.tasks import SPLITS, grpolab_task
from grpolab.envs.tau2.tools import Tau2Tool, tool_specs
from grpolab.protocol import render_system_prompt
from grpolab.tools import ToolBox

INSTRUCTIONS_HEAD = "You are a customer service agent of an online retail store. Follow this policy exactly.\n\n"


class Tau2RetailEnv(Environment):
    name = "tau2_retail"
    description = (
        "τ²-bench retail: orders, returns and exchanges on the benchmark's database; checked by its final state"
    )
    stateful = True

    def __init__(self) -> None:
        tau2()
        from tau2.domains.retail.data_model import RetailDB
        from tau2.domains.retail.environment import get_environment, get_tasks, get_tasks_split
        from tau2.domains.retail.utils import RETAIL_DB_PATH

        # Each episode validates its database from this plain dump: a third of a deep copy's time, and no
        # container is shared with the dump or with another episode (every dict and list is built anew)
        self._pristine = RetailDB.load(RETAIL_DB_PATH).model_dump()
        self._db_type, self._get_environment = RetailDB, get_environment
        split_ids = get_tasks_split()
        by_id = {t.id: grpolab_task(t) for t in get_tasks(None)}
        self._tasks: dict[Split, list[Task]] = {
            ours: [by_id[i] for i in split_ids[theirs]] for ours, theirs in SPLITS.items()
        }
        first = self.fresh_environment()
        self.instructions = INSTRUCTIONS_HEAD + first.get_policy().strip()
        self._specs = tool_specs(first)  # what the prompt shows; each episode binds them to its own database
        self.rubric.add("actions", action_match, letter="A", weight=1.0, description=action_match.__doc__ or "")

    def tasks(self, split: Split) -> list[Task]:
        return self._tasks[split]

    def system_prompt(self, task: Task | None = None) -> str:
        schemas = [spec.schema for spec in self._specs]
        return render_system_prompt(
            schemas, self.instructions, self.example, self.thought_required, False, self.thought_tag
        )

    def fresh_environment(self) -> Any:
        """A tau2 retail environment on a fresh copy of the benchmark's database."""
        return self._get_environment(db=self._db_type.model_validate(self._pristine))

    def start_episode(self, task: Task) -> EpisodeState:
        env = self.fresh_environment()
        return EpisodeState(ToolBox([Tau2Tool(env, spec) for spec in self._specs]), state=env)

    @functools.lru_cache(maxsize=256)  # noqa: B019 (one environment object per process)
    def gold_hash(self, task_id: str) -> str:
        """The database's hash after the task's reference actions on a fresh copy (as the benchmark computes it)."""
        task = self.task(task_id)
        env = self.fresh_environment()
        for action in task.truth.evaluation_criteria.actions or []:
            try:
                env.make_tool_call(tool_name=action.name, requestor=action.requestor, **action.arguments)
            except Exception:  # as the benchmark's evaluator: a failing reference action changes nothing
                pass
        return env.get_db_hash()

    def verify(self, task: Task, final_answer: str, evidence: Evidence) -> Verdict:
        if evidence.state is None:
            return Verdict(False, "no episode state to check (the episode's database is missing)")
        db_match = evidence.state.get_db_hash() == self.gold_hash(task.id)
        missing = missing_information(task, final_answer)
        if db_match and not missing:
            return Verdict(
                True,
                "the database matches the reference's"
                + (", information given" if task.meta["communicate_info"] else ""),
            )
        reasons = [] if db_match else ["the database differs from the reference's end state"]
        reasons += [f"the answer does not say {info!r}" for info in missing]
        return Verdict(False, "; ".join(reasons))


def missing_information(task: Task, final_answer: str) -> list[str]:
    """What the task requires the agent to tell the customer and the answer leaves out (the benchmark's check)."""
    from tau2.data_model.message import AssistantMessage
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator

    info = task.meta["communicate_info"]
    checks = CommunicateEvaluator.evaluate_communicate_info(
        [AssistantMessage(role="assistant", content=final_answer or " ")], info
    )
    return [c.info for c in checks if not c.met]


def action_match(replay: Any, task: Task, env: Any, ctx: Any) -> tuple[float, str]:
    """The fraction of the task's reference actions the episode made (name and compared arguments, as the
    benchmark matches them), counting only schema-valid calls: the benchmark compares just the keys a call has, so
    `cancel_pending_order({})` would match every cancellation. 1 when the task has none."""
    from tau2.data_model.message import ToolCall

    actions = task.truth.evaluation_criteria.actions or []
    if not actions:
        return 1.0, "no reference actions"
    valid = [(c.name, c.arguments) for c, problem in zip(replay.calls, replay.call_problems) if problem is None]
    made = [ToolCall(id="", name=n, arguments=a) for n, a in replay.evidence.calls if (n, a) in valid]
    matched = [a.name for a in actions if any(a.compare_with_tool_call(call) for call in made)]
    return len(matched) / len(actions), f"{len(matched)}/{len(actions)} reference actions made"
