"""How far an int8 rollout copy samples from the fp32 policy it stands for: the dynamic W8A8 copy (`rollout.engine =
"int8"`) against weight-only int8, per token, on the demo's prompts.

    .venv/bin/python benchmarks/int8_mismatch.py [--sft-steps 10] [--steps 2] [--model smollm2]

The demo's policy after its SFT warm start samples the groups of `--steps` GRPO steps (the demo's prompts, G,
temperature and budget) from each copy; the fp32 policy then scores the same tokens through the training forward
(`group_token_stats`). Per copy, over policy tokens: the k3 estimate of KL(sampler || policy) and the fraction of
token ratios pi_policy / pi_sampler outside [0.9, 1.1], the figures a run logs as mismatch/kl and mismatch/ratio_out.
Copies:
- exact: the policy itself (the control: the rollout's fused decoder against the training forward, fp32 rounding);
- w8a8: the lab's int8 engine (`grpolab.engine.sampler.Int8Sampler`: int8 weights per output channel, activations
  quantised to int8 per call);
- w8-only: int8 weights per output channel with the same scales, fp32 activations. This CPU has no fast kernel for
  it (`torch._weight_int8pack_mm` ran 25x slower than the fp32 matmul here), so the copy holds the dequantised
  weights in fp32: the numbers such a kernel computes, at fp32 speed. Its figures say whether the W8A8 copy's
  mismatch comes from the weights or from the activations.
No timings (the W8A8 copy's speed is vs_trl.py's int8 row; w8-only has no fast kernel here). Results:
benchmarks/results/int8_mismatch.json.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import time
from typing import Any

import torch
from common import DEMO, command_line, write_results
from torch import nn

from grpolab.config import load_config
from grpolab.engine.grpo import sampler_mismatch
from grpolab.engine.logprobs import group_token_stats
from grpolab.engine.policy import build_policy
from grpolab.engine.rollout import run_episodes, sampling_settings
from grpolab.engine.sampler import Int8Sampler, full_range_is_exact, is_adapter
from grpolab.engine.sft import sft_warm_start
from grpolab.engine.trainer import sampler_logp, step_generator, step_prompts
from grpolab.envs import env_for


def weight_only_int8(policy: Any) -> Any:
    """A copy of the policy whose base linear weights are rounded to int8 per output channel (symmetric, scale =
    max |w| / 127, as `int8_packed`'s, here in fp32: about 4 elements in 10^5 round to the neighbouring step) and
    held dequantised in fp32; adapters, norms and the embedding stay fp32."""
    model = copy.deepcopy(policy).eval()
    with torch.no_grad():
        for name, module in model.named_modules():
            if type(module) is nn.Linear and not is_adapter(name):
                w = module.weight.detach().float()
                scale = (w.abs().amax(dim=1, keepdim=True) / 127).clamp(min=1e-12)
                # a new parameter: the head is tied to the embedding, which stays fp32
                module.weight = nn.Parameter((w / scale).round().clamp(-127, 127) * scale, requires_grad=False)
    return model


@torch.no_grad()
def activation_outliers(model: Any, tokenizer: Any, text: str) -> dict[str, Any]:
    """Per linear layer of the base model, its input's largest channel peak over the median channel's peak on one
    text (what one dynamic-quantisation scale per call has to span): the largest and the median over layers."""
    ratios: dict[str, float] = {}

    def hook(name: str) -> Any:
        def record(module: Any, inputs: tuple[torch.Tensor, ...]) -> None:
            peaks = inputs[0].reshape(-1, inputs[0].shape[-1]).abs().amax(0)
            ratios[name] = float(peaks.max() / peaks.median())

        return record

    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    handles = [m.register_forward_pre_hook(hook(n)) for n, m in lm.named_modules() if type(m) is nn.Linear]
    with model.disable_adapter() if hasattr(model, "disable_adapter") else contextlib.nullcontext():
        lm(input_ids=tokenizer(text, return_tensors="pt").input_ids)
    for h in handles:
        h.remove()
    worst = max(ratios, key=ratios.__getitem__)
    return {
        "worst_layer": worst,
        "worst_ratio": round(ratios[worst]),
        "median_ratio": round(sorted(ratios.values())[len(ratios) // 2], 1),
    }


@torch.no_grad()
def mismatch(policy: Any, episodes: list[Any], group_size: int, pad: int, temperature: float) -> dict[str, float]:
    """Token-weighted k3 KL(sampler || policy) and ratio-out fraction over the episodes' policy tokens."""
    kl = out = tokens = 0.0
    for g in range(0, len(episodes), group_size):
        group = episodes[g : g + group_size]
        stats, mask = group_token_stats(
            policy,
            group[0].prompt_ids,
            [e.completion_ids for e in group],
            [e.mask for e in group],
            pad,
            temperature,
            with_entropy=False,
        )
        n = float(mask.sum())
        k3, outside = sampler_mismatch(stats.logp, sampler_logp(group, stats.logp), mask)
        kl, out, tokens = kl + k3 * n, out + outside * n, tokens + n
    return {"k3_per_token": kl / max(tokens, 1), "ratio_out": out / max(tokens, 1), "policy_tokens": tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sft-steps", type=int, default=10)
    ap.add_argument("--steps", type=int, default=2, help="GRPO steps' worth of groups sampled from each copy")
    ap.add_argument("--model", default="smollm2")
    args = ap.parse_args()
    cfg = load_config(DEMO, {"model": args.model})
    env = env_for(cfg)
    policy, tok, _ = build_policy(cfg)
    outliers = activation_outliers(policy, tok, env.tasks("train")[0].prompt)
    t = cfg.train
    sft_warm_start(policy, tok, env, args.sft_steps, t.sft_batch_size, t.sft_learning_rate, cfg.seed)
    policy.eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    sampling = sampling_settings(cfg)
    G = cfg.rollout.group_size
    tasks = env.tasks("train")
    copies = {
        "exact": lambda: policy,
        "w8a8": lambda: Int8Sampler(policy).model,
        "w8-only": lambda: weight_only_int8(policy),
    }
    rows: dict[str, dict[str, Any]] = {}
    for name, build in copies.items():
        model = build()
        episodes = []
        for step in range(1, args.steps + 1):
            prompts = step_prompts(tasks, cfg, step)
            episodes += run_episodes(model, tok, env, prompts, G, sampling, step_generator(cfg, step))
        row = mismatch(policy, episodes, G, pad, cfg.rollout.temperature)
        rows[name] = {k: float(f"{v:.3g}") for k, v in row.items()}
        print(json.dumps({name: rows[name]}), flush=True)
        del model
    result = {
        "model": args.model,
        "config": "src/grpolab/configs/demo.toml",
        "sft_steps": args.sft_steps,
        "episodes_per_copy": args.steps * cfg.train.prompts_per_step * G,
        "copies": rows,
        "activation_outliers": outliers,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "w8a8_full_activation_range": full_range_is_exact(),  # False: 7-bit activations (a CPU without VNNI)
        "date": time.strftime("%Y-%m-%d"),
        "command": command_line("int8_mismatch.py", args),
    }
    write_results("int8_mismatch", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
