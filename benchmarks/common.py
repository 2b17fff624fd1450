"""What the benchmarks share: where results go and what every results file records about the machine, the paths of
the shipped configs, the per-task verdict and its bootstrap interval, the learning benchmarks' run of one arm, and this
machine's roofs (matmul peak per precision with the best kernel it has, read bandwidth), measured once per process.

Every benchmark writes benchmarks/results/NAME.json through `write_results`, which adds a `machine` block (commit,
date, CPU model and count, architecture, torch version); which command writes which file is listed in
benchmarks/README.md. Importing this module is cheap (no torch until a roof is measured), so readers of the results
(`machine_line`) can use it too.

The FLOP roof is the best rate any kernel reaches here, so "% of peak" means what it says: square `torch.mm`, the
model's own layer shapes through `torch.mm`, and the same shapes through oneDNN's packed linear (the layout the
rollout decodes with, `grpolab.engine.fused.PackedLinear`), at a decode's 16 rows and at training's thousands. bf16
is timed only on a CPU with native bf16 dot products (`grpolab.engine.precision.native_bf16`): elsewhere it is
emulated and no roof of it is worth measuring.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
"""Where benchmarks write NAME.json (and NAME.png); read at each call, so a test can point it elsewhere."""
CONFIGS = ROOT / "src" / "grpolab" / "configs"
DEMO = CONFIGS / "demo.toml"
BOOTSTRAP = 2000
"""Resamples per bootstrap interval."""

SMOLLM2_SHAPES = {"qkv": (576, 960), "o": (576, 576), "gate_up": (576, 3072), "down": (1536, 576)}
"""(in, out) of SmolLM2-135M's fused projections: the shapes its decode and update multiply by."""


# ---- results files ---------------------------------------------------------------------------------------------


def git_commit(where: Path = ROOT) -> str:
    """The short sha of HEAD of the repository holding `where`; "unknown" where git or the repository is missing."""
    try:
        out = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name from `cpuinfo`; where it has none, what `platform` knows (the processor, else the
    architecture), else "unknown"."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def torch_version() -> str:
    """The installed torch's version (without importing it), or "unknown"."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def machine() -> dict[str, Any]:
    """What a results file records of where it was measured: the checkout's commit, the date, the CPU's model and
    count, the architecture and the torch version."""
    return {
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu_model(),
        "cpus": cpu_count(),
        "arch": platform.machine(),
        "torch": torch_version(),
    }


def results_path(name: str, suffix: str = ".json") -> Path:
    """RESULTS/NAME.SUFFIX, the folder created."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    return RESULTS / f"{name}{suffix}"


def write_results(name: str, result: dict[str, Any], indent: int = 2, default: Any = None) -> Path:
    """Writes `result` to RESULTS/NAME.json with this machine's block under "machine" (the writer's key: a value
    there is replaced); every other key is written as given, in its order. Returns the path."""
    path = results_path(name)
    path.write_text(json.dumps({**result, "machine": machine()}, indent=indent, default=default) + "\n")
    return path


def machine_line(result: dict[str, Any]) -> str | None:
    """`2 CPU cores (AMD EPYC 7B13)` from a result's machine block; None for a result without one (written before
    the block existed, or holding another value there)."""
    block = result.get("machine")
    if not isinstance(block, dict) or not isinstance(block.get("cpus"), int):
        return None
    cores = block["cpus"]
    return f"{cores} CPU core{'' if cores == 1 else 's'} ({block.get('cpu') or 'unknown CPU'})"


def command_line(script: str, args: argparse.Namespace) -> str:
    """`python benchmarks/SCRIPT --flag value ...`, one flag per argument that has a value: the command a results
    file records."""
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None)
    return f"python benchmarks/{script} {flags}"


# ---- verdicts and intervals ------------------------------------------------------------------------------------


def solved(row: dict[str, Any]) -> float:
    """1.0 where the strict verifier passed an episode row (its `completion` component is 1), else 0.0."""
    return 1.0 if (row.get("components") or {}).get("completion") == 1.0 else 0.0


def bootstrap(
    per_seed: list[dict[str, float]], rng: random.Random, resamples: int = BOOTSTRAP
) -> tuple[float, float, float]:
    """Mean over seeds of the mean over tasks, and a 95% interval: resample seeds, then tasks within each seed."""
    point = statistics.mean(statistics.mean(s.values()) for s in per_seed)
    means = []
    for _ in range(resamples):
        seeds = [rng.choice(per_seed) for _ in per_seed]
        values = [statistics.mean(rng.choices(list(s.values()), k=len(s))) for s in seeds]
        means.append(statistics.mean(values))
    means.sort()
    return point, means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


# ---- one arm of the learning benchmarks ------------------------------------------------------------------------


