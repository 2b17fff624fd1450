"""A verifiers 0.4.0 environment with state: guess a secret number, the tool answering "higher" or "lower".

The multi-turn game is played through a tool: each guess is a tool call, and the toolset keeps the rollout's state
(`vf.State` subclass: the guesses made so far) that the rewards read back from the trace. The secret comes from the
task's row in `setup_task`, which verifiers runs once per rollout on the rollout's own tool server. verifiers'
classes only, no grpolab import.
"""

from __future__ import annotations

import re

import verifiers.v1 as vf

SYSTEM_PROMPT = "Find the secret number with the guess tool, then say which number it is."


class GuessState(vf.State):
    guesses: list[int] = []


class GuessData(vf.TaskData):
    answer: int
    low: int
    high: int


class GuessTools(vf.Toolset[vf.ToolsetConfig, GuessState]):
    TOOL_PREFIX = "game"  # advertised as `game_guess`

    async def setup_task(self, task: GuessData) -> None:
        self.secret = task.answer

    @vf.tool
    async def guess(self, number: int) -> str:
        """Guess the secret number; the answer says whether it is higher, lower or correct."""
        self.state.guesses.append(number)
        if number == self.secret:
            return "correct"
        return "higher" if self.secret > number else "lower"


class GuessTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class GuessTask(vf.Task[GuessData, GuessState, GuessTaskConfig]):
    @classmethod
    def toolsets(cls, config: GuessTaskConfig) -> list[vf.Toolset]:
        return [GuessTools(config.tools)]

    @vf.reward(weight=1.0)
    async def found(self, trace: vf.Trace) -> float:
        """1 when the secret was guessed with the tool and the reply names it."""
        named = [int(n) for n in re.findall(r"-?\d+", trace.last_reply)]
        guessed = self.data.answer in trace.state.guesses
        return float(guessed and bool(named) and named[-1] == self.data.answer)

    @vf.reward(weight=0.5)
    async def efficient(self, task: GuessData, trace: vf.Trace) -> float:
        """Fewer guesses score more: 1 for one guess, down to 0 at ten."""
        n = len(trace.state.guesses)
        return max(0.0, 1.0 - (n - 1) / 9) if n else 0.0


class GuessConfig(vf.TasksetConfig):
    num_tasks: int = 12
    task: GuessTaskConfig = GuessTaskConfig()


class GuessTaskset(vf.Taskset[GuessTask, GuessConfig]):
    def load(self):
        for i in range(self.config.num_tasks):
            secret = (i * 37) % 50 + 1
            data = GuessData(
                id=f"guess-{i:02d}",
                prompt="I am thinking of a whole number from 1 to 50. Which one?",
                system_prompt=SYSTEM_PROMPT,
                answer=secret,
                low=1,
                high=50,
            )
            yield GuessTask(data, self.config.task)


__all__ = ["GuessTaskset"]


def load_environment(**kwargs) -> vf.Env:
    return vf.load_environment(vf.resolve_env_config({"taskset": {"id": __name__, **kwargs}}))
