"""A verifiers 0.4.0 multi-turn environment whose environment speaks user turns (grpolab does not run it yet).

The env plays the user: after each answer it either ends the conversation or replies with feedback ("not quite,
check your arithmetic"), and the assistant answers again. In verifiers 0.4.0 that is an `Env` subclass with its own
`run(task, agents)` holding an `interaction` open turn by turn, bundled with the taskset through `__all__`.
verifiers' classes only, no grpolab import.
"""

from __future__ import annotations

import re

import verifiers.v1 as vf


class SumData(vf.TaskData):
    answer: int


class SumTask(vf.Task[SumData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        named = re.findall(r"-?\d+", trace.last_reply)
        return float(bool(named) and int(named[-1]) == self.data.answer)


class SumTaskset(vf.Taskset[SumTask, vf.TasksetConfig]):
    def load(self):
        for i in range(10):
            a, b = 17 + 3 * i, 25 + 7 * i
            yield SumTask(SumData(id=f"sum-{i}", prompt=f"What is {a} + {b}?", answer=a + b))


class FeedbackEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()
    rounds: int = 3
    """How many answers the assistant may give."""


class FeedbackEnv(vf.Env[FeedbackEnvConfig]):
    """The env is the user: it tells the assistant when an answer is wrong, and asks again."""

    async def run(self, task, agents):
        async with agents.agent.interaction(task) as chat:
            segment = await chat.turn()  # a prompted task speaks first
            for _ in range(self.config.rounds - 1):
                named = re.findall(r"-?\d+", segment.last_reply)
                if segment.terminated or (named and int(named[-1]) == task.data.answer):
                    break
                segment = await chat.turn("Not quite: check your arithmetic and answer again.")


__all__ = ["FeedbackEnv", "SumTaskset"]


def load_environment(**kwargs) -> vf.Env:
    return vf.load_environment(vf.resolve_env_config({"taskset": {"id": __name__, **kwargs}}))
