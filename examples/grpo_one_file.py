"""GRPO for a tool-calling agent in one file, on grpolab's own functions: read it top to bottom.

What `grpolab train` does for a task of your own, without the run loop around it (no evaluation, alarms,
checkpoints, run directory or progress bar), in the order a TRL user knows it:

    1. the task as rows          a JSONL file of prompts and answers (TRL: the dataset)
    2. one typed tool            a plain function: its JSON schema comes from the type hints and the docstring
    3. one reward, and weights   TRL's reward-function shape; the episode reward is a weighted sum of components
    4. the environment           rows + tools + reward: env `data`, built from a config
    5. the policy                LoRA on the embedded SmolLM2-135M-Instruct; the reference is the adapters off
    6. seeding                   a few SFT steps on the rows' reference solutions: the base model never calls a tool
    7. rollout                   G episodes per prompt; each tool call runs, its output is spliced in with mask 0
    8. scores                    every episode scored by the weighted components
    9. advantages                relative to each prompt's group
   10. loss                      clipped surrogate + beta * k3 KL to the frozen start, on policy tokens only
   11. the optimizer step

Where this departs from the engine (`grpolab/engine/trainer.py`): one forward per group, no micro-batches; one
update per batch (grpo.mu = 1); fp32 throughout; no dynamic filtering or truncation masking.

    python examples/grpo_one_file.py                         # the embedded model (minutes a step on 2 cores)
    python examples/grpo_one_file.py --model tiny --steps 2  # the tiny random model the tests use (seconds)
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

import grpolab

# Below, `grpolab.engine` is the engine the `train` command runs: the same functions, called one by one.
from grpolab.engine.grpo import group_advantages, grpo_loss
from grpolab.engine.logprobs import group_token_stats
from grpolab.engine.policy import build_policy, with_lora
from grpolab.engine.rollout import Episode, run_episodes, sampling_settings
from grpolab.engine.sft import sft_warm_start
from grpolab.engine.trainer import step_generator, step_prompts

# ---- 1. the task as rows ----------------------------------------------------------------------------------------
# One JSON object per row (docs/data-env.md). `reference_calls` and `reference_answer` are an honest solution: the
# seeding trains on it. `meta` is yours: its keys reach TRL-shaped rewards as columns.

QUESTIONS = [(v, a, b) for v in (1.5, 3, 7, 12.5, 26.2, 42, 100, 250) for a, b in (("mi", "km"), ("km", "mi"))]
QUESTIONS += [(v, a, b) for v in (6, 30, 330, 1000) for a, b in (("ft", "m"), ("m", "ft"))]


def task_rows() -> list[dict[str, Any]]:
    rows = []
    for i, (value, from_unit, to_unit) in enumerate(QUESTIONS):
        arguments = {"value": value, "from_unit": from_unit, "to_unit": to_unit}
        answer = convert(**arguments)["value"]  # the tool's own output is the ground truth
        rows.append(
            {
                "prompt": f"Convert {value} {from_unit} to {to_unit}.",
                "answer": answer,
                "split": "heldout" if i % 6 == 5 else "train",  # held out: what `grpolab eval` scores
                "meta": {"to_unit": to_unit},
                "reference_calls": [{"name": "convert", "arguments": arguments}],
                "reference_answer": f"{value} {from_unit} is {answer} {to_unit}.",
            }
        )
    return rows


# ---- 2. one typed tool ------------------------------------------------------------------------------------------
# Env `data` reads its tools from a module: this very file, whose TOOLS list names them. A call's arguments are
# checked against the schema before the function runs (in a child process, with a timeout); an exception becomes an
# {"error": ...} response the model reads.

Unit = Literal["km", "mi", "m", "ft"]
METRES = {"km": 1000.0, "mi": 1609.344, "m": 1.0, "ft": 0.3048}


def convert(value: float, from_unit: Unit, to_unit: Unit) -> dict:
    """Convert a length from one unit to another, rounded to 2 decimals.

    Args:
        value: The length to convert.
        from_unit: The unit it is given in.
        to_unit: The unit wanted.
    """
    return {"value": round(value * METRES[from_unit] / METRES[to_unit], 2), "unit": to_unit}


TOOLS = [convert]

# ---- 3. one reward, and how it is weighted ----------------------------------------------------------------------
# TRL's shape: prompts, completions (each episode's transcript, tool responses included) and one column per task
# field and `meta` key. The built-in components score the protocol and the answer: format (a thought, well-formed
# calls), schema (calls valid for the tool), completion (the verifier: `numeric` here), length (per 100 tokens).


def names_the_unit(prompts: list[str], completions: list[str], to_unit: list[str], **kwargs: Any) -> list[float]:
    """1 when the final answer (the text after the last tool response) names the unit asked for, else 0."""
    finals = [c.rsplit("</tool_response>", 1)[-1] for c in completions]
    return [float(re.search(rf"\b{u}\b", final) is not None) for final, u in zip(finals, to_unit)]


WEIGHTS = {"format": 1.0, "schema": 1.5, "completion": 3.0, "length": -0.05, "unit": 0.5}
"""The episode reward is sum(weight * component), as TRL's `reward_weights` sum its reward functions."""


