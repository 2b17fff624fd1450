"""The same GRPO step on the native engine (exact and int8 rollouts) and on TRL's GRPOTrainer, in one process.

    .venv/bin/python benchmarks/vs_trl.py [--group-size 4] [--max-new-tokens 256] [--rounds 3] [--model smollm2]

Same model (SmolLM2-135M-Instruct, fp32), same finance pct_change prompt per round, same G, token budget, beta,
learning rate and LoRA (r=16 on all linear layers), same lab reward functions. TRL is configured as well as a user
could on this CPU: fp32 (bf16=False), no gradient checkpointing, its own generation (`model.generate`), one
optimizer step per batch of G completions. By default every engine generates exactly `--max-new-tokens` tokens per
episode (end-of-turn suppressed until then: TRL's `min_new_tokens`, the native `SamplingSettings.min_new_tokens`),
so the steps do the same work; `--free-length` lets episodes end early. Each round runs one TRL step, then one
native exact step and one native int8 step (a TRL callback runs them between TRL steps, so all see the same machine
state); round 1 is warm-up and not counted.

FLOPs per step are estimated as 2N per generated token (decoding) + 2N per prompt token (prefill) + 6N per trained
token (policy forward and backward, reference forward), N = parameter count; the hardware limit is an fp32 matmul
measured in the same run. Writes benchmarks/results/vs_trl.json.

    .venv/bin/python benchmarks/vs_trl.py --shape demo [--rounds 4] [--config src/grpolab/configs/demo.toml]
        [--results vs_trl_demo]

The demo's own shape (issue 25): the demo config (G=8 x 2 prompts, 160 tokens, up to 2 tool turns, LoRA, beta, the
same SFT seeding) trained `--rounds` GRPO steps through the lab's run loop twice, once on the native trainer and
once on TRL's GRPOTrainer with the lab's rollout as its `rollout_func` (`train.backend = "trl"`), one after the
other, each in a process of its own (each reports its own peak RSS and matmul peak). Episodes end where they end
(multi-turn lengths cannot be forced equal), so both the time per step and the time per 1,000 generated policy
tokens are compared; step 1 is warm-up and not counted. TRL's
`step_time` covers its training_step (rollout, rewards, loss, backward) but not the optimizer step, so the ratio
slightly favours TRL. Writes benchmarks/results/vs_trl_demo.json (`--results NAME`: NAME.json, e.g. one per host
kind: vs_trl_demo_avx512_bf16 on a CPU with native bf16 dot products, whose flag the result records).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
import warnings
from pathlib import Path

import torch
from common import DEMO, matmul_peaks, write_results

from grpolab.config import load_config
from grpolab.engine.policy import build_policy
from grpolab.engine.trainer import GRPOTrainer, peak_rss_mb
from grpolab.envs import env_for
from grpolab.models import load_model
from grpolab.trl.backend import reward_functions


def demo_shape(config: Path, rounds: int) -> dict:
    """Both backends through the run loop on `config`, each in a fresh process (one after the other): seconds per
    GRPO step and per 1k policy tokens. A process of its own gives each backend a clean heap and its own peak RSS:
    run in one process, TRL's update came after the native run's freed pages and was killed at 24 GB here."""
    import subprocess
    import sys

    from grpolab.engine.precision import native_bf16

    result: dict = {}
    for backend in ("native", "trl"):
        command = [sys.executable, __file__, "--shape", "demo", "--rounds", str(rounds), "--config", str(config)]
        done = subprocess.run([*command, "--backend", backend], stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise SystemExit(
                f"the {backend} run exited with {done.returncode} (a negative code is a signal: -9 is the OOM killer)"
            )
        result[backend] = json.loads(done.stdout.strip().splitlines()[-1])[backend]
        print(json.dumps({backend: result[backend]}), flush=True)
    result["ratio_trl_over_native_per_step"] = result["trl"]["s_per_step"] / result["native"]["s_per_step"]
    result["ratio_trl_over_native_per_token"] = (
        result["trl"]["s_per_1k_completion_tokens"] / result["native"]["s_per_1k_completion_tokens"]
    )
    result["setting"] = {"config": str(config.name), "rounds": rounds, "trl_version": __import__("trl").__version__}
    result["native_bf16"] = native_bf16()  # the CPU's bf16 dot-product flag, or None (both backends train in fp32)
    result["date"] = time.strftime("%Y-%m-%d")
    named = "" if config == DEMO else f" --config {config}"
    result["command"] = f"python benchmarks/vs_trl.py --shape demo --rounds {rounds}{named}"
    return result


def demo_backend(config: Path, rounds: int, backend: str) -> dict:
    """One backend's `rounds` GRPO steps of `config` through the run loop, step 1 not counted."""
    import statistics
    import tempfile

    from grpolab.run.loop import train
    from grpolab.rundir import RunDir

    overrides = {"train.steps": rounds, "train.eval_limit": 1, "train.eval_every": 0, "train.checkpoint_every": 1000}
    peak = matmul_peaks()["fp32"]
    cfg = load_config(config, {**overrides, "train.backend": backend})
    out = Path(tempfile.mkdtemp(prefix=f"grpolab-vs-trl-{backend}-")) / "run"
    train(cfg, out, quiet=True)
    timed = RunDir(out).metrics()[1:]
    per_step = cfg.rollout.group_size * cfg.train.prompts_per_step
    seconds = [m["perf/step_s"] for m in timed]
    tokens = [m["completion_len"] * per_step for m in timed]
    return {
        "s_per_step": statistics.mean(seconds),
        "completion_tokens_per_step": statistics.mean(tokens),
        "s_per_1k_completion_tokens": 1000 * sum(seconds) / max(sum(tokens), 1),
        "steps_timed": len(timed),
        "matmul_gflops_fp32": peak,
        "peak_rss_mb": peak_rss_mb(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--free-length", action="store_true", help="let episodes stop at end of turn (lengths differ)")
    ap.add_argument("--shape", choices=("single", "demo"), default="single", help="demo: the demo config, 2 turns")
    ap.add_argument("--config", type=Path, default=DEMO, help="with --shape demo: the config both backends train")
    ap.add_argument("--results", default="vs_trl_demo", help="with --shape demo: the results file's name")
    ap.add_argument("--backend", choices=("native", "trl"), help=argparse.SUPPRESS)  # demo_shape's child processes
    args = ap.parse_args()
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    if args.shape == "demo" and args.backend:
        print(json.dumps({args.backend: demo_backend(args.config, args.rounds, args.backend)}), flush=True)
        return
    if args.shape == "demo":
        result = demo_shape(args.config, args.rounds)
        if args.results != "vs_trl_demo":
            result["command"] += f" --results {args.results}"
        write_results(args.results, result)
        print(json.dumps(result, indent=2))
        return
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig
    from trl import GRPOTrainer as TRLGRPOTrainer

    G, T = args.group_size, args.max_new_tokens
    cfg = load_config(
        None,
        {
            "model": args.model,
            "rollout.group_size": G,
            "rollout.max_new_tokens": T,
            "rollout.max_turns": 1,
            "train.prompts_per_step": 1,
            "task_kinds": ["pct_change"],
        },
    )
    env = env_for(cfg)
    peak = matmul_peaks()["fp32"]
    natives = {}
    for engine in ("exact", "int8"):
        engine_cfg = cfg.model_copy(deep=True)
        engine_cfg.rollout.engine = engine
        native_model, tok, ref = build_policy(engine_cfg)
        natives[engine] = GRPOTrainer(native_model, tok, env, engine_cfg, ref)
        if not args.free_length:  # every engine generates exactly T tokens per episode: the steps do the same work
            natives[engine].sampling = dataclasses.replace(natives[engine].sampling, min_new_tokens=T)
    native = natives["exact"]
    n_params = sum(p.numel() for p in native.model.get_base_model().parameters())
    prompt_len = len(tok.apply_chat_template(env.messages(native.train_tasks[0]), add_generation_prompt=True))

    trl_model, trl_tok = load_model(args.model, seed=cfg.seed)
    trl_tok.padding_side = "left"
    rows = [{"prompt": env.messages(t), "task_id": t.id} for t in native.train_tasks]
    funcs, weights = reward_functions(env, cfg)
    times: dict[str, list[dict]] = {"trl": [], "native": [], "native_int8": []}

    class Alternate(TrainerCallback):
        t0 = 0.0

        def on_step_begin(self, a, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            dt = time.perf_counter() - self.t0
            log = trainer._metrics["train"]
            n_comp = G * log["completions/mean_length"][-1]
            times["trl"].append({"s": dt, "completion_tokens": n_comp})
            line = {"round": state.global_step, "trl_s": round(dt, 2), "trl_tokens": n_comp}
            for engine, key in (("exact", "native"), ("int8", "native_int8")):
                m = natives[engine].step(state.global_step).metrics
                times[key].append(
                    {"s": m["perf/step_s"], "completion_tokens": G * m["completion_len"], "mismatch": m["mismatch/kl"]}
                )
                line[f"{key}_s"] = round(m["perf/step_s"], 2)
            print(json.dumps(line), flush=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        targs = GRPOConfig(
            output_dir="/tmp/grpolab-vs-trl",
            num_generations=G,
            per_device_train_batch_size=G,
            gradient_accumulation_steps=1,
            max_steps=args.rounds,
            max_completion_length=T,
            learning_rate=cfg.grpo.learning_rate,
            beta=cfg.grpo.beta,
            epsilon=cfg.grpo.epsilon,
            temperature=cfg.rollout.temperature,
            bf16=False,
            use_cpu=True,
            gradient_checkpointing=False,
            lr_scheduler_type="constant",
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            reward_weights=weights,
            seed=cfg.seed,
            remove_unused_columns=False,
            disable_tqdm=True,
            generation_kwargs=None if args.free_length else {"min_new_tokens": T},
        )
        trainer = TRLGRPOTrainer(
            model=trl_model,
            reward_funcs=funcs,
            args=targs,
            train_dataset=Dataset.from_list(rows),
            processing_class=trl_tok,
            callbacks=[Alternate()],
            peft_config=LoraConfig(
                r=cfg.lora.rank,
                lora_alpha=cfg.lora.alpha,
                lora_dropout=cfg.lora.dropout,
                target_modules=cfg.lora.target_modules,
                task_type="CAUSAL_LM",
            ),
        )
    trainer.train()

    def summary(rows: list[dict]) -> dict:
        timed = rows[1:] or rows
        s = sum(r["s"] for r in timed) / len(timed)
        comp = sum(r["completion_tokens"] for r in timed) / len(timed)
        flops = 2 * n_params * comp + 2 * n_params * prompt_len + 6 * n_params * (prompt_len * G + comp)
        return {
            "s_per_step": s,
            "completion_tokens_per_step": comp,
            "s_per_1k_completion_tokens": 1000 * s / comp,
            "step_gflop": flops / 1e9,
            "fraction_of_matmul_peak": flops / s / (peak * 1e9),
        }

    result = {
        "native": summary(times["native"]),
        "native_int8": {
            **summary(times["native_int8"]),
            "sampler_kl": sum(r["mismatch"] for r in times["native_int8"][1:]) / max(len(times["native_int8"]) - 1, 1),
        },
        "trl": summary(times["trl"]),
        "setting": {
            "model": args.model,
            "G": G,
            "max_new_tokens": T,
            "beta": cfg.grpo.beta,
            "lora_rank": cfg.lora.rank,
            "dtype": "fp32",
            "rounds_timed": args.rounds - 1,
            "equal_length": not args.free_length,
            "trl_version": __import__("trl").__version__,
        },
        "matmul_gflops_fp32": peak,
        "peak_rss_mb_all": peak_rss_mb(),
        "threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/vs_trl.py "
        + " ".join(
            f"--{k.replace('_', '-')}" + ("" if isinstance(v, bool) else f" {v}")
            for k, v in vars(args).items()
            if v is not False
        ),
    }
    result["ratio_trl_over_native_per_step"] = result["trl"]["s_per_step"] / result["native"]["s_per_step"]
    result["ratio_trl_over_native_per_token"] = (
        result["trl"]["s_per_1k_completion_tokens"] / result["native"]["s_per_1k_completion_tokens"]
    )
    result["ratio_trl_over_native_int8_per_step"] = result["trl"]["s_per_step"] / result["native_int8"]["s_per_step"]
    write_results("vs_trl", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
