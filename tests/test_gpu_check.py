"""benchmarks/gpu_check.py, the prepared GPU check, in its CPU dry mode: everything but the device (the config,
the native run loop, the exported TRL script run in its own process, the results JSON)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"


def test_dry_mode_runs_the_native_loop_and_the_exported_trl_script(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry", "--out", str(tmp_path)], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_check_dry.json").read_text())
    native = result["native"]
    assert result["dry"] is True and native["device"] == "cpu" and native["weights_dtype"] == "float32"
    assert len(native["s_per_step"]) == 1 and native["steps"][0]["step"] == 1
    assert set(native["heldout_success"]) >= {"base", "1"}
    assert result["trl"]["returncode"] == 0 and result["trl"]["done"].startswith("done: 1 steps")
    assert "skipped" in result["trl_vllm"] or result["trl_vllm"]["returncode"] == 0
    assert (tmp_path / "trl" / "train_grpo.py").is_file()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU machine runs the real check instead")
def test_without_a_gpu_the_real_check_exits_2_and_says_so():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "--dry" in done.stderr
