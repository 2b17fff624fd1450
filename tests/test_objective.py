"""The objective options wired into the native step: truncation masking, GDPO advantages, GSPO, CISPO, entropy."""

from types import SimpleNamespace

import pytest
import torch

from grpolab.config import load_config
from grpolab.engine.phases import Phases
from grpolab.engine.policy import build_policy
from grpolab.engine.rollout import run_episodes, sampling_settings
from grpolab.engine.trainer import GRPOTrainer
from grpolab.envs import env_for
from grpolab.rewards.score import Score
from grpolab.simulator.simulate import DEFAULT_PRIOR, SimSettings, measure_profiles, simulate

SMALL = {
    "model": "tiny",
    "rollout.group_size": 2,
    "rollout.max_new_tokens": 10,
    "train.prompts_per_step": 1,
    "grpo.beta": 0.0,
    "grpo.kl_metric": False,
}


def _trainer_and_episodes(**overrides):
    cfg = load_config(None, {**SMALL, **overrides})
    model, tok, ref = build_policy(cfg)
    env = env_for(cfg)
    trainer = GRPOTrainer(model, tok, env, cfg, ref)
    gen = torch.Generator().manual_seed(0)
    episodes = run_episodes(model, tok, env, env.tasks("train")[:1], 2, sampling_settings(cfg), gen)
    return trainer, episodes


def _moved(trainer, episodes, advantages) -> bool:
    """Whether one update with these advantages changes the trainable weights (AdamW without weight decay leaves
    them where they were when every gradient is 0)."""
    params = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    metrics = trainer.update(episodes, torch.tensor(advantages), Phases())
    assert metrics.get("skipped", 0.0) == 0.0
    return any(not torch.equal(params[n], p) for n, p in trainer.model.named_parameters() if p.requires_grad)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_truncation_masking_drops_a_budget_cut_episode_and_keeps_an_answer_stopped_one(loss_type):
    trainer, episodes = _trainer_and_episodes(**{"grpo.mask_truncated_completions": True, "grpo.loss_type": loss_type})
    episodes[0].stop_reason, episodes[1].stop_reason = "answer", "budget"
    assert not episodes[0].truncated and episodes[1].truncated
    assert not _moved(trainer, episodes, [0.0, 1.0])  # only the budget-cut episode has signal: no update
    assert _moved(trainer, episodes, [1.0, 0.0])  # the answer-stopped one keeps its loss


def test_without_truncation_masking_a_budget_cut_episode_is_trained_on():
    trainer, episodes = _trainer_and_episodes()
    episodes[0].stop_reason, episodes[1].stop_reason = "answer", "budget"
    assert _moved(trainer, episodes, [0.0, 1.0])


def test_every_episode_truncated_skips_the_update():
    trainer, episodes = _trainer_and_episodes(**{"grpo.mask_truncated_completions": True})
    for e in episodes:
        e.stop_reason = "budget"
    assert trainer.update(episodes, torch.tensor([1.0, -1.0]), Phases())["skipped"] == 1.0


@pytest.mark.parametrize(
    "overrides",
    [
        {"grpo.importance_sampling_level": "sequence"},
        {"grpo.loss_type": "cispo", "grpo.epsilon_high": 5.0},
        {"grpo.loss_type": "bnpo"},
        {"grpo.top_entropy_quantile": 0.2},
    ],
)
def test_each_objective_option_trains(overrides):
    trainer, episodes = _trainer_and_episodes(**overrides)
    assert _moved(trainer, episodes, [1.0, -1.0])


def test_normalize_then_sum_advantages_come_from_the_components():
    trainer, _ = _trainer_and_episodes(
        **{"grpo.multi_objective_aggregation": "normalize_then_sum", "reward.weights": {"format": 1.0, "length": 1.0}}
    )
    weights = {"format": 1.0, "length": 1.0}
    parts = [(0.0, 0.0), (0.0, 1.0), (3.0, 0.0)]  # (format, length) of a group of three
    episodes = [SimpleNamespace(score=Score({"format": f, "length": n}, {}, weights)) for f, n in parts]
    rewards = torch.tensor([[e.score.total for e in episodes]])  # (0, 1, 3)
    # format: mean 1, std sqrt(2) -> (-1, -1, 2) / sqrt(2); length: mean 1/3, std sqrt(2) / 3 -> (-1, 2, -1) / sqrt(2)
    # sum (-2, 1, 1) / sqrt(2): batch mean 0, std 1 -> the length-1 episode ties with the format-3 one
    expected = torch.tensor([[-(2**0.5), 2**-0.5, 2**-0.5]])
    assert torch.allclose(trainer.advantages(episodes, rewards), expected, atol=1e-3)
    trainer.cfg.grpo.multi_objective_aggregation = "sum_then_normalize"
    summed = trainer.advantages(episodes, rewards)  # rewards (0, 1, 3): format's spread dominates
    assert summed[0, 2] > summed[0, 1] + 1.0


def test_simulator_scales_advantages_by_the_batch_std(finance):
    profiles = measure_profiles(finance, lambda text: len(text) // 4)

    def adv_abs(scale: str) -> float:
        cfg = load_config(None, {"grpo.scale_rewards": scale})
        return simulate(profiles, DEFAULT_PRIOR, SimSettings(cfg, steps=3, runs=4))["iterations"][1]["adv/mean_abs"]

    group, batch, none = adv_abs("group"), adv_abs("batch"), adv_abs("none")
    # centred rewards divided by the batch's std: mean |A| <= sqrt(mean A^2) <= 1, and not the unscaled value
    assert 0 < batch <= 1.0 and len({round(group, 6), round(batch, 6), round(none, 6)}) == 3
