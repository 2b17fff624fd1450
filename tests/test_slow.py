"""Slow tests on the embedded SmolLM2-135M-Instruct: `pytest -m slow` (minutes; not part of `make test`)."""

import pytest
import torch

pytestmark = pytest.mark.slow


def test_cached_fp32_weights_match_the_gguf(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    from grpolab.models import embedded_gguf, load_model

    monkeypatch.setenv("GRPOLAB_CACHE", str(tmp_path))
    cached, tok = load_model("smollm2")  # first load: dequantise + cache
    gguf = embedded_gguf()
    direct = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(cached(ids).logits, direct(ids).logits, atol=1e-4)
    assert cached.dtype == torch.float32


def test_base_model_rarely_calls_tools(finance):
    """A measured fact the demo is designed around: the base model writes free text, not the protocol."""
    from grpolab.config import load_config
    from grpolab.engine.evaluate import evaluate
    from grpolab.models import load_model

    cfg = load_config(None, {"model": "smollm2", "task_kinds": ["pct_change"]})
    model, tok = load_model("smollm2")
    summary, _ = evaluate(model, tok, finance, cfg, "heldout", 4)
    assert summary["heldout/success"] == 0.0
