"""The prepared GPU check (issue 42): the demo config for a few GRPO steps natively on CUDA, then through the exported
TRL script (and again with vLLM where it is installed), one results JSON.

    python benchmarks/gpu_check.py [--steps 3] [--eval-limit 8]       # on a machine with a CUDA GPU
    python benchmarks/gpu_check.py --dry --out DIR                      # anywhere: everything but the device

Native: the run loop on `train.device = "cuda"` (`engine.device`): SFT seeding, `--steps` GRPO steps, held-out
evaluation on `--eval-limit` tasks. It records the device, the weights' dtype, the update's precision (precision.json),
seconds per step and per 1k policy tokens, peak GPU memory, and each step's reward, KL and loss.

TRL: `export_trl` writes the script for the same config (`train.steps` = `--steps`); it runs in a process of its own
(`python train_grpo.py OUT`), on the GPU TRL finds. With vLLM installed a second run sets `[trl] use_vllm = true,
vllm_mode = "colocate"`. Its rollouts are still the lab's (`LabRollout` decodes in transformers, see the script's
docstring): that run measures what vLLM costs beside them (its memory and the weight sync per step), not faster
generation.

`--dry` runs the same code on the CPU with the tiny random model, one step each and a small shape: it checks the
config, the native run, the export and the TRL script end to end (tests/test_gpu_check.py runs it in CI), and
writes DIR/gpu_check_dry.json. Without `--dry` and without a GPU it exits 2 and says so. The real run writes
benchmarks/results/gpu_check.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from common import DEMO, write_results

from grpolab.config import LabConfig, load_config
from grpolab.rundir import RunDir
from grpolab.trl.export import export_trl
from grpolab.vocabulary import COMPLETION_LEN, HELDOUT_SUCCESS, KL, LOSS, PERF_STEP_S, REWARD_MEAN

DRY = {
    "model": "tiny",
    "rollout.group_size": 2,
    "rollout.max_new_tokens": 16,
    "train.prompts_per_step": 1,
    "train.sft_steps": 1,
    "train.sft_batch_size": 1,  # on the CPU, TRL's log-prob kernel folds every token's 49,152 logits in torch
}
"""The dry run's shape: the tiny random model, a GRPO step in seconds."""


def config(steps: int, eval_limit: int, dry: bool) -> LabConfig:
    device = "cpu" if dry else "cuda"
    overrides = {"train.steps": steps, "train.eval_limit": eval_limit, "train.eval_every": 0, "train.device": device}
    return load_config(DEMO, {**overrides, "train.checkpoint_every": 1000, **(DRY if dry else {})})


def native(cfg: LabConfig, out: Path) -> dict[str, Any]:
    """The demo config through the native run loop on the config's device."""
    from grpolab.engine.device import engine_device
    from grpolab.run.loop import train

    device = engine_device(cfg.train.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    run = train(cfg, out / "native", quiet=True)
    wall = time.perf_counter() - start
    steps = RunDir(run.path).metrics()
    tokens = [m.get(COMPLETION_LEN, 0.0) * cfg.rollout.group_size * cfg.train.prompts_per_step for m in steps]
    seconds = [m[PERF_STEP_S] for m in steps]
    evals = run.path / "eval" / "summary.json"  # held-out success per label: base, 0 (after SFT), the last step
    heldout = json.loads(evals.read_text()) if evals.is_file() else {}
    precision = run.path / "precision.json"
    return {
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "weights_dtype": _weights_dtype(cfg),
        "precision": json.loads(precision.read_text()) if precision.is_file() else cfg.train.precision,
        "wall_s": round(wall, 1),
        "s_per_step": [round(s, 2) for s in seconds],
        "s_per_1k_policy_tokens": round(1000 * sum(seconds) / max(sum(tokens), 1), 2),
        "peak_gpu_mb": round(torch.cuda.max_memory_allocated(device) / 2**20) if device.type == "cuda" else None,
        "steps": [{k: m.get(k) for k in ("step", REWARD_MEAN, KL, LOSS, COMPLETION_LEN)} for m in steps],
        "heldout_success": {label: row.get(HELDOUT_SUCCESS) for label, row in heldout.items()},
    }


def _weights_dtype(cfg: LabConfig) -> str:
    """The dtype `engine.device` holds this config's weights in on its device."""
    from grpolab.engine.device import engine_device, weights_dtype
    from grpolab.models import load_model

    device = engine_device(cfg.train.device)
    n_params = sum(p.numel() for p in load_model(cfg.model, seed=cfg.seed)[0].parameters())
    return str(weights_dtype(device, n_params, cfg.lora.enabled)).removeprefix("torch.")


def trl_script(cfg: LabConfig, out: Path, name: str, timeout: int) -> dict[str, Any]:
    """The exported TRL script for `cfg`, run in a process of its own: its exit code, time and the steps it did."""
    folder = out / name
    folder.mkdir(parents=True)
    script = folder / "train_grpo.py"
    export_trl(cfg, script)
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, str(script), str(folder / "output")], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"returncode": None, "wall_s": timeout, "error": f"did not finish in {timeout} s"}
    wall = time.perf_counter() - start
    said = [line for line in done.stdout.splitlines() if line.startswith("done: ")]
    result: dict[str, Any] = {"returncode": done.returncode, "wall_s": round(wall, 1)}
    result["done"] = said[-1] if said else None
    if done.returncode != 0:
        result["stderr_tail"] = done.stderr[-2000:]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per run (default 3; --dry: 1)")
    parser.add_argument("--eval-limit", type=int, default=None, help="held-out tasks evaluated (default 8; --dry: 1)")
    parser.add_argument("--dry", action="store_true", help="on the CPU with the tiny model: all but the device")
    parser.add_argument("--out", type=Path, default=None, help="folder for the runs (default: a temp folder)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds each TRL script may run")
    args = parser.parse_args()
    if not args.dry and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device here; run it on a GPU machine, or with --dry", file=sys.stderr)
        raise SystemExit(2)
    steps = args.steps or (1 if args.dry else 3)
    cfg = config(steps, args.eval_limit or (1 if args.dry else 8), args.dry)
    out = args.out or Path(tempfile.mkdtemp(prefix="grpolab-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"dry": args.dry, "steps": steps, "model": cfg.model, "date": time.strftime("%Y-%m-%d")}
    result["native"] = native(cfg, out)
    print(json.dumps({"native": result["native"]}), flush=True)
    result["trl"] = trl_script(cfg, out, "trl", args.timeout)
    print(json.dumps({"trl": result["trl"]}), flush=True)
    if importlib.util.find_spec("vllm") is None:
        result["trl_vllm"] = {"skipped": "vllm is not installed"}
    else:
        with_vllm = cfg.model_copy(deep=True)
        with_vllm.trl = {**cfg.trl, "use_vllm": True, "vllm_mode": "colocate"}
        result["trl_vllm"] = trl_script(with_vllm, out, "trl_vllm", args.timeout)
    result["command"] = "python benchmarks/gpu_check.py" + (" --dry" if args.dry else "") + f" --steps {steps}"
    if args.dry:
        (out / "gpu_check_dry.json").write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out / 'gpu_check_dry.json'}")
    else:
        print(f"wrote {write_results('gpu_check', result)}")
    failed = [k for k in ("trl", "trl_vllm") if result[k].get("returncode") not in (0, None) or "error" in result[k]]
    if failed:
        raise SystemExit(f"gpu_check: {', '.join(failed)} failed (see the JSON)")


if __name__ == "__main__":
    main()
