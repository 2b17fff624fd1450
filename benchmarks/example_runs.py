"""An environment written for another library, run in grpolab unchanged: `check` and `train` on the embedded model.

    .venv/bin/python benchmarks/example_runs.py [--examples trl_env verifiers_env]
    .venv/bin/python benchmarks/example_runs.py --read        # the runs already made under runs/

For each example folder (examples/trl_env: a TRL environment_factory class with its reward_funcs; examples/
verifiers_env: a verifiers 0.4 environment), runs `grpolab check --config examples/NAME/config.toml --json` into
runs/check_NAME.json and `grpolab train --config examples/NAME/config.toml --out runs/ex_NAME`, each in its own
process (the example's config as written: SmolLM2, its SFT and GRPO steps), then reads back what they recorded:
the probes' verdicts, held-out success at base, after the SFT warm start and after GRPO, and the reward per step.
Writes benchmarks/results/example_runs.json. The held-out sets are the examples' own (3-4 tasks): these runs show
that the environments train and are checked unchanged, not how much GRPO adds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import write_results

from grpolab.rundir import RunDir
from grpolab.vocabulary import HELDOUT_N, HELDOUT_SUCCESS, HELDOUT_TOOL_CALL_PROB, REWARD_MEAN

EXAMPLES = ("trl_env", "verifiers_env")


def run(name: str) -> float:
    """Check and train one example in their own processes; the seconds both took."""
    config = f"examples/{name}/config.toml"
    start = time.perf_counter()
    with open(f"runs/check_{name}.json", "w") as out:
        subprocess.run(
            [sys.executable, "-m", "grpolab.cli", "check", "--config", config, "--json"], stdout=out, check=True
        )
    subprocess.run(
        [sys.executable, "-m", "grpolab.cli", "train", "--config", config, "--out", f"runs/ex_{name}"], check=True
    )
    return time.perf_counter() - start


def read(name: str) -> dict[str, Any]:
    """What the check and the run of one example recorded."""
    check = json.loads(Path(f"runs/check_{name}.json").read_text())
    probes = check["probes"]
    smallest = min(probes, key=lambda p: p["margin"])
    rundir = RunDir(Path(f"runs/ex_{name}"))
    summary, labels = rundir.eval_summary(), rundir.eval_labels()
    metrics = rundir.metrics()

    def heldout(label: str) -> dict[str, Any]:
        row = summary.get(label, {})
        return {"success": row.get(HELDOUT_SUCCESS), "tool_call_prob": row.get(HELDOUT_TOOL_CALL_PROB)}

    return {
        "config": f"examples/{name}/config.toml",
        "env": check["env"],
        "probes": len(probes),
        "gameable": list(check["gameable"]),
        "shortcuts_paid": list(check["shortcuts_paid"]),
        "smallest_margin": {"probe": smallest["probe"], "margin": round(smallest["margin"], 3)},
        "heldout_tasks": int(summary.get("base", {}).get(HELDOUT_N, 0)),
        "heldout": {"base": heldout("base"), "after_sft": heldout("0"), "after_grpo": heldout(labels[-1])},
        "grpo_steps": len(metrics),
        "reward_per_step": [round(m[REWARD_MEAN], 3) for m in metrics if REWARD_MEAN in m],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", nargs="+", default=list(EXAMPLES), choices=EXAMPLES)
    ap.add_argument("--read", action="store_true", help="read the runs already made under runs/ (do not run them)")
    args = ap.parse_args()
    Path("runs").mkdir(exist_ok=True)
    seconds = {} if args.read else {name: round(run(name), 1) for name in args.examples}
    results = {
        name: {**read(name), **({"seconds": seconds[name]} if name in seconds else {})} for name in args.examples
    }
    command = "python benchmarks/example_runs.py"
    if args.read:
        command = (
            "grpolab check --config examples/NAME/config.toml --json > runs/check_NAME.json; grpolab train --config "
            "examples/NAME/config.toml --out runs/ex_NAME; then python benchmarks/example_runs.py --read"
        )
    print(write_results("example_runs", {"command": command, "date": time.strftime("%Y-%m-%d"), "runs": results}))


if __name__ == "__main__":
    main()
