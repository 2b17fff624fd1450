"""The GRPO math against hand-computed tensors."""

import math

import pytest
import torch

from grpolab.engine.grpo import AGGREGATIONS, clipped_surrogate, group_advantages, grpo_loss, k3_kl


def test_group_advantages_by_hand():
    r = torch.tensor([[1.0, 3.0], [2.0, 2.0]])
    adv = group_advantages(r, eps=0.0 + 1e-12)
    # group 1: mean 2, std 1 -> (-1, +1); group 2: all equal -> 0
    assert torch.allclose(adv, torch.tensor([[-1.0, 1.0], [0.0, 0.0]]), atol=1e-6)
    assert torch.allclose(group_advantages(r, scale=False), torch.tensor([[-1.0, 1.0], [0.0, 0.0]]))


def test_k3_kl_by_hand():
    logp, ref = torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]])
    # r = ref/p = 0.5: k3 = r - log r - 1 = 0.5 + log 2 - 1
    assert k3_kl(logp, ref).item() == pytest.approx(0.5 + math.log(2) - 1)
    assert k3_kl(logp, logp).item() == 0.0


def test_clipped_surrogate_by_hand():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.0]]))  # ratios 1.5, 0.5, 1.0 against old logp 0
    old = torch.zeros(1, 3)
    loss, clipped = clipped_surrogate(logp, old, torch.tensor([2.0]), 0.2, 0.2)
    # A>0: min(1.5*2, 1.2*2)=2.4 ; min(0.5*2, 0.8*2)=1.0 ; 2.0
    assert torch.allclose(loss, -torch.tensor([[2.4, 1.0, 2.0]]))
    assert clipped.tolist() == [[True, False, False]]
    loss, _ = clipped_surrogate(logp, old, torch.tensor([-1.0]), 0.2, 0.3)
    # A<0: min(-1.5, -1.3) = -1.5 ; min(-0.5, -0.8) = -0.8 ; -1
    assert torch.allclose(loss, torch.tensor([[1.5, 0.8, 1.0]]))


def test_aggregations_by_hand():
    per_token = torch.tensor([[1.0, 3.0, 0.0], [2.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert AGGREGATIONS["grpo"](per_token, mask, 3).item() == pytest.approx((2.0 + 2.0) / 2)
    assert AGGREGATIONS["dapo"](per_token, mask, 3).item() == pytest.approx(6.0 / 3)
    assert AGGREGATIONS["dr_grpo"](per_token, mask, 3).item() == pytest.approx(6.0 / (2 * 3))


def test_masked_tokens_contribute_nothing():
    logp = torch.randn(2, 4, requires_grad=True)
    ref = torch.randn(2, 4)
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 1.0]])
    loss, _ = grpo_loss(logp, logp.detach(), ref, torch.tensor([1.0, -1.0]), mask, 0.1, 0.2, 0.2)
    loss.backward()
    assert torch.all(logp.grad[mask == 0] == 0)
    assert torch.all(logp.grad[mask == 1] != 0)


def test_equal_rewards_give_zero_policy_gradient():
    logp = torch.randn(3, 5, requires_grad=True)
    adv = group_advantages(torch.tensor([[0.7, 0.7, 0.7]])).flatten()
    loss, stats = grpo_loss(logp, logp.detach(), None, adv, torch.ones(3, 5), 0.0, 0.2, 0.2)
    loss.backward()
    assert torch.all(logp.grad == 0) and stats.policy_loss == 0
