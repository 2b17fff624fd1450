"""Roofline profile of a GRPO step of the demo config: where the time goes, and how close each phase is to its bound.

    .venv/bin/python benchmarks/step_cost.py [--steps 3] [--sft-steps 20] [--engine exact|int8] [--model smollm2]
        [--results NAME]

Before and after a change: run it with PYTHONPATH pointing at a checkout of the old code (`--results NAME`, a file
docs/results.md does not show), then at once without; the JSON records the commit measured.

In one process: (1) this machine's roofs (`common.matmul_peaks`: the best kernel's GFLOP/s per precision, and the
read bandwidth), (2) the demo's
SFT warm start (so episodes look like the demo's: tool calls, ~130 policy tokens), (3) `--steps` GRPO steps of the
demo config (G=8 x 2 prompts, 160 new tokens), (4) one held-out evaluation. For every phase: seconds per step, its
work, the achieved GFLOP/s or GB/s, and the fraction of the measured peak. The first GRPO step is warm-up and is
not counted. Results: benchmarks/results/step_cost.json (docs/results.md via readme_table.py).

FLOPs: 2 x (non-embedding parameters) per token through the body, plus 2 x hidden x vocab per token that reaches
the LM head (the engine skips it for tool output and padding), plus attention (4 x layers x hidden x context per
token); a training token costs forward + backward with respect to activations (2 + 2 of those), plus one head
recompute. Decode is bounded by reading the weights and every live row's KV cache once per step (bytes / read
bandwidth) or by its FLOPs, whichever is larger: that maximum is the bound the decode fraction is measured against.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import torch
from common import DEMO, bandwidth, command_line, git_commit, matmul_peaks, write_results

from grpolab.config import load_config
from grpolab.engine.evaluate import evaluate
from grpolab.engine.policy import build_policy, resolve_precision
from grpolab.engine.sft import sft_warm_start
from grpolab.engine.trainer import GRPOTrainer, peak_rss_mb
from grpolab.envs import env_for


def _commit() -> str:
    """The commit of the grpolab being measured (PYTHONPATH may point at another checkout, e.g. the code before a
    change, measured right before it with this same script), "+changes" where its source differs from it; "unknown"
    outside a git checkout."""
    import grpolab

    where = Path(grpolab.__file__).resolve().parent
    sha = git_commit(where)
    if sha == "unknown":
        return sha
    dirty = subprocess.run(
        ["git", "-C", str(where), "status", "--porcelain", "--", "."], capture_output=True, text=True
    )
    return sha + ("+changes" if dirty.stdout.strip() else "")


class Shape:
    """FLOP and byte counts of the model."""

    def __init__(self, model: Any):
        lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        cfg = lm.config
        self.hidden, self.vocab, self.layers = cfg.hidden_size, cfg.vocab_size, cfg.num_hidden_layers
        embed = lm.model.embed_tokens.weight.numel()
        self.body = sum(p.numel() for n, p in lm.named_parameters() if "embed_tokens" not in n and "lm_head" not in n)
        self.head = self.hidden * self.vocab
        self.weight_bytes = (self.body + embed) * 4  # fp32; the tied head is the embedding, read once per step
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or self.hidden // cfg.num_attention_heads
        self.kv_bytes_per_token = self.layers * 2 * kv_heads * head_dim * 4  # keys and values, fp32

    def forward(self, tokens: float, head_tokens: float, context: float) -> float:
        return 2 * self.body * tokens + 2 * self.head * head_tokens + 4 * self.layers * self.hidden * context


def padding(episodes: list[Any]) -> float:
    """Share of completion positions that are padding when each group is right-padded to its longest episode (what
    the update ran before its length-sorted calls, which run none)."""
    groups: dict[int, list[int]] = {}
    for e in episodes:
        groups.setdefault(e.group, []).append(len(e.completion_ids))
    useful = sum(sum(g) for g in groups.values())
    return round(1 - useful / max(sum(len(g) * max(g) for g in groups.values()), 1), 3)


def phase_rows(
    m: dict[str, float], episodes: list[Any], shape: Shape, peak: float, bw: float, update_peak: float | None = None
) -> list[dict]:
    """One row per phase of a step: seconds, work, achieved rate, fraction of the roof (`update_peak`: the roof of
    the precision the reference and forward + backward passes run in; default `peak`, fp32's)."""

    def row(
        name: str,
        seconds: float,
        work: str,
        flops: float = 0.0,
        bytes_: float = 0.0,
        bound: float = 0.0,
        roof: float = peak,
    ):
        out: dict[str, Any] = {"phase": name, "seconds": round(seconds, 3), "work": work}
        if flops:
            out["gflops"] = round(flops / 1e9, 1)
            out["gflop_s"] = round(flops / max(seconds, 1e-9) / 1e9, 1)
            out["fraction_of_peak"] = round(flops / max(seconds, 1e-9) / 1e9 / roof, 3)
        if bytes_:
            out["gb_s"] = round(bytes_ / max(seconds, 1e-9) / 1e9, 2)
        if bound:
            out["bound_seconds"] = round(bound, 3)
            out["fraction_of_bound"] = round(bound / max(seconds, 1e-9), 3)
        return out

    s = lambda k: m.get(f"perf/{k}_s", 0.0)  # noqa: E731
    w = lambda k, x: m.get(f"perf/{k}_{x}", 0.0)  # noqa: E731
    rows = []
    prefill_tokens = w("prefill", "tokens")
    prompts = max(1, len({e.group for e in episodes}))
    prefill_flops = shape.forward(prefill_tokens, prompts, prefill_tokens * prefill_tokens / 2 / prompts)
    rows.append(row("prompt prefill", s("prefill"), f"{prefill_tokens:.0f} tokens", prefill_flops))
    steps, toks, ctx = w("decode", "steps"), w("decode", "tokens"), w("decode", "context")
    decode_flops = shape.forward(toks, toks, ctx)
    decode_bytes = steps * shape.weight_bytes + ctx * shape.kv_bytes_per_token  # weights once, the KV cache once
    bound = max(decode_bytes / (bw * 1e9), decode_flops / (peak * 1e9))
    work = f"{steps:.0f} steps, {toks:.0f} tokens (mean batch {toks / max(steps, 1):.1f})"
    rows.append(row("decode", s("decode"), work, decode_flops, decode_bytes, bound))
    rows.append(row("sampling + bookkeeping", s("sample") - s("tools"), f"{toks:.0f} tokens"))
    chunk = w("tool_prefill", "tokens")
    chunk_flops = shape.forward(chunk, 0, chunk * 300)
    rows.append(row("tool-response prefill", s("tool_prefill"), f"{chunk:.0f} tokens", chunk_flops))
    rows.append(row("tool execution", s("tools"), f"{w('tools', 'calls'):.0f} calls"))
    rows.append(row("KV compaction", s("compact"), f"{w('compact', 'rows'):.0f} rows left"))
    rows.append(row("reward scoring", s("score"), f"{w('score', 'episodes'):.0f} episodes"))
    prompt = sum(len(e.prompt_ids) for e in episodes) / max(len(episodes), 1)
    groups = len({e.group for e in episodes})
    body_tokens = groups * prompt + sum(len(e.completion_ids) for e in episodes)
    policy = sum(e.n_policy_tokens for e in episodes)
    ref_flops = shape.forward(body_tokens, policy, body_tokens * prompt)
    roof = update_peak or peak
    rows.append(row("reference pass", s("reference"), f"{body_tokens:.0f} tokens", ref_flops, roof=roof))
    old = "skipped (mu = 1, or the exact sampler's log-probs)" if not s("old_logprobs") else f"{body_tokens:.0f} tokens"
    rows.append(row("old-log-prob pass", s("old_logprobs"), old))
    train_flops = 2 * ref_flops + 2 * shape.head * policy  # forward + backward w.r.t. activations + head recompute
    rows.append(row("forward + backward", s("forward_backward"), f"{body_tokens:.0f} tokens", train_flops, roof=roof))
    rows.append(row("optimizer step", s("optimizer"), "LoRA parameters"))
    rows.append(row("sampler refresh", s("sampler_refresh"), ""))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--sft-steps", type=int, default=20)
    ap.add_argument("--engine", default="exact", choices=["exact", "int8"])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"], help="train.precision")
    ap.add_argument("--results", default=None, help="results file name (default step_cost[_ENGINE])")
    args = ap.parse_args()
    peaks, bw = matmul_peaks(), bandwidth()
    peak = peaks["fp32"]
    roofs = {"fp32": peak, "fp32_kernel": peaks["fp32_best"], "bf16": peaks["bf16"], "bandwidth_gbs": round(bw, 2)}
    print(json.dumps(roofs), flush=True)
    overrides = {"model": args.model, "rollout.engine": args.engine, "train.precision": args.precision}
    cfg = load_config(DEMO, overrides)
    env = env_for(cfg)
    model, tok, _ = build_policy(cfg)
    choice = resolve_precision(cfg, env, model, tok)
    cfg.train.precision = choice.chosen
    print(json.dumps({"precision": choice.as_dict()}), flush=True)
    update_peak = peaks[choice.chosen] or peak
    t = cfg.train
    sft_warm_start(
        model, tok, env, args.sft_steps, t.sft_batch_size, t.sft_learning_rate, cfg.seed, None, None, t.precision
    )
    rss = {"after_warm_start": round(peak_rss_mb())}  # ru_maxrss: the peak so far, per phase
    trainer = GRPOTrainer(model, tok, env, cfg)
    shape = Shape(model)
    steps = []
    for step in range(1, args.steps + 1):
        result = trainer.step(step)
        m = result.metrics
        rows = phase_rows(m, result.episodes, shape, peak, bw, update_peak)
        steps.append({"metrics": m, "phases": rows, "padding": padding(result.episodes)})
        rss[f"after_step_{step}"] = round(peak_rss_mb())
        print(json.dumps({"step": step, "s": round(m["perf/step_s"], 1), "success": m.get("success")}), flush=True)
    start = time.perf_counter()
    summary, _ = evaluate(model, tok, env, cfg)
    eval_s = time.perf_counter() - start
    rss["after_evaluation"] = round(peak_rss_mb())
    timed = steps[1:] or steps
    phases = []
    for i, first in enumerate(timed[0]["phases"]):
        merged = dict(first)
        for key in ("seconds", "gflop_s", "fraction_of_peak", "gb_s", "fraction_of_bound", "bound_seconds"):
            if key in first:
                merged[key] = round(sum(s["phases"][i][key] for s in timed) / len(timed), 3)
        phases.append(merged)
    evaluation = {"phase": "held-out evaluation", "seconds": round(eval_s, 2), "work": f"{cfg.train.eval_limit} tasks"}
    phases.append(evaluation)
    step_s = sum(s["metrics"]["perf/step_s"] for s in timed) / len(timed)
    total = lambda key: sum(s["metrics"].get(f"perf/{key}", 0.0) for s in timed)  # noqa: E731
    per_unit = {  # runs sample different episodes: compare these, not seconds per step
        "decode_ms_per_token": round(1000 * total("decode_s") / max(total("decode_tokens"), 1), 2),
        "update_ms_per_policy_token": round(
            1000 * (total("reference_s") + total("forward_backward_s")) / max(total("forward_backward_tokens"), 1), 2
        ),
    }
    result = {
        "model": args.model,
        "engine": args.engine,
        "config": "src/grpolab/configs/demo.toml",
        "matmul_gflops_fp32": round(peak, 1),
        "matmul_peak_kernel_fp32": peaks["fp32_best"],
        "matmul_gflops_bf16": peaks["bf16"],
        "matmul_kernels": peaks["kernels"],
        "precision": choice.as_dict(),
        "bandwidth_gbs": round(bw, 2),
        "s_per_step": round(step_s, 1),
        "per_unit": per_unit,
        "group_padding_per_step": [s["padding"] for s in steps],
        "steps_timed": len(timed),
        "phases": phases,
        "peak_rss_mb": round(peak_rss_mb()),
        "peak_rss_mb_by_phase": rss,
        "heldout_success_after": summary["heldout/success"],
        "threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d"),
        "commit": _commit(),
        "command": command_line("step_cost.py", args),
    }
    write_results(args.results or ("step_cost" if args.engine == "exact" else f"step_cost_{args.engine}"), result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
