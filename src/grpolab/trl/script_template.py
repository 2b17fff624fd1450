#!/usr/bin/env python
"""Source of the exported TRL script: `grpolab export-trl` fills the lines marked `@lab: NAME`."""  # @lab: docstring

import base64
import hashlib
import os
import sys
import tempfile

import torch

_GRPOLAB_ZIP: str | None = None  # @lab: bundle
"""With --standalone: grpolab's own source as a base64 zip, so the script needs no grpolab install."""


def _import_bundled_grpolab(zipped: str) -> None:
    """Write the bundled zip once to a temp file named by its hash, and import grpolab from it (zipimport)."""
    data = base64.b64decode("".join(zipped.split()))
    path = os.path.join(tempfile.gettempdir(), f"grpolab-{hashlib.sha256(data).hexdigest()[:16]}.zip")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    sys.path.insert(0, path)


if _GRPOLAB_ZIP:
    _import_bundled_grpolab(_GRPOLAB_ZIP)

from datasets import Dataset  # noqa: E402
from peft import LoraConfig  # noqa: E402
from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer  # noqa: E402

from grpolab.config import LabConfig  # noqa: E402
from grpolab.envs import env_for  # noqa: E402
from grpolab.models import load_model  # noqa: E402
from grpolab.rewards.functions import import_config_code  # noqa: E402
from grpolab.trl.backend import LabRollout, prompt_rows, reward_functions, sft_rows  # noqa: E402
from grpolab.trl.settings import bf16_here, micro_batch, sft_bf16_here  # noqa: E402

# Lab settings TRL cannot express (also printed by `grpolab export-trl`):  # @lab: unsupported

LAB_CONFIG: dict = {}  # @lab: config
"""The resolved grpolab config this script was exported from; the environment and rewards are built from it."""

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))
EPISODES_PER_STEP = 16  # @lab: episodes
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BF16 = bf16_here(LAB_CONFIG.get("train", {}).get("precision", "fp32"))  # bf16 where this machine runs it natively
SFT_BF16 = sft_bf16_here(  # the warm start's own: fp32 on a CPU under auto, where bf16 seeding learned less
    LAB_CONFIG.get("train", {}).get("sft_precision", "fp32"), LAB_CONFIG.get("train", {}).get("precision", "fp32")
)
if EPISODES_PER_STEP % WORLD_SIZE:
    sys.exit(f"{EPISODES_PER_STEP} episodes per step do not split over {WORLD_SIZE} processes: change the count")
MICRO_BATCH_CAP = 4  # @lab: micro_cap
MICRO_BATCH = micro_batch(EPISODES_PER_STEP // WORLD_SIZE, MICRO_BATCH_CAP)  # episodes per forward and backward


def training_args(output_dir: str) -> GRPOConfig:
    return GRPOConfig(
        output_dir=output_dir,  # @lab: grpo_args
    )


def peft_config() -> LoraConfig | None:
    return None  # @lab: peft


def sft_args(output_dir: str) -> SFTConfig:
    return SFTConfig(
        output_dir=output_dir,
        max_steps=0,  # @lab: sft_steps
        learning_rate=5e-4,  # @lab: sft_learning_rate
        per_device_train_batch_size=max(1, 4 // WORLD_SIZE),  # @lab: sft_batch
        lr_scheduler_type="constant",  # as the native warm start
        weight_decay=0.0,
        max_grad_norm=1.0,
        completion_only_loss=True,  # loss on the assistant's own tokens only: tool responses are masked
        bf16=SFT_BF16,
        use_cpu=DEVICE == "cpu",
        gradient_checkpointing=False,
        save_strategy="no",
        logging_steps=1,
        report_to="none",
        seed=0,  # @lab: seed
    )


def main() -> None:
    output_dir = sys.argv[1] if len(sys.argv) > 1 else "grpo-output"  # @lab: output_dir
    cfg = LabConfig.model_validate(LAB_CONFIG)
    import_config_code(cfg)  # the plugins and TRL reward functions of the config this script was exported from
    env = env_for(cfg)
    model, tokenizer = load_model(cfg.model, seed=cfg.seed)
    tokenizer.padding_side = "left"
    if cfg.train.sft_steps:  # warm start on the environment's reference transcripts, merged before GRPO
        sft = SFTTrainer(
            model=model,
            args=sft_args(output_dir + "/sft"),
            processing_class=tokenizer,
            train_dataset=Dataset.from_list(sft_rows(env, tokenizer, cfg)),
            peft_config=peft_config(),
        )
        sft.train()
        model = sft.accelerator.unwrap_model(sft.model)
        model = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    reward_funcs, _ = reward_functions(env, cfg)  # one per reward component, named after it
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=training_args(output_dir),
        train_dataset=Dataset.from_list(prompt_rows(env)),
        processing_class=tokenizer,
        peft_config=peft_config(),
        rollout_func=LabRollout(env, cfg, tokenizer),
    )
    trainer.train()
    trainer.save_model(output_dir + "/final")
    if trainer.accelerator.is_main_process:
        print(f"done: {trainer.state.global_step} steps on {trainer.accelerator.num_processes} process(es)")


if __name__ == "__main__":
    main()