# ---- 4. the environment: rows + tools + reward ------------------------------------------------------------------
def make_env(model: str, group_size: int, out: Path) -> tuple[grpolab.LabConfig, grpolab.Environment]:
    """The config a `config.toml` would hold (`grpolab config` prints every field), and env `data` it describes."""
    rows = out / "tasks.jsonl"
    rows.write_text("".join(json.dumps(row) + "\n" for row in task_rows()))
    overrides = {
        "model": model,
        "env": "data",
        "data": [str(rows)],
        "data_env.tools": __file__,
        "data_env.verifier": "numeric",
        "reward.weights": WEIGHTS,
        "rollout.group_size": group_size,
        "rollout.max_new_tokens": 128,  # policy tokens per episode, over all turns (tool output not counted)
        "rollout.max_turns": 2,
        "train.prompts_per_step": 2,
    }
    cfg = grpolab.load_config(None, overrides)
    env = grpolab.env_for(cfg)  # reads and checks every row: a bad one is refused naming its line and field
    env.rubric.add("unit", names_the_unit, letter="U")  # this environment's own component, weighted above
    return cfg, env


# ---- 5. the policy, and 6. seeding ------------------------------------------------------------------------------
def load_policy(cfg: grpolab.LabConfig, env: grpolab.Environment, sft_steps: int) -> tuple[Any, Any]:
    """LoRA adapters on the model; with `sft_steps`, trained first on reference transcripts and merged into the
    base, so that the frozen reference (the base with adapters off) is the model GRPO starts from."""
    policy, tokenizer, _ = build_policy(cfg)  # the reference is None with LoRA: adapters off
    if sft_steps:
        t = cfg.train
        losses = sft_warm_start(policy, tokenizer, env, sft_steps, t.sft_batch_size, t.sft_learning_rate, cfg.seed)
        print(f"seeding: SFT on reference transcripts, {sft_steps} steps, loss {losses[0]:.2f} -> {losses[-1]:.2f}")
        policy = with_lora(policy.merge_and_unload(), cfg)
    return policy, tokenizer


# ---- 7 to 11: one GRPO step -------------------------------------------------------------------------------------
@dataclass
class StepLog:
    step: int
    rewards: list[float]
    """Each episode's weighted reward, by group."""
    loss: float
    kl: float
    grad_norm: float
    update_norm: float
    """How far the optimizer step moved the trainable weights (L2 norm of the change)."""
    episodes: list[Episode] = field(repr=False, default_factory=list)

    @property
    def tool_calls(self) -> int:
        return sum(len(e.results) for e in self.episodes)


