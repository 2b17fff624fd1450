"""`grpolab export-trl`: a runnable TRL GRPOTrainer script for a lab config, plus accelerate configs.

The script is `script_template.py` (real Python, linted and tested like the rest) with its marked lines filled in.
Every GRPOConfig and LoraConfig value is written as a literal with the lab field it came from beside it (from
`grpolab.trl.settings`, the same mapping `train --backend trl` uses). Values that depend on the machine the script
runs on (process count, bf16, CPU) are computed there, so a script exported on a GPU box stays safe on a CPU.
"""

from __future__ import annotations

import base64
import datetime as dt
import importlib.metadata
import io
import os
import pprint
import re
import textwrap
import tomllib
import zipfile
from pathlib import Path

import grpolab
from grpolab.config import LabConfig, config_to_dict
from grpolab.envs import BUILTIN
from grpolab.errors import UserError
from grpolab.files.outputs import output_folder, output_target, write_output
from grpolab.trl.settings import (
    TRL_VERSION,
    Setting,
    grpo_settings,
    lora_settings,
    micro_batch_cap,
    trl_section_notes,
    unsupported,
)

RUNTIME = {
    "output_dir": "output_dir",
    "per_device_train_batch_size": "MICRO_BATCH",
    "gradient_accumulation_steps": "EPISODES_PER_STEP // WORLD_SIZE // MICRO_BATCH",
    "steps_per_generation": "EPISODES_PER_STEP // WORLD_SIZE // MICRO_BATCH",
    "bf16": "BF16",
    "use_cpu": 'DEVICE == "cpu"',
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
# Two CPU processes (gloo), to check the distributed path on one machine:
#   accelerate launch --config_file {name} {script}
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


TEMPLATE = Path(__file__).with_name("script_template.py")
"""The script as real, linted Python; each line ending in `# @lab: NAME` is replaced by the rendered NAME."""

_MARK = re.compile(r"^(?P<indent>[ \t]*).*#\s*@lab:\s*(?P<name>\w+)\s*$")


LINE = 120
ARG_INDENT = 8
"""Arguments sit inside `return GRPOConfig(` / `LoraConfig(`: their lines start 8 spaces in."""


def _args_lines(settings: list[Setting]) -> list[str]:
    """`name=value,  # lab field` lines; machine-dependent values stay expressions evaluated where the script runs.
    A comment that would pass the line limit goes on its own line above the argument."""
    lines = []
    for s in settings:
        arg = f"{s.name}={repr(s.value) if s.from_section else RUNTIME.get(s.name, repr(s.value))},"
        if ARG_INDENT + len(arg) + len(s.source) + 4 <= LINE:
            lines.append(f"{arg}  # {s.source}")
        else:
            lines += [f"# {s.source}", arg]
    return lines


def _comment(text: str, first: str = "# - ", rest: str = "#   ") -> list[str]:
    return textwrap.wrap(text, LINE, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)


UNBUNDLED = {("envs", "tau2"), ("envs", "verifiers_env.py")}
"""Packages and modules a standalone script leaves out: τ²-bench retail needs the tau2 package and the verifiers
adapter the verifiers package (and MCP), which the script's Needs line does not install."""


def _bundle() -> str:
    """The grpolab package source as a base64 zip (importable with zipimport; `unzip` shows the files), without
    `UNBUNDLED`."""
    root = Path(grpolab.__file__).parent
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(root.rglob("*")):
            if path.relative_to(root).parts[:2] in UNBUNDLED:
                continue
            if path.is_file() and path.suffix in {".py", ".toml", ".json", ".md"} and "__pycache__" not in path.parts:
                z.write(path, Path("grpolab") / path.relative_to(root))
    text = base64.b64encode(buf.getvalue()).decode()
    return "\n".join(text[i : i + 100] for i in range(0, len(text), 100))


def standalone_requirements(env: str = "") -> list[str]:
    """What a standalone script needs installed: grpolab's declared dependencies, its `trl` extra and the extra of
    the built-in environment `env` (`grpolab.envs.BUILTIN`), read from the pyproject.toml beside the bundled source
    (a checkout) or else grpolab's installed metadata; exact pins are kept, lower bounds dropped (pip arguments that
    need no quoting)."""
    extras = ["trl", *([BUILTIN[env].extra] if env in BUILTIN and BUILTIN[env].extra else [])]
    pyproject = Path(grpolab.__file__).parents[2] / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text()).get("project", {}) if pyproject.is_file() else {}
    if project.get("name") == "grpolab":
        declared = [*project["dependencies"], *(r for e in extras for r in project["optional-dependencies"][e])]
    else:
        requires = importlib.metadata.requires("grpolab") or []
        declared = [r for r in requires if ";" not in r or any(f'extra == "{e}"' in r for e in extras)]
    out: list[str] = []
    for req in declared:
        spec = req.split(";")[0].strip()
        name = re.match(r"[A-Za-z0-9._-]+", spec).group(0)  # type: ignore[union-attr]
        pin = re.fullmatch(r"[A-Za-z0-9._-]+==[A-Za-z0-9.*+!-]+", spec)
        arg = spec if pin else name
        if arg not in out:
            out.append(arg)
    return out


