"""`grpolab export-trl`: a runnable TRL GRPOTrainer script for a lab config, plus accelerate configs.

Every GRPOConfig and LoraConfig value is written as a literal with the lab field it came from beside it (from
`trl_backend.grpo_settings`, the same mapping `train --backend trl` uses). Values that depend on the machine the
script runs on (process count, bf16, CPU) are computed there, so a script exported on a GPU box stays safe on a CPU.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import pprint
import zipfile
from pathlib import Path

import grpolab
from grpolab.config import LabConfig, config_to_dict
from grpolab.trl.backend import TRL_VERSION, grpo_settings, lora_settings, unsupported

RUNTIME = {
    "output_dir": "output_dir",
    "per_device_train_batch_size": "EPISODES_PER_STEP // WORLD_SIZE",
    "bf16": "BF16",
    "use_cpu": "not torch.cuda.is_available()",
}
"""Arguments whose value is decided where the script runs (expression instead of a literal)."""

_GPU_LAUNCH = """\
mixed_precision: bf16
num_machines: 1
num_processes: {gpus}
machine_rank: 0
main_training_function: main
rdzv_backend: static
same_network: true
use_cpu: false
"""
"""The launch settings every GPU config shares (bf16 mixed precision on one machine with {gpus} processes)."""

ACCELERATE_CONFIGS = {
    "accelerate_zero2.yaml": """\
# DeepSpeed ZeRO-2 on one machine with {gpus} GPUs: accelerate launch --config_file {name} {script}
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  deepspeed_multinode_launcher: standard
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: false
  zero_stage: 2
"""
    + _GPU_LAUNCH,
    "accelerate_zero3.yaml": """\
# DeepSpeed ZeRO-3 (parameters sharded too) with {gpus} GPUs: accelerate launch --config_file {name} {script}
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  deepspeed_multinode_launcher: standard
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: true
  zero3_save_16bit_model: true
  zero_stage: 3
"""
    + _GPU_LAUNCH,
    "accelerate_fsdp.yaml": """\
# FSDP2 with {gpus} GPUs: accelerate launch --config_file {name} {script}
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_cpu_ram_efficient_loading: true
  fsdp_offload_params: false
  fsdp_reshard_after_forward: true
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_activation_checkpointing: false
"""
    + _GPU_LAUNCH,
    "accelerate_cpu2.yaml": """\
# Two CPU processes (gloo), to check the distributed path on one machine: accelerate launch --config_file {name} {script}
# accelerate's MULTI_CPU type launches through mpirun; this uses its torchrun launcher instead, and the script's
# use_cpu=True (no GPU) makes each process a CPU process in a gloo process group.
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
mixed_precision: 'no'
num_machines: 1
num_processes: 2
machine_rank: 0
main_training_function: main
rdzv_backend: static
same_network: true
use_cpu: false
""",
}


def _args_block(settings: list, indent: str = "        ") -> str:
    lines = []
    for s in settings:
        value = RUNTIME.get(s.name, repr(s.value))
        lines.append(f"{indent}{s.name}={value},  # {s.source}")
    return "\n".join(lines)


def _bundle() -> str:
    """The grpolab package source as a base64 zip (importable with zipimport; `unzip` shows the files)."""
    root = Path(grpolab.__file__).parent
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.suffix in {".py", ".toml", ".json", ".md"} and "__pycache__" not in path.parts:
                z.write(path, Path("grpolab") / path.relative_to(root))
    text = base64.b64encode(buf.getvalue()).decode()
    return "\n".join(text[i : i + 100] for i in range(0, len(text), 100))


SCRIPT = '''\
#!/usr/bin/env python
"""GRPO with Hugging Face TRL {trl_version} on grpolab's `{env}` environment, exported by `grpolab export-trl` ({date}).

One process:            python {script}
Two CPU processes:      accelerate launch --config_file accelerate_cpu2.yaml {script}
GPUs, DeepSpeed ZeRO-2: accelerate launch --config_file accelerate_zero2.yaml {script}
(also accelerate_zero3.yaml and accelerate_fsdp.yaml; set num_processes there to your GPU count)

vLLM: TRL generates with vLLM when GRPOConfig(use_vllm=True, vllm_mode="colocate") is set, or with
vllm_mode="server" beside `trl vllm-serve --model MODEL`. This script's rollouts come from grpolab's `LabRollout`
(rollout_func), which decodes with the policy in transformers so that the protocol, the tool execution and the
token masks are exactly the lab's; TRL still syncs the weights to vLLM, but only `rollout_func`s that call
`trainer.vllm_generation` generate there. Tool output is returned with env_mask 0 and is excluded from the loss.