def grpo_step(
    policy: Any, tokenizer: Any, env: grpolab.Environment, cfg: grpolab.LabConfig, optimizer: Any, step: int
) -> StepLog | None:
    """One rollout, one update; None when a reward raised (the step is skipped, as the engine skips it)."""
    G, g, temperature = cfg.rollout.group_size, cfg.grpo, cfg.rollout.temperature

    # 7. rollout: P prompts x G episodes, sampled at rollout.temperature; a `</tool_call>` pauses the episode, the
    # call runs, and the response's tokens are appended with mask 0 (the model reads them, the loss never does)
    tasks = step_prompts(env.tasks("train"), cfg, step)  # the prompts `grpolab train` draws at this step
    policy.eval()
    episodes = run_episodes(policy, tokenizer, env, tasks, G, sampling_settings(cfg), step_generator(cfg, step))

    # 8. scores: every component on every transcript, its calls checked against the tool (the public scorer)
    for e in episodes:
        e.score = grpolab.score_transcript(env, e.task, e.text, cfg.reward.weights, gen_tokens=e.n_policy_tokens)
    rewards = torch.tensor([e.score.total for e in episodes]).view(len(tasks), G)  # (P, G)
    if not torch.isfinite(rewards).all():  # a reward that raised is NaN, not a silent 0: skip the step
        print(f"step {step}: skipped, a reward raised: {[e.score.errors for e in episodes if e.score.errors]}")
        return None

    # 9. advantages: (r - mean of its group) / std of its group; a group of equal rewards teaches nothing
    advantages = group_advantages(rewards, scale=g.scale_rewards)  # (P, G)

    # 10. loss, one forward per group (the prompt runs once for its G completions)
    policy.train()
    optimizer.zero_grad(set_to_none=True)
    pad = tokenizer.pad_token_id
    loss_sum = kl_sum = 0.0
    for i in range(len(tasks)):
        group = episodes[i * G : (i + 1) * G]
        prompt, completions, masks = group[0].prompt_ids, [e.completion_ids for e in group], [e.mask for e in group]
        stats, mask = group_token_stats(policy, prompt, completions, masks, pad, temperature)  # (G, K) each
        with torch.no_grad(), policy.disable_adapter():  # the reference: the frozen start
            ref_logp = group_token_stats(policy, prompt, completions, masks, pad, temperature)[0].logp
        # one update per batch (grpo.mu = 1): the policy that sampled is the one updated, so the ratio is 1 and the
        # clip does not bind yet; with mu > 1 these detached log-probs are the "old" policy of every epoch
        old_logp = stats.logp.detach()
        adv = advantages[i].to(stats.logp.device)  # (G,)
        eps_low, eps_high, budget = g.epsilon, g.epsilon_high or g.epsilon, cfg.rollout.max_new_tokens
        loss, ls = grpo_loss(stats.logp, old_logp, ref_logp, adv, mask, g.beta, eps_low, eps_high, g.loss_type, budget)
        (loss / len(tasks)).backward()  # the step's loss: the mean over its groups
        loss_sum += loss.item() / len(tasks)
        kl_sum += ls.kl / len(tasks)

    # 11. the optimizer step, gradients clipped as the engine clips them
    params = [p for p in policy.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, g.max_grad_norm))
    optimizer.step()
    moved = math.sqrt(sum(float((p.detach() - b).pow(2).sum()) for p, b in zip(params, before)))
    return StepLog(step, rewards.flatten().tolist(), loss_sum, kl_sum, grad_norm, moved, episodes)


# ---- the loop ---------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> tuple[list[StepLog], Any]:
    """Train and print one line per step; returns the steps' logs and the policy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="smollm2 (embedded), tiny (random, for tests), a path")
    parser.add_argument("--steps", type=int, default=5, help="GRPO steps")
    parser.add_argument("--group-size", type=int, default=4, help="G: episodes per prompt")
    # 5 on SmolLM2: some episodes call the tool and solve the task, others do not, so the groups' rewards differ
    parser.add_argument("--sft-steps", type=int, default=5, help="seeding steps before GRPO (0: none)")
    parser.add_argument("--out", type=Path, default=None, help="folder for the rows file (default: a temp folder)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="grpo_one_file-"))
    out.mkdir(parents=True, exist_ok=True)

    cfg, env = make_env(args.model, args.group_size, out)
    policy, tokenizer = load_policy(cfg, env, args.sft_steps)
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.grpo.learning_rate, weight_decay=0.0)
    print(f"{len(env.tasks('train'))} train tasks, G={args.group_size} x {cfg.train.prompts_per_step} prompts a step")

    logs = []
    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        log = grpo_step(policy, tokenizer, env, cfg, optimizer, step)
        if log is None:
            continue
        logs.append(log)
        mean = sum(log.rewards) / len(log.rewards)
        print(
            f"step {step}/{args.steps}  {time.perf_counter() - start:5.1f} s  reward {mean:+.2f} "
            f"[{min(log.rewards):+.2f}, {max(log.rewards):+.2f}]  tool calls {log.tool_calls}  "
            f"loss {log.loss:+.4f}  kl {log.kl:.4f}  |grad| {log.grad_norm:.3f}"
        )
    if logs:
        best = max(logs[-1].episodes, key=lambda e: e.score.total)
        print(f"best episode of the last step ({best.score.breakdown}):\n{best.text}")
    return logs, policy


if __name__ == "__main__":
    main()
