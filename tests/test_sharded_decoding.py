"""Rollouts on a sharded policy: FSDP2 in two CPU processes (gloo), ZeRO-3 with a stand-in deepspeed.

Each process builds the same LoRA policy on the tiny model, records what the fast decoder and `run_episodes`
produce on it whole, shards it, and reports back: the refusal of a decoder built on shards, the decoder's log-probs
inside `full_parameters` (must equal the whole model's), a rollout (must equal the whole model's, though the two
processes decode different numbers of tokens, so a collective per token would hang), and that the parameters are
shards again afterwards and FSDP's own forward still agrees.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback
import types
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp

from grpolab.engine.decoder import FastDecoder
from grpolab.engine.gather import full_parameters, sharded_parameter
from grpolab.errors import UserError

pytestmark = pytest.mark.xdist_group("sharded_decoding")  # `ranks` (two spawned processes) once, not per worker

LAYOUTS = ["fsdp2-layers", "fsdp2-accelerate", "fsdp1"]
"""How the policy is sharded: FSDP2 units for each decoder layer and the root; FSDP2 as accelerate 1.16 cuts it (also
the tied embedding, final norm and LM head as one unit, left whole after forward); FSDP1 wrapping each decoder
layer and the root (use_orig_params, as accelerate sets it for peft)."""
TASKS = ["pct_change-ACME-Q3", "eps_surprise-ACME-Q2"]


def _policy(max_new_tokens: int) -> tuple[Any, Any, Any]:
    """(cfg, LoRA policy, tokenizer), the same in every process, with adapters that change the output."""
    from grpolab.config import load_config
    from grpolab.engine.policy import build_policy

    cfg = load_config(None, {"model": "tiny", "rollout.max_new_tokens": max_new_tokens})
    model, tok, _ = build_policy(cfg)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # peft starts B at zero
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return cfg, model.eval(), tok


def _decoded(model: Any, seq: torch.Tensor) -> torch.Tensor:
    """The fast decoder's next-token log-probs after feeding `seq` (1, n)."""
    dec = FastDecoder(model)
    kv = dec.new_cache(1)
    return torch.log_softmax(dec.logits(dec.feed(kv, seq, torch.tensor([seq.shape[1]]))), -1)[0]


