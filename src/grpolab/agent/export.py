"""Take a trained agent out of its run directory: merged weights as a plain transformers model folder (+ GGUF).

The folder holds what `AutoModelForCausalLM.from_pretrained(DIR)` and `AutoTokenizer.from_pretrained(DIR)` need
(config, safetensors, tokenizer with its chat template, a greedy generation config), plus `grpolab.json` (where it
came from and the run's resolved config, so `grpolab chat --model DIR` can rebuild the same prompt) and a short
README.md model card.

Departures:
- Weights are written in fp32, the dtype the run trained and evaluated in on CPU: any narrower dtype changes
  greedy decoding, and "same held-out results as the run" is the promise. GGUF can be F16 (see `agent.gguf`).
- The GGUF goes in its own subfolder (`gguf/`): transformers' `gguf_file=` loader, pointed at a folder that also
  holds Hugging Face tokenizer files, comes back without the chat template (seen with transformers 5.24).
- The folder is built in a temporary sibling and renamed into place, so a failed export leaves nothing behind; an
  existing non-empty --out is never touched.
- `generate()` alone is not the agent: it cannot execute tools. The generation config stops at the end of turn,
  and the model card says to stop at `</tool_call>` and splice the tool response (`grpolab.agent.chat` does).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from grpolab.agent.gguf import CONVERT_HINT, GGUF_TYPES, GGUFType, gguf_problem, write_gguf
from grpolab.config import LabConfig, as_recorded, config_to_dict
from grpolab.engine.evaluate import evaluate
from grpolab.engine.policy import load_run_policy
from grpolab.envs import env_for
from grpolab.envs.base import question_task
from grpolab.errors import UserError
from grpolab.files.json_files import read_json
from grpolab.files.outputs import output_folder
from grpolab.formats import stop_token_ids, thought_tag_of
from grpolab.metrics import heldout_summary
from grpolab.vocabulary import HELDOUT_SUCCESS

MANIFEST = "grpolab.json"
GGUF_DIR = "gguf"


@dataclass
class HeldoutCheck:
    """Greedy held-out episodes of the run's policy and of the exported folder, compared row by row."""

    n: int
    identical: int
    run_success: float
    export_success: float
    differing: list[str] = field(default_factory=list)
    """Task ids whose transcripts differ."""
    seconds: float = 0.0
    """Both evaluations and the reload."""

    @property
    def same(self) -> bool:
        return self.identical == self.n


@dataclass
class ExportResult:
    out: Path
    step: int
    seconds: float
    """The export itself (load, merge, write), not the --check evaluations."""
    folder_bytes: int
    gguf: Path | None = None
    gguf_bytes: int = 0
    gguf_type: str | None = None
    check: HeldoutCheck | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["out"], data["gguf"] = str(self.out), str(self.gguf) if self.gguf else None
        return data


def merged_model(policy: Any) -> Any:
    """The plain transformers model: LoRA adapters merged into the base weights (a full fine-tune is already one)."""
    model = policy.merge_and_unload() if hasattr(policy, "merge_and_unload") else policy
    return model.eval()


def stop_ids(tokenizer: Any) -> list[int]:
    return sorted(stop_token_ids(tokenizer))


def check_out_dir(out: Path) -> None:
    """An export never overwrites: --out must not exist, or be an empty folder; the folder above it must exist."""
    output_folder(out, "--out")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file", "pick a new --out directory (nothing is overwritten)")
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} already exists and is not empty", "pick a new --out directory (nothing is overwritten)")


