"""`grpolab new-env NAME`: a folder with a working environment a user edits (tools, tasks, a reward, a config, tests).

The folder is a `data` environment (docs/data-env.md): `tools.py` (typed functions), `tasks.jsonl` (rows with
reference solutions, written here by `unit_tasks`), `rewards.py` (a plugin adding a TRL-shaped reward component),
`config.toml` naming them, `test_NAME.py` and a README. It passes `grpolab check --config NAME/config.toml --model
tiny` as written. The templates are real files in `template/`, linted with the package; `{name}` in the README is
the one substitution.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import random
import re
from pathlib import Path
from types import ModuleType

from grpolab.errors import UserError

TEMPLATE = Path(__file__).parent / "template"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")

# (from, to, words for the prompt, lowest and highest value) of each conversion a task may ask for
CONVERSIONS = {
    "length": [("mi", "km", "miles", "kilometres", 1, 500), ("km", "mi", "kilometres", "miles", 1, 800),
               ("ft", "m", "feet", "metres", 1, 3000), ("m", "ft", "metres", "feet", 1, 1000)],
    "mass": [("lb", "kg", "pounds", "kilograms", 1, 400), ("kg", "lb", "kilograms", "pounds", 1, 200),
             ("oz", "g", "ounces", "grams", 1, 64), ("g", "oz", "grams", "ounces", 10, 2000)],
    "temperature": [("C", "F", "degrees Celsius", "degrees Fahrenheit", -40, 120),
                    ("F", "C", "degrees Fahrenheit", "degrees Celsius", -40, 250)],
}  # fmt: skip
PHRASES = ("Convert {v} {a} to {b}.", "How many {b} is {v} {a}?", "What is {v} {a} in {b}?")


@functools.cache
def _template_tools() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grpolab_scaffold_tools", TEMPLATE / "tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _convert(value: float, src: str, dst: str) -> float:
    """What template/tools.py's `convert` answers (a row's answer is what the tool says)."""
    return _template_tools().convert(value, src, dst)["value"]


def unit_tasks(n: int = 120, seed: int = 0, heldout_every: int = 5) -> list[dict]:
    """`n` unit-conversion rows with reference solutions; every `heldout_every`-th row is held out."""
    rng = random.Random(seed)
    kinds = list(CONVERSIONS)
    rows = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        src, dst, a, b, low, high = rng.choice(CONVERSIONS[kind])
        value = round(rng.uniform(low, high), rng.choice((0, 1, 2)))
        value = int(value) if value == int(value) else value
        answer = _convert(value, src, dst)
        rows.append(
            {
                "id": f"{kind}-{i}",
                "prompt": rng.choice(PHRASES).format(v=value, a=a, b=b),
                "answer": answer,
                "kind": kind,
                "split": "heldout" if i % heldout_every == heldout_every - 1 else "train",
                "reference_calls": [
                    {"name": "convert", "arguments": {"value": value, "from_unit": src, "to_unit": dst}}
                ],
                "reference_answer": f"{value} {a} is {answer:g} {b}.",
                "meta": {"to_unit": dst},
            }
        )
    return rows


def new_env(name: str, parent: Path) -> Path:
    """Write the environment folder `parent/name`; a UserError where the name is not a plain folder name or the
    folder exists and is not empty (nothing of the user's is overwritten)."""
    if not NAME.fullmatch(name):
        raise UserError(f"{name!r} is not a plain folder name", "use letters, digits, - and _ (e.g. my_env)")
    folder = parent / name
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise UserError(f"{folder} exists and is not empty", "pick another name, or remove that folder first")
    folder.mkdir(parents=True, exist_ok=True)
    for template in ("tools.py", "rewards.py", "config.toml"):
        (folder / template).write_text((TEMPLATE / template).read_text())
    (folder / f"test_{name.replace('-', '_')}.py").write_text((TEMPLATE / "test_env.py").read_text())
    (folder / "README.md").write_text((TEMPLATE / "README.md").read_text().replace("{name}", name))
    (folder / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in unit_tasks()))
    return folder
