"""A shop's order desk with state: each episode gets its own sqlite database, and the verifier reads it at the end.

`ShopEnv` is a stateful grpolab environment (docs/stateful.md in grpolab): `start_episode` copies the database
(schema.sql + seed.sql) into a private temporary folder, the tools below read and write it with parameterised SQL,
and the folder is removed once the episode is scored. The verifier compares the episode's final database with the
one the task's reference calls leave on a fresh copy, so a task needs no hand-written check; the answer must also
name the task's order, and one that only asks for information (`expect` in its row) must say the right status.
`actions` (A) is partial credit: the share of the reference's writing calls the episode made, their arguments
compared as the tools read them (`as_carried_out`: an order id's spaces do not matter, as they do not to the tools).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import tempfile
import weakref
from contextlib import closing
from pathlib import Path
from typing import Any, Literal

from grpolab import Environment, EpisodeState, Evidence, Task, Verdict

HERE = Path(__file__).parent
STATUSES = ("pending", "shipped", "delivered", "cancelled")
WRITES = ("cancel_order", "change_address")
Reason = Literal["no longer needed", "ordered by mistake"]


def order_key(order_id: str) -> str:
    """An order id as the tools look it up (the model's may carry spaces)."""
    return order_id.strip()


def stored_address(address: str) -> str:
    """An address as `change_address` stores it."""
    return address.strip()[:200]


class Database:
    """One episode's database file, in a folder of its own that is removed when the episode ends."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="shop-episode-"))  # mode 0700: this user's alone
        self.path = self.folder / "shop.db"
        seed = (HERE / "schema.sql").read_text() + (HERE / "seed.sql").read_text()
        with closing(sqlite3.connect(self.path)) as db, db:  # one transaction: a commit per INSERT took 30x as long
            db.executescript(f"BEGIN;\n{seed}\nCOMMIT;")
        self.remove = weakref.finalize(self, shutil.rmtree, self.folder, True)  # also if nobody closes it

    def query(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        with closing(sqlite3.connect(self.path)) as db:
            db.row_factory = sqlite3.Row
            return [dict(row) for row in db.execute(sql, params)]

    def change(self, sql: str, *params: Any) -> None:
        with closing(sqlite3.connect(self.path)) as db, db:
            db.execute(sql, params)

    def dump(self) -> str:
        """The whole database as text: what the verifier compares."""
        tables = ("customers", "orders")
        return json.dumps({t: self.query(f"SELECT * FROM {t} ORDER BY 1") for t in tables}, sort_keys=True)


def shop_tools(db: Database) -> list:
    """The tools of one episode, bound to its database."""

    def find_customer(name: str) -> dict:
        """Look a customer up by full name.

        Args:
            name: The customer's full name, e.g. "Ada Park".
        """
        rows = db.query("SELECT customer_id, name FROM customers WHERE lower(name) = lower(?)", name.strip())
        return rows[0] if rows else {"error": f"no customer named {name[:60]!r}"}

    def get_order(order_id: str) -> dict:
        """An order's item, status and shipping address.

        Args:
            order_id: The order's id, e.g. "#1004".
        """
        rows = db.query("SELECT * FROM orders WHERE order_id = ?", order_key(order_id))
        return rows[0] if rows else {"error": f"no order {order_id[:20]!r}"}

    def pending_order(order_id: str) -> dict:
        """The order if it is still pending (only those may change), else the error the model sees."""
        order = get_order(order_id)
        if "error" not in order and order["status"] != "pending":
            return {"error": f"order {order_id} is {order['status']}, not pending"}
        return order

    def cancel_order(order_id: str, reason: Reason) -> dict:
        """Cancel a pending order (shipped and delivered orders cannot be cancelled).

        Args:
            order_id: The order's id, e.g. "#1004".
            reason: Why the customer cancels.
        """
        order = pending_order(order_id)
        if "error" in order:
            return order
        oid = order["order_id"]  # the id as stored (the model's may carry spaces)
        db.change("UPDATE orders SET status = 'cancelled', cancel_reason = ? WHERE order_id = ?", reason, oid)
        return get_order(oid)

    def change_address(order_id: str, address: str) -> dict:
        """Change where a pending order ships to.

        Args:
            order_id: The order's id, e.g. "#1004".
            address: The new shipping address.
        """
        order = pending_order(order_id)
        if "error" in order:
            return order
        oid = order["order_id"]
        db.change("UPDATE orders SET address = ? WHERE order_id = ?", stored_address(address), oid)
        return get_order(oid)

    return [find_customer, get_order, cancel_order, change_address]


class ShopEnv(Environment):
    name = "shop"
    description = "a shop's order desk on sqlite: look orders up, cancel them, change their address"
    instructions = (
        "You are the order desk of an online shop. Use the tools to look up and change the customer's orders. "
        "Only change what the customer asks for, then tell them in one sentence what you did or found."
    )
    stateful = True

    def __init__(self) -> None:
        rows = [json.loads(line) for line in (HERE / "tasks.jsonl").read_text().splitlines() if line.strip()]
        self._tasks = {split: [_task(r) for r in rows if r["split"] == split] for split in ("train", "heldout")}
        self._gold: dict[str, str] = {}
        self.rubric.add("actions", write_share, letter="A", weight=0.5, description="share of reference writes made")

    def tasks(self, split):
        return self._tasks[split]

    def start_episode(self, task: Task) -> EpisodeState:
        db = Database()
        return EpisodeState(shop_tools(db), state=db, close=db.remove)

    def gold(self, task: Task) -> str:
        """The database after the task's reference calls on a fresh copy."""
        if task.id not in self._gold:
            episode = self.start_episode(task)
            for name, arguments in task.reference_calls:
                episode.toolbox.execute(name, arguments)
            self._gold[task.id] = episode.state.dump()
            episode.close()
        return self._gold[task.id]

    def verify(self, task: Task, final_answer: str, evidence: Evidence) -> Verdict:
        if evidence.state.dump() != self.gold(task):
            return Verdict(False, "the database differs from the one the reference leaves")
        unnamed = [
            o for o in orders_of(task) if not re.search(rf"(?<!\d){re.escape(o.lstrip('#'))}(?!\d)", final_answer)
        ]
        if unnamed:  # the customer is told which order was changed or looked up, not just "Done."
            return Verdict(False, f"the answer does not name order {unnamed[0]}")
        expect = task.meta.get("expect")
        if expect:
            said = {s for s in STATUSES if s in final_answer.lower()}
            if said != {expect}:
                return Verdict(
                    False, f"the answer must say the status {expect!r} (and no other); it says {sorted(said)}"
                )
        return Verdict(
            True, "the database is as the reference leaves it" + (" and the status is right" if expect else "")
        )


def _task(row: dict) -> Task:
    return Task(
        id=row["id"],
        prompt=row["prompt"],
        answer=row["answer"],
        truth=row["answer"],
        kind=row["kind"],
        reference_calls=[(c["name"], c["arguments"]) for c in row["reference_calls"]],
        reference_thought=row.get("reference_thought", ""),
        reference_answer=row["reference_answer"],
        meta=row.get("meta", {}),
    )


def orders_of(task: Task) -> list[str]:
    """The orders the task's reference calls touch (the answer must name them)."""
    return sorted({str(a["order_id"]) for _, a in task.reference_calls if "order_id" in a})


def as_carried_out(name: str, arguments: Any) -> tuple[str, Any]:
    """A call with the arguments the tools act on (`order_key`, `stored_address`): `" #1001"` cancels #1001."""
    if not isinstance(arguments, dict):
        return name, arguments
    done = dict(arguments)
    if isinstance(done.get("order_id"), str):
        done["order_id"] = order_key(done["order_id"])
    if name == "change_address" and isinstance(done.get("address"), str):
        done["address"] = stored_address(done["address"])
    return name, done


def write_share(replay: Any, task: Task, env: Any, ctx: Any) -> tuple[float, str]:
    """The share of the reference's writing calls (cancel, change address) the episode made with its arguments,
    both compared as the tools carry them out (`as_carried_out`)."""
    wanted = [as_carried_out(n, a) for n, a in task.reference_calls if n in WRITES]
    if not wanted:
        return 0.0, "the task writes nothing"
    calls = [as_carried_out(n, a) for n, a in replay.evidence.calls]
    made = [c for c in wanted if c in calls]
    return len(made) / len(wanted), f"{len(made)}/{len(wanted)} reference writes made"