def _generation_config(tokenizer: Any, cfg: LabConfig) -> Any:
    from transformers import GenerationConfig  # heavy: transformers' generation classes load only on export

    # greedy, as the lab evaluates; end of turn (<|im_end|>) or end of text stops, as in the rollout
    return GenerationConfig(
        do_sample=False,
        max_new_tokens=cfg.rollout.max_new_tokens,
        eos_token_id=stop_ids(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )


def _manifest(run: Path, step: int, cfg: LabConfig, system_prompt: str, gguf: str | None) -> dict[str, Any]:
    inline = cfg.rollout.format == "inline"
    return {
        "exported_from": str(run.resolve()),
        "step": step,
        "base_model": cfg.model,
        "env": cfg.env,
        "dtype": "float32",
        "format": cfg.rollout.format,
        "tool_syntax": None if inline else cfg.rollout.tool_syntax,
        "stop_strings": ["</tool_call>"] if inline or cfg.rollout.tool_syntax != "llama3" else [],
        "system_prompt": system_prompt,
        "gguf": gguf,
        "config": config_to_dict(cfg),
    }


_INLINE_USE = """The agent writes `<thought>...</thought>`, then
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. Stop there
(`generate(..., stop_strings=["</tool_call>"], tokenizer=tokenizer)`), run the tool, append
`<tool_response>{json}</tool_response>` to the same assistant turn and continue; the text after the last tool
response is its answer. The system prompt it was trained with (the tools and the protocol) is in `grpolab.json`."""
_TEMPLATE_USE = """It was trained in its chat template's own tool format: pass the tools to
`tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True)`, read its calls in the {syntax}
syntax, and send each result back as a `{{"role": "tool", "content": json}}` message. The system message it was
trained with is in `grpolab.json`."""


def _model_card(run: Path, step: int, cfg: LabConfig, gguf: str | None) -> str:
    gguf_part = ""
    if gguf:
        folder, name = gguf.split("/", 1)
        gguf_part = (
            f"\n`{gguf}` holds the same weights as GGUF, for llama.cpp or transformers:\n"
            f'`AutoModelForCausalLM.from_pretrained("DIR/{folder}", gguf_file="{name}")`.\n'
        )
    use = _INLINE_USE if cfg.rollout.format == "inline" else _TEMPLATE_USE.format(syntax=cfg.rollout.tool_syntax)
    return f"""# {run.name} (grpolab agent, step {step})

Trained by grpolab on the `{cfg.env}` environment, from `{cfg.model}`; LoRA merged into the weights (fp32).

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("DIR")
tokenizer = AutoTokenizer.from_pretrained("DIR")
```
{gguf_part}
{use}
`grpolab chat --model DIR` runs it with the environment's real tools.
"""


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def export_run(
    run: Path,
    out: Path,
    gguf: bool = False,
    gguf_type: GGUFType = "f32",
    check: bool = False,
    check_limit: int | None = None,
) -> ExportResult:
    """Export the run's latest checkpoint to `out` (which must not exist or be empty).

    With `check`, the run's policy and the reloaded folder are both evaluated greedily on the held-out tasks
    (`check_limit` of them, default the run's eval_limit) and their transcripts compared.
    """
    t0 = time.perf_counter()
    out = Path(os.path.realpath(out)) if out.is_symlink() else out  # a link to a folder: written through
    check_out_dir(out)
    if gguf and gguf_type not in GGUF_TYPES:
        raise UserError(f"unknown GGUF tensor type {gguf_type!r}", f"use one of: {', '.join(GGUF_TYPES)}")
    # made first, so an unwritable --out fails before minutes of loading; not mkdtemp, whose folder is private
    tmp = out.parent / f".{out.name}.export-{uuid.uuid4().hex[:12]}"
    tmp.mkdir()
    t_check, before, info = 0.0, None, None
    try:
        policy, tokenizer, cfg, step = load_run_policy(run)
        problem = gguf_problem(policy, tokenizer) if gguf else None  # before any slow work
        if problem:
            raise UserError(f"cannot write {run} as GGUF: {problem}", CONVERT_HINT)
        env = env_for(cfg)
        if check:
            t_check = time.perf_counter()
            before = evaluate(policy, tokenizer, env, cfg, limit=check_limit)[1]
            t_check = time.perf_counter() - t_check
        model = merged_model(policy)
        model.generation_config = _generation_config(tokenizer, cfg)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        gguf_path = tmp / GGUF_DIR / f"{out.name}.{gguf_type}.gguf"
        info = write_gguf(model, tokenizer, gguf_path, run.name, gguf_type) if gguf else None
        gguf_name = f"{GGUF_DIR}/{gguf_path.name}" if info else None
        env.thought_tag = thought_tag_of(tokenizer)
        system = env.system_prompt() if cfg.rollout.format == "inline" else env.chat_instructions(question_task(""))
        (tmp / MANIFEST).write_text(json.dumps(_manifest(run, step, cfg, system, gguf_name), indent=2))
        (tmp / "README.md").write_text(_model_card(run, step, cfg, gguf_name))
        if out.exists():
            out.rmdir()  # empty (checked above)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = ExportResult(out=out, step=step, seconds=0.0, folder_bytes=folder_bytes(out))
    if info is not None:
        result.gguf, result.gguf_bytes, result.gguf_type = out / GGUF_DIR / info.path.name, info.bytes, info.tensor_type
        result.folder_bytes -= info.bytes
    result.seconds = time.perf_counter() - t0 - t_check
    if before is not None:
        result.check = compare_heldout(before, out, env, cfg, check_limit)
        result.check.seconds += t_check
    return result


def load_exported(path: Path, gguf_file: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) of an exported folder with plain transformers, as any user would load it.

    With `gguf_file` (a path relative to `path`, e.g. "gguf/NAME.f32.gguf") the GGUF is loaded instead."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy: only when an export is loaded

    kwargs: dict[str, Any] = {}
    if gguf_file:
        gguf = path / gguf_file
        path, kwargs = gguf.parent, {"gguf_file": gguf.name}
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, **kwargs).eval()
    return model, AutoTokenizer.from_pretrained(str(path), **kwargs)


def compare_heldout(
    run_episodes: list[Any], out: Path, env: Any, cfg: LabConfig, limit: int | None = None
) -> HeldoutCheck:
    """Evaluate the exported folder greedily and compare it with the run policy's held-out episodes."""
    t0 = time.perf_counter()
    model, tokenizer = load_exported(out)
    summary, episodes = evaluate(model, tokenizer, env, cfg, limit=limit)
    pairs = list(zip(run_episodes, episodes, strict=True))
    differing = [a.task.id for a, b in pairs if a.task.id != b.task.id or a.text != b.text]
    return HeldoutCheck(
        n=len(pairs),
        identical=len(pairs) - len(differing),
        run_success=heldout_summary(run_episodes)[HELDOUT_SUCCESS],
        export_success=summary[HELDOUT_SUCCESS],
        differing=differing,
        seconds=time.perf_counter() - t0,
    )


def exported_config(path: Path) -> LabConfig | None:
    """The run config recorded in an exported folder (model pointed at the folder), or None for other folders."""
    manifest = path / MANIFEST
    if not manifest.is_file():
        return None
    problems: list[str] = []
    data = read_json(manifest, problems)  # within grpolab.files.limits (size, nesting)
    if problems:
        raise UserError(f"{manifest}: {problems[0]}", "re-export the run")
    try:
        return LabConfig.model_validate(as_recorded({**data["config"], "model": str(path)}))
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{manifest} is not a grpolab export manifest ({exc})", "re-export the run") from None
