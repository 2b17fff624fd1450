"""A run's alarms replayed from its metrics under two rules: every reward component flagged at once (the rule
before `watch.shaping_patience`) and shaping components (format, schema) waiting `shaping_patience` steps.

    python benchmarks/alarm_replay.py runs/demo [--results alarm_replay_demo]

Reads RUN/metrics.jsonl and the held-out score before GRPO, feeds each step's row to a fresh `AlarmWatch` per rule
(the alarm fields the run wrote are dropped first) and lists the alarms per step. The shipped rule's replay must
equal what the run itself logged (`matches_logged`). Writes benchmarks/results/NAME.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import command_line, write_results

from grpolab.config import LabConfig
from grpolab.rundir import RunDir
from grpolab.trust.alarms import SHAPING, AlarmWatch
from grpolab.vocabulary import ALARMS


def replay(run: RunDir, shaping: frozenset[str], watch_defaults: bool = False) -> dict[int, list[str]]:
    """Step -> the alarms a watch with these shaping components raises, fed the run's rows in order (under the run's
    own `[watch]` thresholds, or with `watch_defaults` the ones this version ships)."""
    cfg = run.read_config()
    if watch_defaults:
        cfg.watch = LabConfig().watch
    watch = AlarmWatch(cfg, [], run.heldout_at_start(), shaping)
    out = {}
    for row in run.metrics():
        clean = {k: v for k, v in row.items() if k != ALARMS and not k.startswith("attribution/")}
        out[int(row["step"])] = sorted(watch.check(clean)[ALARMS])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run directory")
    parser.add_argument("--results", default="alarm_replay_demo", help="results file name")
    parser.add_argument(
        "--watch-defaults",
        action="store_true",
        help="also replay the shipped rule under this version's [watch] thresholds instead of the run's own",
    )
    args = parser.parse_args()
    run = RunDir(args.run)
    logged = {int(r["step"]): sorted(r.get(ALARMS) or {}) for r in run.metrics()}
    before, after = replay(run, frozenset()), replay(run, SHAPING)
    for step in sorted(logged):
        print(f"step {step:>2}  before: {', '.join(before[step]) or '-'}  |  now: {', '.join(after[step]) or '-'}")
    result = {
        "run": str(args.run),
        "shaping_patience": run.read_config().watch.shaping_patience,
        "before": before,
        "now": after,
        "matches_logged": after == logged,
        **({"at_watch_defaults": replay(run, SHAPING, True)} if args.watch_defaults else {}),
        "date": time.strftime("%Y-%m-%d"),
        "command": command_line("alarm_replay.py", args).replace("--run ", ""),
    }
    print(f"the shipped rule's replay equals the run's own alarms: {result['matches_logged']}")
    for step, alarms in result.get("at_watch_defaults", {}).items():
        print(f"step {step:>2}  at this version's [watch] defaults: {', '.join(alarms) or '-'}")
    print(f"wrote {write_results(args.results, result)}")


if __name__ == "__main__":
    main()
