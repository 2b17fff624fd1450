"""What a user's tool call costs: each one runs in a forked child (`grpolab.tools`), killed when it answers.

    .venv/bin/python benchmarks/tool_call_cost.py

One typed tool of a user's own (this file's `convert`, so not one of grpolab's: isolated) called in a process that
imported torch and transformers, as a trainer's or `check`'s process has, in alternating rounds of three arms: as
shipped (the killed child is reaped on a thread of its own), with the caller waiting for the child's exit as it did
before, and on a thread instead of a child (`isolate=False`, what grpolab's own tools do). The same call in a fresh
process without torch (the child call alone) is measured in a child interpreter: a fork copies the caller's address
space, so its cost is the kernel's, set by what the caller has loaded. Last, the shipped call again with the caller
holding 1 GB and then 4 GB more of written tensors (a trainer holds its model, optimizer state and activations: the
demo's peaks at 5-6 GB): a fork copies page tables in proportion. Reports median milliseconds per call (ratios
measured in one run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Literal

CALLS = 40
ARGS = {"value": 12.5, "from_unit": "mi", "to_unit": "km"}


def convert(value: float, from_unit: Literal["mi", "km"], to_unit: Literal["mi", "km"]) -> dict:
    """Convert a distance.

    Args:
        value: the distance
        from_unit: its unit
        to_unit: the unit wanted
    """
    factor = {"mi": 1.609344, "km": 1.0}
    return {"value": round(value * factor[from_unit] / factor[to_unit], 2), "unit": to_unit}


def ms_per_call(tool, calls: int = CALLS) -> float:  # noqa: ANN001 (a grpolab Tool)
    start = time.perf_counter()
    for _ in range(calls):
        tool.call(ARGS)
    return (time.perf_counter() - start) * 1000 / calls


def bare(rounds: int) -> float:
    """The isolated call's median in this process, which has not imported torch (`--bare`): the child call that
    `Tool.call` makes once the arguments are valid, as building a `Tool` imports transformers (its schema)."""
    from grpolab.tools import _run_in_child

    assert "torch" not in sys.modules
    medians = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(CALLS):
            _run_in_child(convert, ARGS, 5.0, "convert")
        medians.append((time.perf_counter() - start) * 1000 / CALLS)
    assert "torch" not in sys.modules
    return statistics.median(medians)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="Alternating rounds of each arm.")
    ap.add_argument("--bare", action="store_true", help="Measure in this process without torch; print the median.")
    args = ap.parse_args()
    if args.bare:
        print(json.dumps(bare(args.rounds)))
        return
    fresh = subprocess.run(
        [sys.executable, __file__, "--bare", "--rounds", str(args.rounds)], capture_output=True, text=True, check=True
    )
    import torch  # what a trainer's process has loaded
    import transformers  # noqa: F401
    from common import write_results

    import grpolab.tools as tools
    from grpolab.tools import Tool

    shipped = tools._REAPER.reap

    def wait_for_exit(pid: int) -> None:  # before: the caller waited for the killed child's exit
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass

    isolated, threaded = Tool(convert, isolate=True), Tool(convert, isolate=False)
    assert isolated.call(ARGS).response == threaded.call(ARGS).response == {"value": 20.12, "unit": "km"}
    per: dict[str, list[float]] = {"reaped_on_a_thread": [], "waiting_for_exit": [], "thread": []}
    for _ in range(args.rounds):
        for arm, tool, reap in (
            ("reaped_on_a_thread", isolated, shipped),
            ("waiting_for_exit", isolated, wait_for_exit),
            ("thread", threaded, shipped),
        ):
            tools._REAPER.reap = reap
            per[arm].append(ms_per_call(tool))
    tools._REAPER.reap = shipped
    ms = {arm: round(statistics.median(v), 2) for arm, v in per.items()}
    held: list[torch.Tensor] = []
    holding: dict[str, float] = {}
    for gb in (1, 4):
        while len(held) < gb * 4:  # 256 MB tensors, every page written
            held.append(torch.ones(64 << 20))
        holding[f"{gb}_gb"] = round(statistics.median(ms_per_call(isolated, 10) for _ in range(args.rounds)), 2)
    del held
    result = {
        "calls_per_round": CALLS,
        "rounds": args.rounds,
        "ms_per_call": ms,
        "ms_per_call_without_torch": round(json.loads(fresh.stdout), 2),
        "ms_per_call_holding": holding,
        "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/tool_call_cost.py",
    }
    write_results("tool_call_cost", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
