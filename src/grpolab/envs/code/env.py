"""`code`: write a Python function; the reward is the fraction of its unit tests that pass, run in the sandbox.

The answer is one fenced python block holding the function; no tools. Completion = tests passed / tests (partial
credit per assert); the strict verdict (held-out success) is all tests passing. Tasks: `grpolab.envs.code.tasks`.
"""

from __future__ import annotations

from typing import Any

from grpolab.envs.base import Environment, Evidence, Split, Task, Verdict
from grpolab.envs.code.probes import PROBES
from grpolab.envs.code.sandbox import Limits, isolation, run_tests
from grpolab.envs.code.tasks import load_tasks
from grpolab.protocol import code_blocks
from grpolab.tools import ToolBox


class CodeEnv(Environment):
    name = "code"
    description = "Write a Python function; reward = fraction of hidden unit tests passed (sandboxed)"
    instructions = (
        "You are a Python programmer. Answer with one fenced ```python code block that contains the complete "
        "function, and nothing else."
    )
    limits = Limits()
    thought_required = False  # the answer is one python block; the protocol is not in this prompt
    probes = PROBES

    def __init__(self) -> None:
        self.toolbox = ToolBox([])
        self.task_kinds: list[str] | None = None
        self._all: dict[Split, list[Task]] | None = None

    def _load(self) -> dict[Split, list[Task]]:
        if self._all is None:
            self._all = load_tasks()
        return self._all

    def tasks(self, split: Split) -> list[Task]:
        tasks = self._load()[split]
        return [t for t in tasks if t.kind in self.task_kinds] if self.task_kinds else tasks

    def isolation(self) -> dict[str, Any]:
        """The sandbox's isolation on this machine (level strong/weak, layers in force, what is missing)."""
        iso = isolation()
        return {**iso.as_dict(), "summary": iso.summary()}

    def system_prompt(self, task: Task | None = None) -> str:
        return self.instructions

    def reference_parts(self, task: Task) -> list[tuple[str, bool]]:
        return [(task.reference_answer, True)]

    def verify(self, task: Task, final_answer: str, evidence: Evidence) -> Verdict:
        blocks = code_blocks(final_answer)
        if not blocks:
            return Verdict(False, "no fenced python code block in the answer", score=0.0)
        # the task's prompt (imports, helper functions) runs first on both sides: before the answer, which redefines
        # the function, and in the test runner, where HumanEval's tests call those helpers
        meta = task.meta
        result = run_tests(blocks[0], meta["tests"], meta["entry_point"], meta["setup"], self.limits, meta["header"])
        reason = f"{result.passed}/{result.total} tests pass" + (f" ({result.error})" if result.error else "")
        return Verdict(result.passed == result.total > 0, reason, score=result.fraction)