def _shard(model: Any, layout: str) -> Any:
    """The model sharded across the two processes as `layout` says."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    lm = model.get_base_model()
    inner = lm.model
    if layout == "fsdp1":
        with warnings.catch_warnings():  # FSDP1 is deprecated and says so per unit
            warnings.simplefilter("ignore")
            units = ModuleWrapPolicy({type(inner.layers[0])})
            return FullyShardedDataParallel(model, auto_wrap_policy=units, device_id="cpu", use_orig_params=True)
    mesh = init_device_mesh("cpu", (2,))
    for layer in inner.layers:
        fully_shard(layer, mesh=mesh)
    if layout == "fsdp2-accelerate":
        assert lm.lm_head.weight is inner.embed_tokens.weight  # tied, as in SmolLM2
        fully_shard([inner.norm, inner.embed_tokens, lm.lm_head], mesh=mesh, reshard_after_forward=False)
    return fully_shard(model, mesh=mesh)


def _rank_results(rank: int) -> dict[str, Any]:
    """What this process sees: the whole policy's outputs, then each layout's on a fresh copy of it."""
    from torch.distributed.tensor import DTensor

    from grpolab.engine.rollout import run_episodes, sampling_settings
    from grpolab.engine.sft import reference_tokens
    from grpolab.envs import get_env

    new_tokens = 6 + 10 * rank  # the processes decode different numbers of tokens
    env = get_env("finance")
    tasks = [env.task(t) for t in TASKS[: 1 + rank]]
    cfg, model, tok = _policy(new_tokens)
    prompt, completion, _ = reference_tokens(tok, env, tasks[0])
    seq = torch.tensor([prompt + completion])

    def rollout(model: Any) -> list[tuple[list[int], list[float]]]:
        episodes = run_episodes(model, tok, env, tasks, 2, sampling_settings(cfg, greedy=True))
        return [(e.completion_ids, e.logprobs) for e in episodes]

    @torch.no_grad()
    def forward(model: Any) -> torch.Tensor:
        return model(input_ids=seq).logits[0, -1].float()

    results: dict[str, Any] = {"whole": {"decoded": _decoded(model, seq), "rollout": rollout(model)}}
    results["whole"]["forward"] = forward(model)
    for layout in LAYOUTS:
        model = _shard(_policy(new_tokens)[1], layout)
        r: dict[str, Any] = {"sharded": sharded_parameter(model), "refusal": None}
        try:
            FastDecoder(model)
        except UserError as exc:
            r["refusal"] = str(exc)
        with full_parameters(model):
            r["inside"] = sharded_parameter(model)
            r["decoded"] = _decoded(model, seq)
        r["rollout"] = rollout(model)
        r["after"] = sharded_parameter(model)
        r["dtensors"] = [isinstance(p, DTensor) for p in model.parameters()]
        r["forward"] = forward(model)  # FSDP's own forward still works after the rollout
        results[layout] = r
    return results


def _rank(rank: int, port: int, out_dir: str) -> None:
    """One process of the pair: its results, or its traceback, go to out_dir/rank{rank}.pt."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=60))
    try:
        result: dict[str, Any] = _rank_results(rank)
    except BaseException:
        result = {"error": traceback.format_exc()}
    finally:
        dist.destroy_process_group()
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict[str, Any]]:
    """Both processes' results (one pair of processes for every layout: starting them is most of the cost)."""
    out = tmp_path_factory.mktemp("ranks")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # forked from this worker, which imported torch and grpolab already: spawned, each process imported them afresh
    # (the fixture took 15.9 s spawned, 9.3 s forked; each sets torch to one thread and starts its own gloo group)
    mp.start_processes(_rank, args=(port, str(out)), nprocs=2, start_method="fork")
    results = [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(2)]
    for r in results:
        assert "error" not in r, r.get("error")
    return results


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rollouts_on_a_sharded_policy_decode_the_whole_model(ranks, layout):
    longest = [max(len(ids) for ids, _ in r["whole"]["rollout"]) for r in ranks]
    assert longest[0] < longest[1]  # so a collective inside decoding would have hung
    for rank, r in enumerate(ranks):
        whole, got = r["whole"], r[layout]
        assert got["sharded"] and got["refusal"] and repr(got["sharded"]) in got["refusal"]
        assert "full_parameters" in got["refusal"]
        assert got["inside"] is None
        assert torch.allclose(got["decoded"], whole["decoded"], atol=1e-5)
        assert len(got["rollout"]) == len(whole["rollout"]) == 2 * (1 + rank)
        for (ids, logp), (want_ids, want_logp) in zip(got["rollout"], whole["rollout"]):
            assert ids == want_ids
            assert max(abs(a - b) for a, b in zip(logp, want_logp)) < 1e-5
        assert got["after"] is not None  # sharded again
        assert all(got["dtensors"]) if layout.startswith("fsdp2") else not any(got["dtensors"])
        assert torch.allclose(got["forward"], whole["forward"], atol=1e-5)


class _GatheredParameters:
    """Stand-in for `deepspeed.zero.GatheredParameters`: marks its parameters whole while entered."""

    entered: list[list[Any]] = []

    def __init__(self, params: list[Any]):
        self.params = list(params)

    def __enter__(self) -> None:
        _GatheredParameters.entered.append(self.params)
        for p in self.params:
            p.ds_status = types.SimpleNamespace(name="AVAILABLE")

    def __exit__(self, *exc: Any) -> None:
        for p in self.params:
            p.ds_status = types.SimpleNamespace(name="NOT_AVAILABLE")


def test_zero3_parameters_are_gathered_through_deepspeed(monkeypatch):
    deepspeed = types.SimpleNamespace(zero=types.SimpleNamespace(GatheredParameters=_GatheredParameters))
    monkeypatch.setitem(sys.modules, "deepspeed", deepspeed)
    monkeypatch.setattr(_GatheredParameters, "entered", [])
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    for i, p in enumerate(model.parameters()):
        p.ds_id = i
        p.ds_status = types.SimpleNamespace(name="NOT_AVAILABLE")
    assert sharded_parameter(model) == "0.weight"
    with full_parameters(model):
        assert sharded_parameter(model) is None
    assert _GatheredParameters.entered == [list(model.parameters())]
    assert sharded_parameter(model) == "0.weight"


def test_zero3_parameters_without_deepspeed_are_a_user_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import deepspeed raises ImportError
    model = torch.nn.Linear(2, 2)
    model.weight.ds_id = 0
    with pytest.raises(UserError, match="deepspeed"):
        with full_parameters(model):
            pass


def test_an_unsharded_model_passes_through_untouched():
    model = torch.nn.Linear(2, 2)
    before = [(p, p.data_ptr()) for p in model.parameters()]
    assert sharded_parameter(model) is None
    with full_parameters(model):
        assert [(p, p.data_ptr()) for p in model.parameters()] == before
    assert [(p, p.data_ptr()) for p in model.parameters()] == before
