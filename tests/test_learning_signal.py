"""The native GRPO step learns in the right direction, not just somewhere (issue 41).

test_trainer.py only checks that a step changes the weights, which a loss of the wrong sign also does. Here the
trainer's own `step` (scoring, group advantages, the clipped surrogate with its KL term, AdamW) runs on hand-built
groups whose reward is 1 when the completion starts with " yes" and 0 when it starts with " no": only the rollout
is replaced, so every group carries the same clean signal, which a random model would almost never sample by itself.
Since the reward is decided by the first token, a fresh sample's expected reward is (at least) the probability of
" yes" as its first token, read exactly from the logits rather than estimated from noisy samples. A few steps must
raise it, and the same steps with the advantages negated where they enter the loss must lower it.

How far is "clearly past noise": the tiny model's tied, small embeddings cap how far one token's logit can move, so
the effect saturates near 2 nats of log-odds. The same updates move a typical token's first-position log-prob by
about 0.2 nats (the standard deviation over the vocabulary), and " yes" must be among the 1% of tokens that moved
furthest in its direction. Over seeds 0-7 (measured when this was written) the " yes" / " no" log-odds moved by
+1.5 to +2.2 nats under GRPO and -1.2 to -1.6 nats with the sign flipped; " yes" was at worst the 169th of 49152
tokens. The learning rate is high for the lab (3e-3) but low enough that 4 steps rise smoothly; at 1e-2 Adam
overshoots and some seeds swing back.
"""

import pytest
import torch
from torch import Tensor

import grpolab.engine.trainer as trainer_module
from grpolab.config import load_config
from grpolab.engine.policy import build_policy
from grpolab.engine.rollout import Episode, prompt_ids
from grpolab.engine.trainer import GRPOTrainer
from grpolab.envs import env_for
from grpolab.formats import episode_format
from grpolab.rewards.components import register_reward, unregister_reward
from grpolab.rewards.score import score_episodes

STEPS = 4
GROUP = 4
SETTINGS = {
    "model": "tiny",
    "seed": 0,
    "rollout.group_size": GROUP,
    "train.prompts_per_step": 2,
    "train.precision": "fp32",
    "grpo.learning_rate": 3e-3,
    "reward.weights": {"says_yes": 1.0},
}
"""The lab's defaults otherwise: LoRA, loss_type grpo, beta 0.05 against the adapter-free base, mu 1."""


@pytest.fixture()
def says_yes_reward():
    register_reward("says_yes", lambda r, task, env, ctx: (float(r.generated_text.startswith(" yes")), "test"))
    yield
    unregister_reward("says_yes")


def first_token_logps(model, prompts: list[list[int]]) -> Tensor:
    """(V,) log p(first completion token | prompt) under `model` at temperature 1, averaged over the prompts."""
    with torch.no_grad():
        return sum(torch.log_softmax(model(input_ids=torch.tensor([p])).logits[0, -1], -1) for p in prompts) / len(
            prompts
        )


def completion_logprobs(model, prompt: list[int], completion: list[int]) -> list[float]:
    """What a rollout records for `completion`: each token's log-probability under the policy that sampled it."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist()


def train_on_yes_groups(flip_sign: bool, monkeypatch) -> tuple[Tensor, Tensor, int, int, list[dict]]:
    """(first-token log-probs before, after, the " yes" and " no" token ids, each step's metrics) over STEPS trainer
    steps on two groups of [yes, no, yes, no] completions; `flip_sign` negates the advantages where they enter the
    loss."""
    cfg = load_config(None, SETTINGS)
    model, tok, ref = build_policy(cfg)  # seeds torch with cfg.seed: both directions start from the same weights
    env = env_for(cfg)
    fmt = episode_format(tok, cfg.rollout.format)
    yes, no = (tok(word, add_special_tokens=False).input_ids for word in (" yes", " no"))
    assert len(yes) == len(no) == 1
    tail = [*tok(".", add_special_tokens=False).input_ids, tok.eos_token_id]
    tasks = env.tasks("train")[:2]
    prompts = [prompt_ids(tok, env, t, fmt) for t in tasks]
    episodes = []
    for g, (task, prompt) in enumerate(zip(tasks, prompts)):
        for first in [yes, no] * (GROUP // 2):
            completion = first + tail
            logprobs = completion_logprobs(model, prompt, completion)
            e = Episode(task, g, prompt, completion, [1] * len(completion), logprobs, done=True, stop_reason="eos")
            e.text = fmt.transcript(e)
            episodes.append(e)
    score_episodes(env, episodes, cfg.reward.weights, cfg.reward.length_unit, cfg.reward.thought_min_words)
    assert [e.score.total for e in episodes] == [1.0, 0.0] * GROUP  # the reward path sees what the test means

    trainer = GRPOTrainer(model, tok, env, cfg, ref)
    monkeypatch.setattr(trainer, "collect", lambda step, phases: (episodes, 0, 0))  # the rollout, replaced
    if flip_sign:
        loss = trainer_module.grpo_loss

        def flipped(logp, old, ref_logp, advantages, *args, **kwargs):
            return loss(logp, old, ref_logp, -advantages, *args, **kwargs)

        monkeypatch.setattr(trainer_module, "grpo_loss", flipped)
    model.eval()
    before = first_token_logps(model, prompts)
    torch.manual_seed(0)
    metrics = [trainer.step(step).metrics for step in range(1, STEPS + 1)]
    return before, first_token_logps(model, prompts), yes[0], no[0], metrics


@pytest.mark.parametrize("flip_sign", [False, True], ids=["grpo", "flipped_sign"])
def test_grpo_steps_move_the_rewarded_first_token_the_right_way(says_yes_reward, monkeypatch, flip_sign):
    before, after, yes, no, metrics = train_on_yes_groups(flip_sign, monkeypatch)
    assert all(m["skipped"] == 0 and m["adv/mean_abs"] > 0.9 and m["reward/mean"] == 0.5 for m in metrics)
    moved = (after - before) * (-1.0 if flip_sign else 1.0)  # > 0: toward what the (possibly flipped) loss rewards
    # the expected reward of a fresh sample: p(" yes") up by half at least (a correct step) or down by a third
    assert moved[yes] > 0.4
    # against the unrewarded first token, its odds move further still (about 4 times the typical token's spread)
    assert moved[yes] - moved[no] > 1.0
    # and no chance drift: few tokens of the vocabulary moved as far in that direction
    assert (moved > moved[yes]).float().mean() < 0.01
