"""The benchmark's own verdict on a list of tool calls and a final answer: what grpolab's verdict must equal.

The calls become a tau2 message trajectory (an assistant turn per call, followed by the response tau2's own
environment gives it, then the final answer as the last assistant message), and the benchmark's evaluators score
it as its `evaluate_simulation` does for the reward basis of these tasks (database x communicated information;
`ALL` mode's product, without its LLM-judged assertions, which import an LLM client). `calculate` calls are left
out: tau2 answers them with `eval` on the model's text, and they change no database and say nothing to the user.
"""

from __future__ import annotations

from typing import Any

from grpolab.envs.tau2.package import tau2


def trajectory(env_factory: Any, calls: list[tuple[str, dict[str, Any]]], final_answer: str) -> list[Any]:
    """tau2 messages for `calls` (answered by a fresh tau2 environment from `env_factory`) and the final answer."""
    tau2()
    from tau2.data_model.message import AssistantMessage, ToolCall

    env = env_factory()
    messages: list[Any] = []
    for i, (name, arguments) in enumerate(calls):
        if name == "calculate" or not isinstance(arguments, dict):
            continue
        call = ToolCall(id=f"call_{i}", name=name, arguments=arguments)
        messages.append(AssistantMessage(role="assistant", tool_calls=[call]))
        messages.append(env.get_response(call))
    messages.append(AssistantMessage(role="assistant", content=final_answer or " "))
    return messages


def official_reward(env_factory: Any, task: Any, calls: list[tuple[str, dict[str, Any]]], final_answer: str) -> float:
    """The benchmark's reward (0 or 1) for a tau2 `task` solved by `calls` and `final_answer`."""
    tau2()
    from tau2.data_model.tasks import RewardType
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    messages = trajectory(env_factory, calls, final_answer)
    basis = set(task.evaluation_criteria.reward_basis)
    reward = 1.0
    if basis & {RewardType.DB, RewardType.ENV_ASSERTION}:
        reward *= EnvironmentEvaluator.calculate_reward(_constructor(env_factory), task, messages).reward
    if basis & {RewardType.COMMUNICATE}:
        reward *= CommunicateEvaluator.calculate_reward(task, messages).reward
    unsupported = basis - {RewardType.DB, RewardType.ENV_ASSERTION, RewardType.COMMUNICATE}
    if unsupported:
        raise ValueError(f"task {task.id}: reward basis {sorted(unsupported)} is not checked without an LLM")
    return reward


def _constructor(env_factory: Any) -> Any:
    """tau2's environment constructor signature (it passes solo_mode) over a fresh-database factory."""

    def construct(solo_mode: bool = False) -> Any:
        return env_factory()

    return construct
