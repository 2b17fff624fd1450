"""A verifiers 0.4.0 environment: unit conversion with a tool, scored by two weighted rewards.

Written the way verifiers' own scaffold (`vf-init NAME --add-tool`) lays an environment out, with verifiers'
classes only (no grpolab import): rows from a `datasets.Dataset`, a `Toolset` whose `@vf.tool` methods are typed
functions, a `Task` whose `@vf.reward(weight=...)` methods score a finished trace, and a `Taskset` exported through
`__all__`, which is how `vf.load_environment` finds it by id. `load_environment(**kwargs)` builds the `vf.Env` that
`vf-eval vf_units` would run (kwargs are the taskset's config fields: `num_tasks`).

    grpolab: from grpolab.envs.verifiers_env import load; env = load("examples/verifiers_env/vf_units.py")
"""

from __future__ import annotations

import re
from typing import Literal

import datasets
import verifiers.v1 as vf

Unit = Literal["km", "mi", "kg", "lb", "m", "ft"]
TO_BASE: dict[str, float] = {"km": 1000.0, "mi": 1609.344, "m": 1.0, "ft": 0.3048, "kg": 1.0, "lb": 0.45359237}
"""Each unit in metres (length) or kilograms (mass)."""
KIND = {"km": "length", "mi": "length", "m": "length", "ft": "length", "kg": "mass", "lb": "mass"}
WORDS = {
    "km": ("km", "kilometre", "kilometer"),
    "mi": ("mi", "mile"),
    "m": ("m", "metre", "meter"),
    "ft": ("ft", "feet", "foot"),
    "kg": ("kg", "kilogram"),
    "lb": ("lb", "pound"),
}
NAMES = {"km": "kilometres", "mi": "miles", "m": "metres", "ft": "feet", "kg": "kilograms", "lb": "pounds"}
PAIRS = [("mi", "km"), ("km", "mi"), ("lb", "kg"), ("kg", "lb"), ("ft", "m"), ("m", "ft")]
SYSTEM_PROMPT = "You convert units. Use the convert tool, then state the result with its unit in one sentence."
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


def rows(n: int) -> list[dict]:
    """n questions with their answers, the same every time."""
    out = []
    for i in range(n):
        src, dst = PAIRS[i % len(PAIRS)]
        value = round(3.5 + 7.25 * i, 2)
        answer = round(value * TO_BASE[src] / TO_BASE[dst], 2)
        out.append(
            {
                "id": f"convert-{i:02d}",
                "question": f"Convert {value} {NAMES[src]} to {NAMES[dst]}.",
                "answer": answer,
                "info": {"from_unit": src, "to_unit": dst},
                "reference_calls": [
                    {"name": "convert", "arguments": {"value": value, "from_unit": src, "to_unit": dst}}
                ],
                "reference_answer": f"{value} {NAMES[src]} is {answer} {NAMES[dst]}.",
            }
        )
    return out


class UnitTools(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = None  # the tool is advertised bare: `convert`, not `unit_tools_convert`

    @vf.tool
    def convert(self, value: float, from_unit: Unit, to_unit: Unit) -> dict:
        """Convert a quantity between units of length (km, mi, m, ft) or of mass (kg, lb)."""
        if KIND[from_unit] != KIND[to_unit]:
            raise ValueError(f"cannot convert {KIND[from_unit]} to {KIND[to_unit]}")
        return {"value": round(value * TO_BASE[from_unit] / TO_BASE[to_unit], 4), "unit": to_unit}


class ConvertData(vf.TaskData):
    answer: float
    info: dict
    reference_calls: list[dict] = []
    """A worked solution (verifiers ignores it; grpolab's SFT warm start trains on it): the tool calls that solve it."""
    reference_answer: str = ""
    """And the sentence that answers after them."""


class ConvertTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()
    tolerance: float = 0.01
    """Relative error the answer may have."""


def numbers(text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in _NUMBER.findall(text)]


class ConvertTask(vf.Task[ConvertData, vf.State, ConvertTaskConfig]):
    @classmethod
    def toolsets(cls, config: ConvertTaskConfig) -> list[vf.Toolset]:
        return [UnitTools(config.tools)]

    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        """1 when the last number of the reply is the converted value (within the tolerance)."""
        found = numbers(trace.last_reply)
        if not found:
            return 0.0
        truth = self.data.answer
        return float(abs(found[-1] - truth) <= self.config.tolerance * max(abs(truth), 1e-9))

    @vf.reward(weight=0.2)
    async def names_unit(self, trace: vf.Trace) -> float:
        """1 when the reply names the unit asked for."""
        words = re.findall(r"[a-z]+", trace.last_reply.lower())
        wanted = WORDS[self.data.info["to_unit"]]
        return float(any(w.startswith(wanted) or w in wanted for w in words))


class ConvertConfig(vf.TasksetConfig):
    num_tasks: int = 20
    task: ConvertTaskConfig = ConvertTaskConfig()


class ConvertTaskset(vf.Taskset[ConvertTask, ConvertConfig]):
    def load(self):
        dataset = datasets.Dataset.from_list(rows(self.config.num_tasks))
        for row in dataset:
            data = ConvertData(
                id=row["id"],
                prompt=row["question"],
                system_prompt=SYSTEM_PROMPT,
                answer=row["answer"],
                info=row["info"],
                reference_calls=row["reference_calls"],
                reference_answer=row["reference_answer"],
            )
            yield ConvertTask(data, self.config.task)


__all__ = ["ConvertTaskset"]


def load_environment(**kwargs) -> vf.Env:
    """The environment `vf-eval vf_units` runs: this taskset under verifiers' single-agent env."""
    return vf.load_environment(vf.resolve_env_config({"taskset": {"id": __name__, **kwargs}}))
