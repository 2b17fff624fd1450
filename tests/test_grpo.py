"""The GRPO math against hand-computed tensors."""

import math

import pytest
import torch

from grpolab.engine.grpo import (
    AGGREGATIONS,
    TOKEN_MEAN,
    cispo_surrogate,
    clipped_surrogate,
    decoupled_advantages,
    group_advantages,
    grpo_loss,
    importance_log_ratio,
    k3_kl,
    top_entropy_mask,
    without_truncated,
)


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


def test_batch_scaled_advantages_by_hand():
    r = torch.tensor([[1.0, 3.0], [2.0, 2.0]])
    # centred per group: (-1, 1), (0, 0); std of all four rewards {1, 3, 2, 2}: mean 2, variance (1+1+0+0)/4 = 0.5
    adv = group_advantages(r, scale="batch", eps=1e-12)
    s = math.sqrt(0.5)
    assert torch.allclose(adv, torch.tensor([[-1 / s, 1 / s], [0.0, 0.0]]), atol=1e-6)
    assert torch.equal(group_advantages(r, scale="group"), group_advantages(r, scale=True))
    assert torch.equal(group_advantages(r, scale="none"), group_advantages(r, scale=False))


def test_decoupled_advantages_normalise_each_component_before_the_sum():
    # one group of two; component a spreads 0..10, component b 0..1, in opposite directions
    comps = torch.tensor([[[0.0, 1.0], [10.0, 0.0]]])  # (P=1, G=2, K=2)
    w = torch.tensor([1.0, 1.0])
    # per component: a -> (-1, +1), b -> (+1, -1): the sum is (0, 0), so both advantages are 0
    assert torch.allclose(decoupled_advantages(comps, w, eps=1e-12), torch.zeros(1, 2), atol=1e-6)
    # summed first, a dominates: rewards (1, 10) -> (-1, +1)
    summed = (comps * w).sum(-1)
    assert torch.allclose(group_advantages(summed, eps=1e-12), torch.tensor([[-1.0, 1.0]]), atol=1e-6)
    # weights (2, 1): per-component (-2+1, 2-1) = (-1, 1), batch mean 0 and std 1 -> (-1, 1)
    adv = decoupled_advantages(comps, torch.tensor([2.0, 1.0]), eps=1e-12)
    assert torch.allclose(adv, torch.tensor([[-1.0, 1.0]]), atol=1e-6)


def test_sequence_level_ratio_is_the_exp_of_the_mean_log_ratio_over_policy_tokens():
    logp = torch.tensor([[math.log(2.0), math.log(0.5), 5.0]])
    old = torch.zeros(1, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third token is tool output: left out of the mean
    log_ratio = importance_log_ratio(logp, old, mask, "sequence")
    assert log_ratio.shape == (1, 1) and log_ratio.item() == pytest.approx(0.0, abs=1e-6)  # (log 2 - log 2) / 2
    assert torch.equal(importance_log_ratio(logp, old, mask, "token"), logp)
    # ratio exp(mean(log 1.5, log 1.5)) = 1.5 for every token: clipped at 1.2 with A = 2
    logp = torch.log(torch.tensor([[1.5, 1.5]]))
    loss, clipped = clipped_surrogate(logp, torch.zeros(1, 2), torch.tensor([2.0]), 0.2, 0.2, None, "sequence")
    assert torch.allclose(loss, -torch.tensor([[2.4, 2.4]])) and clipped.tolist() == [[True, True]]


def test_sequence_level_gradient_reaches_every_policy_token_equally():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.9]])).requires_grad_()
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, _ = grpo_loss(logp, logp.detach(), None, torch.tensor([1.0]), mask, 0.0, 0.2, 0.2, level="sequence")
    loss.backward()
    # ratio = exp(mean(logp - old)) = 1; d(-ratio * A)/dlogp_t = -A / n_tokens on each policy token, 0 on tool output
    assert torch.allclose(logp.grad, torch.tensor([[-0.5, -0.5, 0.0]]))


def test_cispo_caps_the_detached_ratio_and_weights_the_log_prob():
    logp = torch.log(torch.tensor([[3.0, 0.5]])).requires_grad_()  # ratios 3 and 0.5 against old logp 0
    loss, capped = cispo_surrogate(logp, torch.zeros(1, 2), torch.tensor([2.0]), 0.2, 2.0)
    # -min(ratio, 2) * A * logp: -2 * 2 * log 3, -0.5 * 2 * log 0.5
    assert torch.allclose(loss, torch.tensor([[-4 * math.log(3.0), -1.0 * math.log(0.5)]]))
    assert capped.tolist() == [[True, False]]
    loss.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[-4.0, -1.0]]))  # the weight is detached: d/dlogp = -w * A
    _, capped = cispo_surrogate(logp.detach(), torch.zeros(1, 2), torch.tensor([-2.0]), 0.2, 2.0)
    assert capped.tolist() == [[False, False]]  # counted with A > 0 only, as TRL's cispo_clip_ratio


def test_cispo_and_bnpo_aggregate_as_token_means():
    assert AGGREGATIONS["cispo"] is AGGREGATIONS["dapo"] and AGGREGATIONS["bnpo"] is AGGREGATIONS["dapo"]
    assert TOKEN_MEAN == {"dapo", "bnpo", "cispo"}
    logp = torch.log(torch.tensor([[0.5, 0.5], [0.25, 0.25]]))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, _ = grpo_loss(logp, logp, None, torch.tensor([1.0, -1.0]), mask, 0.0, 0.2, 5.0, "cispo")
    # weight 1 everywhere: (-log .5 - log .5 + log .25) / 3 = 0
    assert loss.item() == pytest.approx((-2 * math.log(0.5) + math.log(0.25)) / 3)


def test_truncated_episodes_lose_every_token():
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    out = without_truncated(mask, torch.tensor([True, False]))
    assert out.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]


def test_top_entropy_mask_by_hand():
    entropy = torch.tensor([[0.1, 0.9, 0.5, 9.0], [0.3, 0.7, 0.2, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]])  # 9.0 is tool output: never counted
    # mask-1 entropies sorted: .1 .2 .3 .5 .7 .9; quantile 0.5 of them (linear): between .3 and .5 = 0.4
    keep = top_entropy_mask(entropy, mask, 0.5)
    assert keep.tolist() == [[False, True, True, False], [False, True, False, False]]
    assert top_entropy_mask(entropy, mask, 1.0).tolist() == mask.bool().tolist()
    assert top_entropy_mask(entropy, mask, 0.0).sum() == 1  # only the highest


def test_entropy_mask_limits_the_policy_term_not_the_kl():
    logp = torch.zeros(1, 2, requires_grad=True)
    ref = torch.full((1, 2), -1.0)
    mask, keep = torch.ones(1, 2), torch.tensor([[True, False]])
    loss, _ = grpo_loss(logp, logp.detach(), ref, torch.tensor([1.0]), mask, 0.1, 0.2, 0.2, policy_mask=keep)
    loss.backward()
    # grpo aggregation over 2 tokens; policy -A on token 0 only; k3 gradient 1 - exp(ref - logp) on both
    kl_grad = 0.1 * (1 - math.exp(-1.0))
    assert torch.allclose(logp.grad, torch.tensor([[(-1.0 + kl_grad) / 2, kl_grad / 2]]))
