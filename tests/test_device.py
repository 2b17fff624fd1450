"""The native engine's device and weight dtype (`engine.device`): chosen from what the machine has and the model's
size, and every tensor the engine makes named on a device. No GPU here: CUDA is checked by
benchmarks/gpu_check.py; these tests check the choice, the source, and the bf16-weights path a large model takes
on a GPU (run on the CPU)."""

import ast
from pathlib import Path

import pytest
import torch

from grpolab.config import load_config
from grpolab.engine import device as device_mod
from grpolab.engine.device import engine_device, fp32_state_bytes, weights_dtype
from grpolab.engine.policy import build_policy
from grpolab.engine.sampler import make_sampler
from grpolab.engine.trainer import GRPOTrainer
from grpolab.envs import env_for
from grpolab.errors import UserError
from grpolab.models import load_model

SRC = Path(__file__).resolve().parents[1] / "src" / "grpolab"
ENGINE_FILES = [
    *sorted((SRC / "engine").glob("*.py")),
    SRC / "agent" / "chat.py",
    SRC / "trl" / "backend.py",
    SRC / "preflight" / "check.py",
]
CONSTRUCTORS = {
    "tensor",
    "as_tensor",
    "zeros",
    "ones",
    "full",
    "empty",
    "arange",
    "rand",
    "randn",
    "randint",
    "Generator",
}
GB = 1024**3


def unplaced_constructors(path: Path, root: Path = SRC) -> list[str]:
    """`torch.<constructor>(...)` calls in a file that do not say `device=` (named relative to `root`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        if isinstance(owner, ast.Name) and owner.id == "torch" and node.func.attr in CONSTRUCTORS:
            if not any(k.arg == "device" for k in node.keywords):
                found.append(f"{path.relative_to(root)}:{node.lineno} torch.{node.func.attr}")
    return found


def test_every_tensor_the_engine_makes_names_its_device():
    assert all(p.is_file() for p in ENGINE_FILES)
    assert [hit for p in ENGINE_FILES for hit in unplaced_constructors(p)] == []


def test_the_source_check_finds_a_constructor_without_a_device(tmp_path):
    bad = tmp_path / "engine" / "probe.py"
    bad.parent.mkdir()
    bad.write_text("import torch\nx = torch.zeros(3)\ny = torch.zeros(3, device='cpu')\n")
    assert unplaced_constructors(bad, tmp_path) == ["engine/probe.py:2 torch.zeros"]


def test_auto_takes_cuda_only_where_torch_sees_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert engine_device("auto").type == "cpu"
    with pytest.raises(UserError) as info:
        engine_device("cuda")
    assert "train.device" in str(info.value) and "auto" in info.value.fix
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert engine_device("auto").type == "cuda"
    assert engine_device("cpu").type == "cpu"


def test_weights_stay_fp32_where_the_runs_fp32_state_fits(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert weights_dtype(cpu, 70 * 10**9, lora=False) == torch.float32  # the CPU: always fp32
    assert weights_dtype(cuda, 135 * 10**6, lora=False, memory_bytes=80 * GB) == torch.float32  # SmolLM2 on a GPU
    # 8B: fp32 weights alone fit half of 80 GB with LoRA; with full fine-tuning (x5) they do not
    assert weights_dtype(cuda, 8 * 10**9, lora=True, memory_bytes=80 * GB) == torch.float32
    assert weights_dtype(cuda, 8 * 10**9, lora=False, memory_bytes=80 * GB) == torch.bfloat16
    assert fp32_state_bytes(10, lora=False) == 5 * fp32_state_bytes(10, lora=True)


def test_a_bad_device_names_the_field():
    with pytest.raises(UserError) as info:
        load_config(None, {"train.device": "gpu"})
    assert "train.device" in str(info.value)


SMALL = {
    "model": "tiny",
    "rollout.group_size": 4,
    "rollout.max_new_tokens": 12,
    "train.prompts_per_step": 2,
    "train.eval_every": 0,
    "train.precision": "bf16",
    "reward.weights": {"format": 1.0, "length": 1.0},
}


@pytest.mark.parametrize("lora", [True, False])
def test_a_step_runs_with_bf16_weights(monkeypatch, lora):
    """The path a model too large for fp32 takes on a GPU (`weights_dtype`), run on the CPU: fp32 LoRA adapters
    merged into bf16 weights for decoding, the update under bf16 autocast."""
    monkeypatch.setattr(device_mod, "weights_dtype", lambda *a, **k: torch.bfloat16)
    cfg = load_config(None, {**SMALL, "lora.enabled": lora})
    model, tok, ref = build_policy(cfg)
    frozen = {p.dtype for p in model.parameters() if not p.requires_grad}
    assert frozen <= {torch.bfloat16} and (frozen or not lora)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    m = GRPOTrainer(model, tok, env_for(cfg), cfg, ref).step(1).metrics
    assert m["skipped"] == 0 and torch.isfinite(torch.tensor(m["loss"]))
    changed = [n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(before[n], p)]
    assert changed or m["adv/mean_abs"] == 0


def test_int8_rollouts_refuse_a_model_off_the_cpu():
    model, _ = load_model("tiny")
    with pytest.raises(UserError) as info:
        make_sampler(model.to("meta"), "int8")
    assert "rollout.engine" in str(info.value) and "exact" in info.value.fix
