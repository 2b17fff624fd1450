"""Write a merged Llama model as a GGUF file that loads back through transformers' `gguf_file=` (and llama.cpp).

What a GGUF holds and how it is written here:
- architecture key-values (`llama.*`): from the model's config, with the `gguf` package's writer helpers;
- tensors: renamed to llama.cpp names with `gguf.TensorNameMap` (the map transformers reverses on load), Q and K
  rows permuted the way llama.cpp's convert_hf_to_gguf.py does (transformers un-permutes them on load);
- tokenizer key-values (`tokenizer.ggml.*`): copied from the embedded SmolLM2 GGUF, the one file that carries them.

Departure: we do not build tokenizer metadata from a Hugging Face tokenizer. That is llama.cpp's job
(convert_hf_to_gguf.py) and differs per tokenizer family; here a run whose tokenizer is not byte-for-byte the
embedded SmolLM2 one (vocabulary and merges), or whose model is not a plain Llama, is refused with a UserError
naming that route. Every base grpolab ships (`smollm2`, `tiny`) qualifies.

Tensor types: F32 (default, the exact weights) or F16 (half the size; 1-D norm weights stay F32, as in llama.cpp).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from grpolab.errors import UserError
from grpolab.models import embedded_gguf

GGUFType = Literal["f32", "f16"]
GGUF_TYPES: tuple[GGUFType, ...] = ("f32", "f16")
CONVERT_HINT = "export without --gguf and convert the folder with llama.cpp's convert_hf_to_gguf.py"


@dataclass
class GGUFInfo:
    path: Path
    tensor_type: GGUFType
    n_tensors: int
    bytes: int


def permute_qk(weight: np.ndarray, n_head: int, n_head_kv: int) -> np.ndarray:
    """llama.cpp's Q/K row order (rotary halves interleaved per head); transformers' LlamaTensorProcessor undoes it."""
    if n_head_kv != n_head:
        n_head = n_head_kv
    return (
        weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


@lru_cache(maxsize=1)
def _embedded_tokenizer_fields() -> dict[str, tuple[Any, list[Any]]]:
    """`tokenizer.*` key-values of the embedded GGUF as {key: (python value, gguf value types)}."""
    import gguf  # only when a GGUF is written or read, not at CLI start-up

    reader = gguf.GGUFReader(embedded_gguf())
    return {k: (f.contents(), list(f.types)) for k, f in reader.fields.items() if k.startswith("tokenizer.")}


def tokenizer_problem(tokenizer: Any) -> str | None:
    """Why this tokenizer's GGUF metadata cannot be the embedded SmolLM2 one's, or None when it can."""
    fields = _embedded_tokenizer_fields()
    tokens = fields["tokenizer.ggml.tokens"][0]
    if len(tokenizer) != len(tokens) or tokenizer.convert_ids_to_tokens(list(range(len(tokens)))) != tokens:
        return f"its tokenizer's vocabulary ({len(tokenizer)} tokens) is not the SmolLM2 one"
    backend = getattr(tokenizer, "backend_tokenizer", None)
    model = json.loads(backend.to_str())["model"] if backend is not None else {}
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    if model.get("type") != "BPE" or merges != fields["tokenizer.ggml.merges"][0]:
        return "its tokenizer's BPE merges are not the SmolLM2 ones"
    return None


def model_problem(model: Any) -> str | None:
    """Why this model cannot be written as a llama GGUF here, or None when it can."""
    config = model.config
    if config.model_type != "llama":
        return f"its architecture is {config.model_type!r}, and --gguf writes llama only"
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        return f"it uses {rope['rope_type']!r} rope scaling, which this writer does not encode"
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        return "it has attention/MLP biases, which this writer does not encode"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"its activation is {config.hidden_act!r}, llama GGUF assumes silu"
    return None


def gguf_problem(model: Any, tokenizer: Any) -> str | None:
    """Why `write_gguf` would refuse this model and tokenizer, or None (cheap: checked before any export work)."""
    return model_problem(model) or tokenizer_problem(tokenizer)


def _rope_theta(config: Any) -> float:
    rope = getattr(config, "rope_parameters", None) or {}
    return float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


def _tied(model: Any) -> bool:
    return model.get_output_embeddings().weight is model.get_input_embeddings().weight


def _add_hparams(writer: Any, config: Any) -> None:
    """The llama.* key-values transformers maps back to a LlamaConfig (GGUF_CONFIG_MAPPING["llama"])."""
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    writer.add_rope_dimension_count(head_dim)


def _add_tokenizer(writer: Any, tokenizer: Any) -> None:
    import gguf  # only when a GGUF is written or read, not at CLI start-up

    for key, (value, types) in _embedded_tokenizer_fields().items():
        if key == "tokenizer.chat_template":
            continue
        sub_type = types[1] if types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, types[0], sub_type=sub_type)
    if tokenizer.chat_template:  # the exported tokenizer's template (the embedded one unless a run changes it)
        writer.add_chat_template(tokenizer.chat_template)


def _tensors(model: Any, tensor_type: GGUFType) -> list[tuple[str, np.ndarray]]:
    """(llama.cpp name, array) for every weight, Q/K permuted; the tied output head is not written twice."""
    import gguf  # only when a GGUF is written or read, not at CLI start-up

    config = model.config
    names = gguf.TensorNameMap(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    tied = _tied(model)
    out = []
    for hf_name, tensor in model.state_dict().items():
        if tied and hf_name == "lm_head.weight":
            continue
        base, _, suffix = hf_name.rpartition(".")
        gguf_name = names.get_name(base)
        if gguf_name is None:
            raise UserError(f"cannot place tensor {hf_name} in a llama GGUF", CONVERT_HINT)
        array = tensor.detach().to("cpu", torch.float32).numpy()
        if gguf_name.endswith(".attn_q"):
            array = permute_qk(array, config.num_attention_heads, config.num_attention_heads)
        elif gguf_name.endswith(".attn_k"):
            array = permute_qk(array, config.num_attention_heads, config.num_key_value_heads)
        if tensor_type == "f16" and array.ndim > 1:
            array = array.astype(np.float16)
        out.append((f"{gguf_name}.{suffix}", np.ascontiguousarray(array)))
    return out


def write_gguf(model: Any, tokenizer: Any, path: Path, name: str, tensor_type: GGUFType = "f32") -> GGUFInfo:
    """Write `model` (a plain, merged transformers Llama) and its tokenizer to `path` as one GGUF file.

    Refuses with a UserError (before writing anything) when the model or tokenizer is not one it can encode.
    """
    import gguf  # only when a GGUF is written or read, not at CLI start-up

    if tensor_type not in GGUF_TYPES:
        raise UserError(f"unknown GGUF tensor type {tensor_type!r}", "use f32 or f16")
    problem = gguf_problem(model, tokenizer)
    if problem:
        raise UserError(f"cannot write this model as GGUF: {problem}", CONVERT_HINT)
    tensors = _tensors(model, tensor_type)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    writer = gguf.GGUFWriter(tmp, arch=gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    try:
        writer.add_name(name)
        file_type = gguf.LlamaFileType.ALL_F32 if tensor_type == "f32" else gguf.LlamaFileType.MOSTLY_F16
        writer.add_file_type(file_type)
        _add_hparams(writer, model.config)
        _add_tokenizer(writer, tokenizer)
        for tensor_name, array in tensors:
            writer.add_tensor(tensor_name, array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    except BaseException:
        tmp.unlink(missing_ok=True)  # never leave half a file behind
        raise
    finally:
        writer.close()
    os.replace(tmp, path)
    return GGUFInfo(path=path, tensor_type=tensor_type, n_tensors=len(tensors), bytes=path.stat().st_size)
