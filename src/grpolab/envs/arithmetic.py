"""`arithmetic`: multi-step arithmetic that must be computed with the calculator (grounded answers only)."""

from __future__ import annotations

import random

from grpolab.calculator import calculate
from grpolab.envs.base import Environment, Evidence, Split, Task, Verdict
from grpolab.envs.numeric import numbers_in, numeric_verdict, result_sentence_end
from grpolab.tools import Tool, ToolBox, calculator

TASKS_PER_SPLIT = {"train": 200, "heldout": 50}
_SPLIT_SEED = {"train": 101, "heldout": 202}


def _expression(rng: random.Random) -> str:
    """Three or four operations over 2-3 digit numbers, with a parenthesised group."""
    nums = [rng.randint(2, 999) for _ in range(4)]
    ops = [rng.choice("+-*/") for _ in range(3)]
    expr = f"({nums[0]} {ops[0]} {nums[1]}) {ops[1]} {nums[2]} {ops[2]} {nums[3]}"
    if rng.random() < 0.5:
        expr += f" {rng.choice('+-')} {rng.randint(2, 99)}.{rng.randint(1, 9)}"
    return expr


class ArithmeticEnv(Environment):
    name = "arithmetic"
    description = "Multi-step arithmetic with a calculator; the answer must come from the tool's output"
    instructions = (
        "You are a careful assistant. Compute every result with the calculator tool, never in your head. "
        "Round inside it to two decimals: round(EXPRESSION, 2). Answer in one sentence with that result."
    )

    def __init__(self) -> None:
        self.toolbox = ToolBox([Tool(calculator)])
        self._cache: dict[Split, list[Task]] = {}
        example = self._task("example", "(12 + 30) * 2 - 4")
        self.example = "User: Compute (12 + 30) * 2 - 4\n" + self.reference_transcript(example)

    def tasks(self, split: Split) -> list[Task]:
        if split not in self._cache:
            rng = random.Random(_SPLIT_SEED[split])
            other = {t.meta["expression"] for t in self._cache.get("train", [])} if split == "heldout" else set()
            tasks: list[Task] = []
            seen = set(other)
            while len(tasks) < TASKS_PER_SPLIT[split]:
                expr = _expression(rng)
                if expr in seen or "/ 0" in expr:
                    continue
                seen.add(expr)
                tasks.append(self._task(f"arith-{split}-{len(tasks):03d}", expr))
            self._cache[split] = tasks
        return self._cache[split]

    def _task(self, task_id: str, expr: str) -> Task:
        value = calculate(expr)
        return Task(
            id=task_id,
            kind="arithmetic",
            prompt=f"Compute {expr}",
            answer=f"{value:.2f}",
            truth=value,
            reference_thought="I will compute the whole expression with the calculator.",
            reference_calls=[("calculator", {"expression": f"round({expr}, 2)"})],
            reference_answer=f"The result is {value:.2f}.",
            meta={"expression": expr},
        )

    def answer_end(self, answer: str, evidence: Evidence) -> int | None:
        """The instructions ask for one sentence with the result: the answer ends with the first sentence that
        states a number the calculator returned."""
        return result_sentence_end(answer, [n for _, resp in evidence.responses for n in numbers_in(resp)])

    def verify(self, task: Task, final_answer: str, evidence: Evidence) -> Verdict:
        context = numbers_in(evidence.prompt) + [n for _, args in evidence.calls for n in numbers_in(args)]
        grounding = [n for _, resp in evidence.responses for n in numbers_in(resp)]
        return numeric_verdict(final_answer, task.truth, context, grounding, signed=False)
