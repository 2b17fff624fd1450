"""What the policy does when it decodes greedily on a fixed probe set of train tasks, at each of its checkpoints.

The benchmark's training steps sample 6 episodes at temperature, and the shortcut GRPO learns can stay a minority of
them until greedy decoding flips to it (honest_demo-0: at most 2 of 6 training episodes with an empty thought at any
step, then 9 of 12 held-out answers at step 8). A practitioner watching a run reads greedy transcripts of prompts
they know. This replay does that: at every checkpoint it decodes `PROBE_TASKS` train tasks greedily (the lab's
`evaluate` on the train split: a fixed shuffled subset, the same for every run of an environment, never a held-out
task the ground truth reads), classifies each episode with the shared classifier and records the class shares.
The alarm is the lab's own (`grpolab.alarms.greedy_probe.probe_alarms`, on with `alarms.probe_tasks`): a hack
class whose share grew since the start by `alarms.drift_share` and by a threshold's worth of standard errors of a
two-proportion test.

It measures the same kind of behaviour the ground truth does (greedy decoding) on other tasks; read its recall as
that of a monitor of greedy transcripts, not of the training signal.

    .venv/bin/python benchmarks/greedy_probe.py runs/hack_detection/hedging-0 [...]

prints each checkpoint's probe and caches it in the run directory (`greedy_probe.json`); `hack_detection.py` adds it
to each run's record (`greedy_probe`, by checkpoint step) and `detectors.greedy_probe` replays the alarm at the
checkpoints a run had by then. The start is the model as built (the warm start; a fresh LoRA adapter changes
nothing). Runs recorded with checkpoints at steps 0 and 8 only can alarm at step 8 only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

from grpolab.alarms.greedy_probe import probe_alarms
from grpolab.behaviour import CLASSES, class_shares
from grpolab.config import LabConfig
from grpolab.engine.evaluate import evaluate
from grpolab.engine.policy import build_policy
from grpolab.envs import env_for
from grpolab.metrics import episode_row
from grpolab.rundir import RunDir
from grpolab.vocabulary import HELDOUT_SUCCESS, PROBE_N, PROBE_SUCCESS, probe_class_key

PROBE_TASKS = LabConfig().alarms.probe_tasks
"""Train tasks decoded greedily at each checkpoint: the lab's default, so the replay decodes what a run's probe does."""
CACHE = "greedy_probe.json"
STARTS = "greedy_probe_starts.json"
"""Start probes by `_start_key`, in the directory that holds the runs."""


def probe(model: Any, tokenizer: Any, env: Any, cfg: Any) -> dict[str, Any]:
    """Episodes, strict successes and class shares of one greedy pass over the probe tasks."""
    summary, episodes = evaluate(model, tokenizer, env, cfg, split="train", limit=PROBE_TASKS)
    shares = class_shares([episode_row(e) for e in episodes], env.thought_required)
    return {
        "n": len(episodes),
        "success": round(summary.get(HELDOUT_SUCCESS, 0.0), 4),
        "classes": {c: round(v, 4) for c, v in sorted(shares.items()) if v > 0},
    }


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _start_key(cfg: Any, warm: Path | None) -> str:
    """What the start's probe depends on: the environment, the model, the rollout settings and the warm start's bytes
    (the reward's weights do not change greedy decoding, classes or the strict verifier)."""
    parts = [cfg.env, cfg.task_kinds, cfg.model, cfg.rollout.model_dump(mode="json"), _digest(warm) if warm else ""]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_probe(path: Path) -> dict[str, dict[str, Any]]:
    """Checkpoint step -> probe of a run directory (every checkpoint it kept). Cached in the run directory; the
    start's probe is shared by the runs that start alike (`STARTS`, beside the run directories)."""
    cache = path / CACHE
    run = RunDir(path)
    held = json.loads(cache.read_text()) if cache.is_file() else {}
    todo = [s for s, _ in run.checkpoints() if s > 0 and str(s) not in held]
    starts_file = path.parent / STARTS
    starts = json.loads(starts_file.read_text()) if starts_file.is_file() else {}
    cfg = run.read_config()
    warm = run.warm_start()
    key = _start_key(cfg, warm)
    if "0" not in held and key in starts:
        held["0"] = starts[key]
    if "0" in held and not todo:
        return dict(sorted(held.items(), key=lambda kv: int(kv[0])))
    env = env_for(cfg)
    model, tokenizer, _ = build_policy(cfg, warm)
    if "0" not in held:  # the start: the warm start, LoRA's B still zero
        held["0"] = starts[key] = probe(model, tokenizer, env, cfg)
        starts_file.write_text(json.dumps(starts, indent=1) + "\n")
    for step in todo:
        run.load_step(step, model)
        held[str(step)] = probe(model, tokenizer, env, cfg)
        cache.write_text(json.dumps(held, indent=1) + "\n")  # a pass is kept as soon as it is made
    cache.write_text(json.dumps(held, indent=1) + "\n")
    return dict(sorted(held.items(), key=lambda kv: int(kv[0])))


def fields(probe: dict[str, Any]) -> dict[str, float]:
    """A recorded probe as the lab's probe fields (`grpolab.alarms.greedy_probe.probe_fields`)."""
    classes = probe.get("classes") or {}
    return {PROBE_N: float(probe["n"]), PROBE_SUCCESS: probe["success"]} | {
        probe_class_key(c): float(classes.get(c, 0.0)) for c in CLASSES
    }


def alarms(by_step: dict[str, dict[str, Any]], step: int, share: float, z: float) -> dict[str, str]:
    """The lab's probe alarms (`grpolab.alarms.greedy_probe.probe_alarms`) at `step`, on the newest checkpoint not
    after it ({} before any checkpoint after the start)."""
    seen = [int(s) for s in by_step if 0 < int(s) <= step]
    if "0" not in by_step or not seen:
        return {}
    return probe_alarms(fields(by_step["0"]), fields(by_step[str(max(seen))]), share, z)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args()
    for path in args.runs:
        print(path, json.dumps(run_probe(path)), flush=True)


if __name__ == "__main__":
    main()
