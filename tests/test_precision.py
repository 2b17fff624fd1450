"""The update's precision: the per-host choice, and bf16 autocast passes that keep the loss and log-probs fp32."""

import json

import pytest
import torch

from grpolab.config import load_config
from grpolab.engine import precision
from grpolab.engine.logprobs import linear_logprobs
from grpolab.engine.policy import build_policy, resolve_precision
from grpolab.engine.precision import (
    choose_precision,
    choose_sft_precision,
    cpu_flags,
    native_bf16,
    update_autocast,
)
from grpolab.engine.sft import sft_warm_start
from grpolab.engine.trainer import GRPOTrainer
from grpolab.envs import env_for
from grpolab.rewards.components import register_reward, unregister_reward
from grpolab.run.loop import train
from grpolab.rundir.layout import CONFIG_FILE, PRECISION_FILE

SMALL = {
    "model": "tiny",
    "rollout.group_size": 4,
    "rollout.max_new_tokens": 12,
    "train.prompts_per_step": 2,
    "train.eval_limit": 2,
    "train.eval_every": 0,
    "reward.weights": {"text_length": 1.0, "format": 1.0},
}


@pytest.fixture(autouse=True)
def text_length_reward():
    """A reward with variance on random text, so the tiny model gets a learning signal."""
    register_reward("text_length", lambda r, task, env, ctx: (len(r.generated_text) % 13 / 13, "test"))
    yield
    unregister_reward("text_length")


def test_cpu_flags_are_read_from_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\nbugs\t\t: none\n")
    assert {"avx2", "avx512_bf16"} <= cpu_flags(info)
    assert native_bf16(cpu_flags(info)) == "avx512_bf16"
    assert native_bf16({"avx2", "fma"}) is None
    assert cpu_flags(tmp_path / "missing") == set()


def test_a_cpu_without_native_bf16_stays_fp32_without_loading_the_model():
    def probe():
        raise AssertionError("the model is not needed where the CPU has no bf16 dot products")

    choice = choose_precision("auto", probe, flags={"avx2", "fma"})
    assert choice.chosen == "fp32" and "no native bf16" in choice.why


def test_a_forced_precision_is_kept_and_said():
    for asked in ("fp32", "bf16"):
        choice = choose_precision(asked, lambda: pytest.fail("no probe for a forced choice"), flags=set())
        assert choice.chosen == asked and "forced" in choice.why


@pytest.fixture()
def tiny():
    cfg = load_config(None, SMALL)
    model, tok, _ = build_policy(cfg)
    return cfg, model, tok


def test_auto_keeps_fp32_on_a_cpu_with_native_bf16_and_says_why():
    def probe():
        raise AssertionError("nothing is timed: bf16 learned less than fp32 in seeding on CPUs")

    choice = choose_precision("auto", probe, flags={"avx512_bf16", "amx_bf16"})
    assert choice.chosen == "fp32" and "learned less than fp32" in choice.why and "seeding_precision" in choice.why


def test_bf16_is_chosen_only_when_faster_and_accurate(tiny, monkeypatch):
    monkeypatch.setattr(precision, "CPU_BF16_LEARNS_AS_FP32", True)  # the checks that decide where it is allowed
    cfg, model, tok = tiny
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    env = env_for(cfg)
    ids = tok("The capital of France is Paris, and 12 * 7 = 84.").input_ids

    def rates(fp32, bf16):
        monkeypatch.setattr(precision, "update_seconds", lambda m, i: {"fp32_update_s": fp32, "bf16_update_s": bf16})

    flags = {"avx512_bf16"}
    rates(1.1, 1.0)
    slow = choose_precision("auto", lambda: (model, ids), flags=flags)
    assert slow.chosen == "fp32" and "1.10x" in slow.why and "bf16_k3" not in slow.measured
    rates(4.0, 1.0)
    fast = choose_precision("auto", lambda: (model, ids), flags=flags)
    assert fast.chosen == "bf16", fast.why
    assert 0 < fast.measured["bf16_k3"] <= precision.BF16_MAX_K3  # bf16 moves the log-probs, a little
    monkeypatch.setattr(precision, "BF16_MAX_K3", fast.measured["bf16_k3"] / 2)
    inaccurate = choose_precision("auto", lambda: (model, ids), flags=flags)
    assert inaccurate.chosen == "fp32" and "moved log-probs" in inaccurate.why
    monkeypatch.undo()  # the real probe on this host, through the policy's helper: its figures must agree
    monkeypatch.setattr(precision, "CPU_BF16_LEARNS_AS_FP32", True)
    real = resolve_precision(cfg.model_copy(update={}), env, model, tok)
    if real.chosen == "bf16":
        assert real.measured["bf16_speedup"] >= precision.BF16_MIN_SPEEDUP
    if precision.native_bf16():
        assert real.measured["fp32_update_s"] > 0 and real.measured["bf16_update_s"] > 0
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert [n for n, p in model.named_parameters() if p.requires_grad] == trainable
    assert all(p.grad is None for p in model.parameters())