def _docstring(cfg: LabConfig, script: str, standalone: bool, default_out: str) -> list[str]:
    needs = f"trl=={TRL_VERSION} peft datasets grpolab"
    if standalone:  # the bundled grpolab's own dependencies instead of grpolab
        needs = " ".join(standalone_requirements(cfg.env))
    # a line too long for the linter continues after a backslash: one shell command as printed, one string in Python
    wrapped = textwrap.wrap(f"Needs: pip install {needs}", LINE - 2, subsequent_indent="  ", break_on_hyphens=False)
    needs_lines = [line + " \\" for line in wrapped[:-1]] + wrapped[-1:]
    return f'''"""GRPO with Hugging Face TRL {TRL_VERSION} on grpolab's `{cfg.env}` environment.

Exported by `grpolab export-trl` on {dt.date.today().isoformat()}.
One process:            python {script}
Two CPU processes:      accelerate launch --config_file accelerate_cpu2.yaml {script}
GPUs, DeepSpeed ZeRO-2: accelerate launch --config_file accelerate_zero2.yaml {script}
(also accelerate_zero3.yaml and accelerate_fsdp.yaml; set num_processes there to your GPU count)

vLLM is not used, on purpose. The rollouts come from grpolab's `LabRollout` (rollout_func): it decodes with the
policy in transformers, stops each turn at a tool call, runs the tool, splices its output into the sequence
mid-episode (env_mask 0, excluded from the loss) and goes on decoding, so that the protocol, the tool execution
and the token masks are exactly the lab's. TRL's vLLM path generates whole completions per prompt, with none of
this. Setting use_vllm=True (in the config's [trl] section) would load vLLM and sync the weights to it every step
while nothing is generated there: export-trl says so when it is set.

{chr(10).join(needs_lines)}
Arguments: [OUTPUT_DIR] (default: {default_out})
"""'''.splitlines()


