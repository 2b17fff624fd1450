"""An order desk written for TRL's GRPOTrainer(environment_factory=ShopEnv): no grpolab import.

TRL builds one instance per rollout (and reuses them, calling `reset` with the dataset row's columns before each
one), offers the public methods as tools (their type hints and docstrings are the schemas), and, since the class
defines `get_reward`, calls it once per finished rollout. grpolab runs the same class unchanged:
`env = "shop.py:ShopEnv"` in config.toml.
"""

from __future__ import annotations

import copy

SEED = {
    "#1001": {"customer": "Ada Park", "item": "desk lamp", "status": "pending", "address": "12 Oak Road"},
    "#1002": {"customer": "Ada Park", "item": "kettle", "status": "shipped", "address": "12 Oak Road"},
    "#1003": {"customer": "Ben Cole", "item": "chair", "status": "pending", "address": "4 Mill Lane"},
    "#1004": {"customer": "Ben Cole", "item": "rug", "status": "pending", "address": "4 Mill Lane"},
    "#1005": {"customer": "Cara Diaz", "item": "bookshelf", "status": "pending", "address": "9 Elm Street"},
    "#1006": {"customer": "Cara Diaz", "item": "mirror", "status": "delivered", "address": "9 Elm Street"},
    "#1007": {"customer": "Dev Shah", "item": "blender", "status": "pending", "address": "31 Hill View"},
    "#1008": {"customer": "Dev Shah", "item": "toaster", "status": "pending", "address": "31 Hill View"},
}
"""Every episode starts from this shop."""


class ShopEnv:
    """One customer's conversation with the order desk: look orders up, cancel them, change where they ship."""

    def __init__(self) -> None:
        self.orders: dict[str, dict] = {}
        self.goal: dict = {}
        self.writes: list[str] = []

    def reset(self, customer: str, order_id: str, action: str, address: str | None = None, **kwargs) -> str:
        """A fresh shop for the row; the text returned is appended to the user's message (TRL's contract)."""
        self.orders = copy.deepcopy(SEED)
        self.goal = {"order_id": order_id, "action": action, "address": address}
        self.writes = []
        mine = [f"{oid} {o['item']} ({o['status']})" for oid, o in SEED.items() if o["customer"] == customer]
        return f"\n\n[Signed in as {customer}. Your orders: {', '.join(mine)}.]"

    def get_order(self, order_id: str) -> dict:
        """An order's item, status and shipping address.

        Args:
            order_id: The order's id, e.g. "#1004".
        """
        order = self.orders.get(order_id.strip())
        if order is None:
            raise ValueError(f"no order {order_id[:20]!r}")
        return {"order_id": order_id.strip(), **order}

    def cancel_order(self, order_id: str) -> dict:
        """Cancel a pending order (shipped and delivered orders cannot be cancelled).

        Args:
            order_id: The order's id, e.g. "#1004".
        """
        order = self.get_order(order_id)
        if order["status"] != "pending":
            raise ValueError(f"order {order['order_id']} is {order['status']}, not pending")
        self.orders[order["order_id"]]["status"] = "cancelled"
        self.writes.append(order["order_id"])
        return self.get_order(order_id)

    def change_address(self, order_id: str, address: str) -> dict:
        """Change where a pending order ships to.

        Args:
            order_id: The order's id, e.g. "#1004".
            address: The new shipping address.
        """
        order = self.get_order(order_id)
        if order["status"] != "pending":
            raise ValueError(f"order {order['order_id']} is {order['status']}, not pending")
        self.orders[order["order_id"]]["address"] = address.strip()[:200]
        self.writes.append(order["order_id"])
        return self.get_order(order_id)

    def get_reward(self) -> float:
        """1.0 when the order the customer asked about was changed as asked, else 0.0."""
        order = self.orders.get(self.goal.get("order_id", ""))
        if order is None:
            return 0.0
        if self.goal["action"] == "cancel":
            return float(order["status"] == "cancelled")
        return float(order["address"] == self.goal["address"])
