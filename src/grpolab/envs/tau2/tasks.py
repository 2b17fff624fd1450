"""τ²-bench retail tasks as grpolab tasks: the scenario as the one user turn, the reference actions as the solution.

The benchmark talks to a simulated customer over many turns. Here there is no simulated user: the customer's
scenario (why they call, what they know, what they do not) is the single user message, and the customer has
confirmed every change in advance. That is grpolab's solo setting of the benchmark, not its leaderboard number.
"""

from __future__ import annotations

from typing import Any

from grpolab.envs.base import Task

SPLITS = {"train": "train", "heldout": "test"}
"""grpolab split -> the split in the package's split_tasks.json (74 train, 40 test tasks)."""


def scenario_prompt(instructions: Any) -> str:
    """The customer's scenario, as the benchmark writes it (in the second person, to the customer)."""
    lines = [
        "A customer contacts the store. Their situation, as the benchmark describes it to them:",
        instructions.reason_for_call.strip(),
    ]
    lines += [text.strip() for text in (instructions.known_info, instructions.unknown_info) if text]
    lines.append(
        "There is no further conversation: the customer has already confirmed (yes) every change their request "
        "needs. Do what the policy allows, then tell them what you did."
    )
    return "\n".join(lines)


def reference_answer(communicate: list[str]) -> str:
    """A closing sentence that states what the task requires the agent to tell the customer."""
    if not communicate:
        return "Your request is done."
    return "Your request is done: " + " and ".join(communicate) + "."


def grpolab_task(task: Any) -> Task:
    """One tau2 `Task` as a grpolab `Task` (truth: the tau2 task itself, what the verifier and parity read)."""
    criteria = task.evaluation_criteria
    actions = list(criteria.actions or []) if criteria else []
    communicate = list(criteria.communicate_info or []) if criteria else []
    scenario = task.user_scenario.instructions
    return Task(
        id=task.id,
        prompt=scenario_prompt(scenario),
        answer=reference_answer(communicate),
        truth=task,
        kind="retail",
        reference_calls=[(a.name, dict(a.arguments)) for a in actions],
        reference_thought="I check the customer's account and orders with the tools, then act under the policy.",
        reference_answer=reference_answer(communicate),
        meta={"communicate_info": communicate},
    )