def render_script(
    cfg: LabConfig, script_name: str = "train_grpo.py", standalone: bool = False, default_out: str = "grpo-output"
) -> str:
    """The runnable TRL script for `cfg`: the template with its marked lines filled in."""
    lora = lora_settings(cfg)
    peft = ["return LoraConfig(", *(f"    {line}" for line in _args_lines(lora)), ")"] if lora else None
    blocks: dict[str, list[str]] = {
        "docstring": _docstring(cfg, script_name, standalone, default_out),
        "bundle": [
            f'_GRPOLAB_ZIP: str | None = """\n{_bundle()}\n"""' if standalone else "_GRPOLAB_ZIP: str | None = None"
        ],
        "unsupported": ["# Lab settings TRL cannot express (also printed by `grpolab export-trl`):"]
        + [line for note in unsupported(cfg) or ["(none)"] for line in _comment(note)]
        + (["# The config's [trl] section, passed to GRPOConfig as written:"] if cfg.trl else [])
        + [line for note in trl_section_notes(cfg) for line in _comment(note)],
        "config": f"LAB_CONFIG: dict = {pprint.pformat(config_to_dict(cfg), width=110, sort_dicts=False)}".splitlines(),
        "episodes": [
            f"EPISODES_PER_STEP = {cfg.train.prompts_per_step * cfg.rollout.group_size}"
            "  # train.prompts_per_step x rollout.group_size"
        ],
        "micro_cap": [
            f"MICRO_BATCH_CAP = {micro_batch_cap(cfg)}"
            "  # most episodes per forward and backward (the native token budget: grpolab.trl.settings)"
        ],
        "grpo_args": _args_lines(grpo_settings(cfg, default_out)),
        "peft": peft or ["return None  # lora.enabled = false: full fine-tuning (TRL keeps a frozen reference copy)"],
        "sft_steps": [f"max_steps={cfg.train.sft_steps},  # train.sft_steps"],
        "sft_learning_rate": [f"learning_rate={cfg.train.sft_learning_rate!r},  # train.sft_learning_rate"],
        "sft_batch": [
            f"per_device_train_batch_size=max(1, {cfg.train.sft_batch_size} // WORLD_SIZE),"
            "  # train.sft_batch_size / processes"
        ],
        "seed": [f"seed={cfg.seed},  # seed"],
        "output_dir": [f"output_dir = sys.argv[1] if len(sys.argv) > 1 else {default_out!r}"],
    }
    out: list[str] = []
    for line in TEMPLATE.read_text().splitlines():
        mark = _MARK.match(line)
        if mark is None:
            out.append(line)
            continue
        indent = mark.group("indent")
        out += [f"{indent}{b}" if b else b for b in blocks[mark.group("name")]]
    return "\n".join(out) + "\n"


def export_trl(
    cfg: LabConfig,
    out: Path,
    standalone: bool = False,
    gpus: int = 8,
    accelerate_dir: Path | None = None,
    flags: tuple[str, str] = ("-o", "--accelerate-dir"),
) -> list[Path]:
    """Write the script to `out` and the accelerate configs into `accelerate_dir` (default: the folder of `out`;
    none when the script goes into a stream such as /dev/stdout and no folder is given); returns the paths written.

    Both follow the output rules of `grpolab.files.outputs.output_target` (a link or a device is written through,
    never replaced; no folder is made but `accelerate_dir` itself), checked before anything is written; `flags`
    name the options in the UserError. The script imports the config's plugins (by their recorded paths or names)
    before it reads its config; a standalone script cannot carry them and is refused."""
    if standalone and (cfg.plugins or cfg.rewards):
        raise UserError(
            f"--standalone bundles grpolab alone, not the plugins {', '.join([*cfg.plugins, *cfg.rewards])}",
            "export without --standalone (the script then imports the plugins from where they are), or install "
            "grpolab and the plugins where the script runs",
        )
    script = output_target(out, flags[0])
    if accelerate_dir is not None:
        output_folder(accelerate_dir, flags[1])
        if not os.path.lexists(accelerate_dir):
            accelerate_dir.mkdir()
    folder = accelerate_dir if accelerate_dir is not None else None if script.stream else out.parent
    companions = [output_target(folder / name, flags[1]) for name in ACCELERATE_CONFIGS] if folder else []
    write_output(script, render_script(cfg, out.name, standalone), executable=True)
    for target, (name, text) in zip(companions, ACCELERATE_CONFIGS.items()):
        write_output(target, text.format(gpus=gpus, name=name, script=out.name))
    return [out, *(t.named for t in companions)]