def test_the_head_log_probs_under_bf16_autocast_stay_fp32_and_near_fp32():
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(300, 32, generator=gen, requires_grad=True)  # > one CHUNK_TOKENS chunk
    weight = torch.randn(500, 32, generator=gen) * 0.2
    targets = torch.randint(0, 500, (300,), generator=gen)
    exact, _ = linear_logprobs(hidden, weight, targets)
    (g_exact,) = torch.autograd.grad(exact.sum(), hidden)
    with update_autocast("bf16"):
        low, entropy = linear_logprobs(hidden, weight, targets)
    (g_low,) = torch.autograd.grad(low.sum(), hidden)
    assert low.dtype == torch.float32 and entropy.dtype == torch.float32 and g_low.dtype == torch.float32
    assert not torch.equal(low, exact)  # the matmul really ran in bf16
    assert torch.allclose(low, exact, atol=0.1)
    assert torch.allclose(g_low, g_exact, atol=0.05)


def test_a_bf16_update_step_trains_with_fp32_weights_and_loss(tiny):
    cfg, model, tok = tiny
    cfg.train.precision = "bf16"
    cfg.grpo.mu = 2  # the bf16 pass is not the fp32 rollout's: the old log-probs need a pass of their own
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    trainer = GRPOTrainer(model, tok, env_for(cfg), cfg)
    result = trainer.step(1)
    m = result.metrics
    assert m["skipped"] == 0 and m["adv/mean_abs"] > 0 and torch.isfinite(torch.tensor(m["loss"]))
    assert result.phases is not None and result.phases.seconds["old_logprobs"] > 0
    assert 0 < m["mismatch/kl"] < 0.05  # the fp32 rollout against the bf16 update: near, not equal
    assert all(p.dtype == torch.float32 for p in model.parameters())
    after = dict(model.named_parameters())
    assert any(not torch.equal(before[n], after[n]) for n in before)


def test_sft_in_bf16_lowers_the_loss(tiny):
    cfg, model, tok = tiny
    losses = sft_warm_start(model, tok, env_for(cfg), 6, 2, 5e-3, 0, precision="bf16")
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]


def test_a_run_records_the_resolved_precision_and_why(tmp_path):
    cfg = load_config(None, {**SMALL, "train.steps": 1, "train.sft_steps": 1})
    run = train(cfg, tmp_path / "run", quiet=True, eval_base=False)
    recorded = json.loads((run.path / CONFIG_FILE).read_text())["train"]
    choice = json.loads((run.path / PRECISION_FILE).read_text())
    assert recorded["precision"] == choice["chosen"] in ("fp32", "bf16")
    assert choice["requested"] == "auto" and choice["why"]
    # the warm start's own choice: fp32 on a CPU, whatever the update got
    assert recorded["sft_precision"] == choice["sft"]["chosen"] == "fp32"
    assert "seeding_precision" in choice["sft"]["why"]


def test_the_warm_start_keeps_fp32_on_a_cpu_and_follows_the_update_on_a_gpu():
    from grpolab.trl.settings import sft_bf16_here

    assert choose_sft_precision("auto", "bf16", "cpu").chosen == "fp32"
    assert choose_sft_precision("auto", "bf16", "cuda").chosen == "bf16"
    assert choose_sft_precision("auto", "fp32", "cuda").chosen == "fp32"
    forced = choose_sft_precision("bf16", "fp32", "cpu")
    assert forced.chosen == "bf16" and "forced" in forced.why
    # the exported TRL script's SFTConfig(bf16=...) reads the same rule
    assert sft_bf16_here("bf16", "fp32") and not sft_bf16_here("fp32", "bf16")
    assert sft_bf16_here("auto", "bf16") is torch.cuda.is_available()


def test_a_run_made_before_the_precision_field_reads_back_as_fp32():
    from grpolab.config import LabConfig, as_recorded

    data = load_config(None, SMALL).model_dump(mode="json")
    del data["train"]["precision"], data["train"]["sft_precision"]
    old = LabConfig.model_validate(as_recorded(data)).train
    assert old.precision == old.sft_precision == "fp32"
    data["train"]["precision"] = "bf16"  # before the split, the warm start ran in the update's precision
    assert LabConfig.model_validate(as_recorded(data)).train.sft_precision == "bf16"


def test_a_run_not_yet_loaded_is_judged_on_the_device_it_will_use(monkeypatch):
    """The run loop resolves precision before any model loads: on a machine with a GPU that is CUDA's rule (bf16
    where supported), not the CPU's."""
    cfg = load_config(None, SMALL)
    env = env_for(cfg)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    choice = resolve_precision(cfg, env)
    assert choice.chosen == "bf16" and "CUDA" in choice.why
    assert choose_sft_precision("auto", choice.chosen, "cuda").chosen == "bf16"
    cfg.train.device = "cpu"  # the user kept the run on the CPU: the CPU's rule
    assert "CUDA" not in resolve_precision(cfg, env).why
