"""The SFT warm start's draw: which reference transcripts it trains on (train.sft_mix weighs task kinds)."""

import random
from collections import Counter

import pytest

from grpolab.config import load_config
from grpolab.engine.sft import check_sft_mix, sft_batches
from grpolab.errors import UserError


def test_without_a_mix_every_train_task_is_equally_likely_as_before(finance):
    tasks = finance.tasks("train")
    rng = random.Random(3)
    before = [rng.sample(tasks, 4) for _ in range(5)]  # the draw of every run so far: kept, so seeds reproduce
    assert sft_batches(tasks, steps=5, batch_size=4, seed=3) == before


def test_the_mix_sets_each_kinds_share_of_the_sft_samples(finance):
    tasks = finance.tasks("train")
    a, b = "revenue_growth", "pct_change"  # 114 and 152 train tasks: 43% of the pair by count
    batches = sft_batches(tasks, steps=400, batch_size=2, seed=0, mix={a: 3.0, b: 1.0})
    drawn = Counter(t.kind for batch in batches for t in batch)
    assert set(drawn) == {a, b}  # a kind the mix leaves out is not drawn
    assert 0.7 < drawn[a] / 800 < 0.8  # 3 to 1, whatever share of the train split each kind holds
    assert all(len(batch) == 2 for batch in batches)


def test_a_mix_naming_a_kind_without_train_tasks_is_refused(finance):
    with pytest.raises(UserError, match=r"train\.sft_mix.*'no_such_kind'") as info:
        check_sft_mix(finance, {"no_such_kind": 1.0})
    assert "pct_change" in info.value.fix  # the kinds it could name


@pytest.mark.parametrize("mix", [{"pct_change": -1.0}, {"pct_change": 0.0}])
def test_a_mix_without_a_positive_weight_is_a_config_error(mix):
    with pytest.raises(UserError, match=r"train\.sft_mix"):
        load_config(None, {"train.sft_mix": mix})


def test_train_refuses_a_mix_naming_an_unknown_kind_before_loading_a_model(cli, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('model = "tiny"\nenv = "finance"\n[train]\nsft_steps = 1\nsft_mix = {no_such_kind = 1.0}\n')
    code, _, err = cli("train", "--config", str(config), "--out", str(tmp_path / "run"))
    assert code == 2 and "train.sft_mix" in err and "no_such_kind" in err


def test_a_step_runs_the_prompts_shared_opening_once_with_the_same_loss_and_gradient(finance, monkeypatch):
    """The step's transcripts share the system prompt: run once, each transcript continuing on its keys and values,
    the loss and every LoRA gradient equal those of each transcript run whole."""
    import torch

    from grpolab.engine import sft
    from grpolab.engine.policy import build_policy

    cfg = load_config(None, {"model": "tiny"})
    model, tok, _ = build_policy(cfg)
    with torch.no_grad():  # adapters that change the output (peft starts B at zero)
        gen = torch.Generator().manual_seed(0)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    examples = [sft.reference_tokens(tok, finance, t) for t in finance.tasks("train")[:3]]
    shared = sft.shared_length([p for p, _, _ in examples])
    assert 0 < shared < min(len(p) for p, _, _ in examples)  # the opening, not a whole prompt

    def step() -> tuple[float, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        loss = sft.sft_gradients(model, examples, tok.pad_token_id, "fp32", "cpu")
        return loss, {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    ran: list[int] = []
    prefix_run = sft.group_token_stats

    def counted(model, prompt, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        ran.append(len(prompt))
        return prefix_run(model, prompt, *args, **kwargs)

    monkeypatch.setattr(sft, "group_token_stats", counted)
    loss, grads = step()
    assert ran == [shared] * 3
    monkeypatch.setattr(sft, "shared_length", lambda prompts: 0)  # each transcript whole, as before
    whole_loss, whole_grads = step()
    assert loss == pytest.approx(whole_loss, rel=1e-5)
    assert grads.keys() == whole_grads.keys() and grads
    for name, g in grads.items():
        assert torch.allclose(g, whole_grads[name], rtol=1e-4, atol=1e-6), name