def run_arm(config: Path, out: Path, overrides: dict[str, Any], fresh: bool = False) -> dict[str, Any]:
    """A training run of `config` with `overrides` in `out` (read back where `out` holds a finished run of this very
    config, unless `fresh`): its minutes, GRPO and SFT seconds, SFT steps, held-out summaries before and after, the
    last evaluation's rows by task and its training curves."""
    from grpolab.config import load_config
    from grpolab.run.loop import train
    from grpolab.rundir import RunDir

    cfg = load_config(config, overrides)
    done = out / "benchmark.json"
    finished = json.loads(done.read_text()) if not fresh and done.is_file() else {}
    # read back only a run made from this very config: the same overrides of another config file (or of this file
    # since edited) record another config.json
    same = {"train": {"precision"}}  # auto is recorded as what it chose
    if finished.get("overrides") == overrides and RunDir(out).read_config().model_dump(exclude=same) == cfg.model_dump(
        exclude=same
    ):
        minutes = finished["minutes"]
    else:
        if out.exists():
            shutil.rmtree(out)
        start = time.perf_counter()
        train(cfg, out, quiet=True)
        minutes = (time.perf_counter() - start) / 60
        done.write_text(json.dumps({"overrides": overrides, "minutes": minutes}))
    run = RunDir(out)
    last = run.eval_labels()[-1]
    metrics = run.metrics()
    sft = run.sft() or {}
    return {
        "minutes": minutes,
        "grpo_seconds": sum(m.get("perf/step_s", 0.0) for m in metrics),
        "sft_seconds": sft.get("seconds", 0.0),
        "sft_steps": len(sft.get("loss", [])),
        "before": run.eval_summary().get("0", {}),
        "after": run.eval_summary()[last],
        "rows": {r["task_id"]: r for r in run.eval_rows(last)},
        "curves": {
            k: [m.get(k) for m in metrics] for k in ("reward/mean", "kl", "tool_token_mass", "success", "entropy")
        },
    }


# ---- this machine's roofs --------------------------------------------------------------------------------------


def best_seconds(fn: Callable[[], Any], repeats: int = 5) -> float:
    fn()  # warm-up: oneDNN picks and caches its kernel on the first call
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bandwidth(megabytes: int = 512, repeats: int = 5) -> float:
    """Best GB/s reading a large tensor once (a decode step reads every weight once: the bandwidth roof)."""
    import torch

    x = torch.empty(megabytes * 1024 * 1024 // 4)
    x.uniform_()
    return x.numel() * 4 / best_seconds(lambda: x.sum(), repeats) / 1e9


def _packed(x: torch.Tensor, w: torch.Tensor) -> Callable[[], Any]:
    import torch

    packed = torch.ops.mkldnn._reorder_linear_weight(w, len(x))
    return lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


def kernel_rates(dtype: torch.dtype, rows: tuple[int, ...] = (16, 256, 4096)) -> dict[str, float]:
    """GFLOP/s of every kernel at every shape in `dtype`: `mm 2048`, `mm ROWSxIN->OUT`, `packed ROWSxIN->OUT`."""
    import torch

    gen = torch.Generator().manual_seed(0)
    rates: dict[str, float] = {}
    a, b = torch.randn(2048, 2048, generator=gen).to(dtype), torch.randn(2048, 2048, generator=gen).to(dtype)
    rates["mm 2048"] = 2 * 2048**3 / best_seconds(lambda: a @ b) / 1e9
    onednn = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    for m in rows:
        for fan_in, fan_out in SMOLLM2_SHAPES.values():
            x = torch.randn(m, fan_in, generator=gen).to(dtype)
            w = torch.randn(fan_out, fan_in, generator=gen).to(dtype)
            flops = 2 * m * fan_in * fan_out
            shape = f"{m}x{fan_in}->{fan_out}"
            rates[f"mm {shape}"] = flops / best_seconds(lambda x=x, w=w: x @ w.T) / 1e9
            if onednn:
                rates[f"packed {shape}"] = flops / best_seconds(_packed(x, w)) / 1e9
    return {k: round(v, 1) for k, v in rates.items()}


@functools.cache
def matmul_peaks() -> dict[str, Any]:
    """{"fp32": roof, "bf16": roof or None, "fp32_best": kernel, ..., "kernels": {precision: {kernel: GFLOP/s}}}."""
    import torch

    from grpolab.engine.precision import native_bf16

    out: dict[str, Any] = {"kernels": {}}
    precisions = {"fp32": torch.float32}
    if native_bf16() is not None:
        precisions["bf16"] = torch.bfloat16
    for name, dtype in precisions.items():
        rates = kernel_rates(dtype)
        best = max(rates, key=rates.__getitem__)
        out[name], out[f"{name}_best"], out["kernels"][name] = rates[best], best, rates
    out.setdefault("bf16", None)
    return out


def main() -> None:
    """Prints the machine block a results file written here would record."""
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    print(json.dumps(machine(), indent=2))


if __name__ == "__main__":
    main()