Needs: pip install trl=={trl_version} peft datasets{needs_grpolab}
Arguments: [OUTPUT_DIR] (default: {default_out})
"""

import os
import sys

import torch
{bundle_block}
from datasets import Dataset
from peft import LoraConfig
from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

from grpolab.config import LabConfig
from grpolab.envs import get_env
from grpolab.models import load_model
from grpolab.trl.backend import LabRollout, prompt_rows, reward_functions, sft_rows

# Lab settings TRL cannot express (also printed by `grpolab export-trl`):
{unsupported}

LAB_CONFIG = {config}
"""The resolved grpolab config this script was exported from; the environment and rewards are built from it."""

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL {trl_version}
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))
EPISODES_PER_STEP = {episodes}  # train.prompts_per_step x rollout.group_size
BF16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()  # never bf16 on a CPU (~400x slower matmul)
if EPISODES_PER_STEP % WORLD_SIZE:
    sys.exit(f"{{EPISODES_PER_STEP}} episodes per step do not split over {{WORLD_SIZE}} processes: change the count")


def training_args(output_dir: str) -> GRPOConfig:
    return GRPOConfig(
{grpo_args}
        reward_weights={weights!r},  # reward.weights ({reward_names})
    )


def peft_config() -> LoraConfig | None:
{peft_body}


def sft_args(output_dir: str) -> SFTConfig:
    return SFTConfig(
        output_dir=output_dir,
        max_steps={sft_steps},  # train.sft_steps
        learning_rate={sft_lr!r},  # train.sft_learning_rate
        per_device_train_batch_size=max(1, {sft_batch} // WORLD_SIZE),  # train.sft_batch_size / processes
        lr_scheduler_type="constant",  # as the native warm start
        weight_decay=0.0,
        max_grad_norm=1.0,
        completion_only_loss=True,  # loss on the assistant's own tokens only: tool responses are masked
        bf16=BF16,
        use_cpu=not torch.cuda.is_available(),
        gradient_checkpointing=False,
        save_strategy="no",
        logging_steps=1,
        report_to="none",
        seed={seed},  # seed
    )


def main() -> None:
    output_dir = sys.argv[1] if len(sys.argv) > 1 else {default_out!r}
    cfg = LabConfig.model_validate(LAB_CONFIG)
    env = get_env(cfg.env, cfg.task_kinds or None, cfg.prompt_example, cfg.data or None)
    model, tokenizer = load_model(cfg.model, seed=cfg.seed)
    tokenizer.padding_side = "left"
    if cfg.train.sft_steps:  # warm start on the environment's reference transcripts, merged before GRPO
        sft = SFTTrainer(model=model, args=sft_args(output_dir + "/sft"), processing_class=tokenizer,
                         train_dataset=Dataset.from_list(sft_rows(env, tokenizer)), peft_config=peft_config())
        sft.train()
        model = sft.accelerator.unwrap_model(sft.model)
        model = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    reward_funcs, _ = reward_functions(env, cfg)  # one per component: {reward_names}
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
        print(f"done: {{trainer.state.global_step}} steps on {{trainer.accelerator.num_processes}} process(es)")


if __name__ == "__main__":
    main()
'''

BUNDLE_BLOCK = '''
# grpolab {version} itself, zipped into this file (--standalone): extracted once to a temp file, imported from there.
_GRPOLAB_ZIP = """
{bundle}
"""


def _import_bundled_grpolab() -> None:
    import base64
    import hashlib
    import tempfile

    data = base64.b64decode("".join(_GRPOLAB_ZIP.split()))
    path = os.path.join(tempfile.gettempdir(), f"grpolab-{{hashlib.sha256(data).hexdigest()[:16]}}.zip")
    if not os.path.exists(path):
        tmp = f"{{path}}.{{os.getpid()}}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    sys.path.insert(0, path)


_import_bundled_grpolab()
'''


def render_script(cfg: LabConfig, script_name: str = "train_grpo.py", standalone: bool = False,
                  default_out: str = "grpo-output") -> str:  # fmt: skip
    settings = grpo_settings(cfg, default_out)
    lora = lora_settings(cfg)
    if lora is None:
        peft_body = "    return None  # lora.enabled = false: full fine-tuning (TRL keeps a frozen reference copy)"
    else:
        peft_body = "    return LoraConfig(\n" + _args_block(lora) + "\n    )"
    notes = unsupported(cfg) or ["(none)"]
    names = list(cfg.reward.weights)
    return SCRIPT.format(
        trl_version=TRL_VERSION,
        env=cfg.env,
        date=dt.date.today().isoformat(),
        script=script_name,
        needs_grpolab="" if standalone else " grpolab",
        default_out=default_out,
        bundle_block=BUNDLE_BLOCK.format(version=grpolab.__version__, bundle=_bundle()) if standalone else "",
        unsupported="\n".join(f"# - {n}" for n in notes),
        config=pprint.pformat(config_to_dict(cfg), width=110, sort_dicts=False),
        episodes=cfg.train.prompts_per_step * cfg.rollout.group_size,
        grpo_args=_args_block(settings),
        weights=[cfg.reward.weights[n] for n in names],
        reward_names=", ".join(names),
        peft_body=peft_body,
        sft_steps=cfg.train.sft_steps,
        sft_lr=cfg.train.sft_learning_rate,
        sft_batch=cfg.train.sft_batch_size,
        seed=cfg.seed,
    )


def export_trl(cfg: LabConfig, out: Path, standalone: bool = False, gpus: int = 8) -> list[Path]:
    """Write the script and the accelerate configs beside it; returns the paths written."""
    from grpolab.rundir import atomic_write_text

    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, render_script(cfg, out.name, standalone))
    out.chmod(0o755)
    written = [out]
    for name, text in ACCELERATE_CONFIGS.items():
        path = out.parent / name
        atomic_write_text(path, text.format(gpus=gpus, name=name, script=out.name))
        written.append(path)
    return written
