"""`grpolab new-env NAME`: a folder with a working environment a user edits (tools, tasks, a reward, a config, tests).

`--stateful` writes the other kind (`stateful/`): an order desk on sqlite whose episodes each get their own
database (`shop.py`, `schema.sql`, `seed.sql` and tasks written by `shop_seed` / `shop_tasks`).

The folder is a `data` environment (docs/data-env.md): `tools.py` (typed functions), `tasks.jsonl` (rows with
reference solutions, written here by `unit_tasks`), `rewards.py` (a plain TRL-shaped reward function),
`config.toml` naming them, `test_NAME.py` and a README. It passes `grpolab check --config NAME/config.toml --model
tiny` as written. The templates are real files in `template/`, linted with the package; `{name}` in the README is
the one substitution.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import re
import stat
from pathlib import Path
from types import ModuleType

from grpolab.errors import UserError
from grpolab.files.kinds import is_special, kind_text, os_reason
from grpolab.files.outputs import output_folder

TEMPLATE = Path(__file__).parent / "template"
STATEFUL = Path(__file__).parent / "stateful"
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


FIRST = ("Ada", "Bo", "Chen", "Dara", "Eli", "Femi", "Gus", "Hana", "Ivo", "Juno", "Kai", "Lena")
LAST = ("Park", "Silva", "Okafor", "Novak", "Reyes", "Tanaka")
ITEMS = ("desk lamp", "water bottle", "backpack", "kettle", "headphones", "yoga mat", "teapot", "umbrella")
STREETS = ("Elm St", "Oak Ave", "Pine Rd", "Maple Ln", "Cedar Ct", "Birch Way")


THOUGHTS = {
    "address": "I look the order up, and if it is still pending I change its shipping address.",
    "cancel": "I look the order up, and if it is still pending I cancel it with the customer's reason.",
    "status": "I look the order up and tell the customer its status.",
}


def shop_seed(seed: int = 0, customers: int = 12, orders: int = 96) -> dict[str, list[dict]]:
    """The shop's customers and orders (what seed.sql inserts), deterministic in `seed`."""
    rng = random.Random(seed)
    names = rng.sample([f"{a} {b}" for a in FIRST for b in LAST], customers)
    people = [{"customer_id": f"c{i + 1:03d}", "name": n} for i, n in enumerate(names)]
    rows = []
    for i in range(orders):
        rows.append(
            {
                "order_id": f"#{1001 + i}",
                "customer_id": people[i % customers]["customer_id"],
                "item": rng.choice(ITEMS),
                "status": rng.choice(("pending", "pending", "shipped", "delivered")),  # not readable off the id
                "address": f"{rng.randint(1, 99)} {rng.choice(STREETS)}",
            }
        )
    return {"customers": people, "orders": rows}


def seed_sql(data: dict[str, list[dict]]) -> str:
    """`INSERT` statements for `shop_seed`'s rows (values quoted as SQL strings)."""

    def quoted(value: str) -> str:
        return "'" + value.replace("'", "''") + "'"

    lines = ["-- The shop's rows: every episode starts from these (edit freely; tasks.jsonl refers to them)."]
    for table, rows in data.items():
        for row in rows:
            columns = ", ".join(row)
            lines.append(f"INSERT INTO {table} ({columns}) VALUES ({', '.join(quoted(str(v)) for v in row.values())});")
    return "\n".join(lines) + "\n"


def shop_tasks(data: dict[str, list[dict]], seed: int = 0, heldout_every: int = 5) -> list[dict]:
    """Cancel, change-address and status tasks on the seed's orders, each with its reference solution."""
    rng = random.Random(seed)
    names = {c["customer_id"]: c["name"] for c in data["customers"]}
    rows = []
    for i, order in enumerate(data["orders"]):
        oid, who = order["order_id"], names[order["customer_id"]]
        look = {"name": "get_order", "arguments": {"order_id": oid}}
        if order["status"] == "pending" and rng.random() < 0.25:
            kind, new = "address", f"{rng.randint(100, 999)} {rng.choice(STREETS)}"
            prompt = f"I'm {who}. Please ship my order {oid} to {new} instead."
            calls = [look, {"name": "change_address", "arguments": {"order_id": oid, "address": new}}]
            answer, meta = f"Order {oid} now ships to {new}.", {}
        elif order["status"] == "pending":
            kind, reason = "cancel", rng.choice(["no longer needed", "ordered by mistake"])
            why = "I don't need it anymore" if reason == "no longer needed" else "I ordered it by mistake"
            prompt = f"I'm {who}. Please cancel my order {oid}, {why}."
            calls = [look, {"name": "cancel_order", "arguments": {"order_id": oid, "reason": reason}}]
            answer, meta = f"Order {oid} is cancelled.", {}
        else:
            kind = "status"
            prompt = f"I'm {who}. What is the status of my order {oid} ({order['item']})?"
            calls = [look]
            answer, meta = f"Order {oid} is {order['status']}.", {"expect": order["status"]}
        rows.append(
            {
                "id": f"{kind}-{oid.lstrip('#')}",
                "prompt": prompt,
                "answer": answer,
                "kind": kind,
                "split": "heldout" if i % heldout_every == heldout_every - 1 else "train",
                "reference_calls": calls,
                "reference_thought": THOUGHTS[kind],
                "reference_answer": answer,
                "meta": meta,
            }
        )
    return rows


def new_env(name: str, parent: Path, stateful: bool = False) -> Path:
    """Write the environment folder `parent/name` (the stateful sqlite kind with `stateful`); a UserError, before
    anything is written, where the name is not a plain folder name, `parent` is not an existing folder of the
    user's (a missing one is never made: the error names the `mkdir -p`; none under /dev, /proc or /sys), or
    `parent/name` is anything but a new name or an empty folder (nothing of the user's is overwritten)."""
    if not NAME.fullmatch(name):
        raise UserError(f"{name!r} is not a plain folder name", "use letters, digits, - and _ (e.g. my_env)")
    folder = parent / name
    _check_parent(parent, folder)
    _check_folder(folder)
    try:
        folder.mkdir(exist_ok=True)
        return _stateful_env(name, folder) if stateful else _data_env(name, folder)
    except OSError as exc:  # checked above: what is left is the system's (permissions, a full disk)
        raise UserError(f"cannot write {folder} ({os_reason(exc)})", "pass --into a folder you may write") from None


def _check_parent(parent: Path, folder: Path) -> None:
    """`--into`: an existing folder, not under /dev, /proc or /sys (its links resolved); `folder` is the one to
    write in it."""
    fix = "pass --into a folder of your own"
    if is_special(os.path.abspath(parent)) or is_special(os.path.realpath(parent)):
        raise UserError(f"cannot write into {parent} (no environment is made under /dev, /proc or /sys)", fix)
    try:
        info = os.stat(parent)
    except FileNotFoundError:
        if os.path.islink(parent):  # `mkdir -p` would not help: the link stays
            raise UserError(
                f"cannot write into {parent}: it is a symlink to {os.readlink(parent)}, which does not exist", fix
            ) from None
        output_folder(folder, "--into")  # the error outputs give: the missing folder and the `mkdir -p` to run
        raise UserError(f"cannot write into {parent} (no such folder)", fix) from None
    except (OSError, ValueError) as exc:  # ENOTDIR (a file on the way), ELOOP, ENAMETOOLONG, a NUL byte...
        raise UserError(f"cannot write into {parent} ({os_reason(exc)})", fix) from None
    if not stat.S_ISDIR(info.st_mode):
        what = "a file" if stat.S_ISREG(info.st_mode) else kind_text(info.st_mode, os.path.realpath(parent))
        raise UserError(f"cannot write into {parent}: it is {what}, not a folder", fix)


def _check_folder(folder: Path) -> None:
    """`--into`/NAME: a new name, or an empty folder (a link to one included); never a dangling link, a file."""
    fix = "pick another name, or remove it first"
    if os.path.islink(folder) and not os.path.exists(folder):
        raise UserError(f"{folder} is a symlink to {os.readlink(folder)}, which does not exist", fix)
    if is_special(os.path.realpath(folder)):
        raise UserError(f"{folder} leads to {os.path.realpath(folder)} (none is made under /dev, /proc or /sys)", fix)
    try:
        info = os.stat(folder)
        entries = os.listdir(folder) if stat.S_ISDIR(info.st_mode) else []
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:  # a folder it may not read, a link loop...
        raise UserError(f"cannot write {folder} ({os_reason(exc)})", fix) from None
    if not stat.S_ISDIR(info.st_mode):
        what = "a file" if stat.S_ISREG(info.st_mode) else kind_text(info.st_mode, os.path.realpath(folder))
        raise UserError(f"{folder} exists and is {what}, not a folder", fix)
    if entries:
        raise UserError(f"{folder} exists and is not empty", "pick another name, or remove that folder first")


def _data_env(name: str, folder: Path) -> Path:
    for template in ("tools.py", "rewards.py", "config.toml"):
        (folder / template).write_text((TEMPLATE / template).read_text())
    (folder / f"test_{name.replace('-', '_')}.py").write_text((TEMPLATE / "test_env.py").read_text())
    (folder / "README.md").write_text((TEMPLATE / "README.md").read_text().replace("{name}", name))
    (folder / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in unit_tasks()))
    return folder


def _stateful_env(name: str, folder: Path) -> Path:
    for template in ("shop.py", "schema.sql", "config.toml"):
        (folder / template).write_text((STATEFUL / template).read_text())
    (folder / f"test_{name.replace('-', '_')}.py").write_text((STATEFUL / "test_env.py").read_text())
    (folder / "README.md").write_text((STATEFUL / "README.md").read_text().replace("{name}", name))
    data = shop_seed()
    (folder / "seed.sql").write_text(seed_sql(data))
    (folder / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in shop_tasks(data)))
    return folder
