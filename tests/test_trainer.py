"""Engine tests on the tiny random model (same tokenizer and architecture as the embedded one)."""

import json
import os
import signal
import time
from types import SimpleNamespace

import pytest
import torch

from grpolab.config import load_config
from grpolab.engine import heap
from grpolab.engine.policy import build_policy
from grpolab.engine.rollout import run_episodes, sampling_settings
from grpolab.engine.sft import reference_tokens
from grpolab.engine.trainer import GRPOTrainer
from grpolab.envs import env_for
from grpolab.rewards.components import register_reward, standard_names, unregister_reward
from grpolab.rundir import RunDir
from grpolab.vocabulary import SKIP_REASON, TRAINER, produced_by, reward_key

METRIC_NAMES = {s.name for s in produced_by(TRAINER) if not s.family and s.name != SKIP_REASON} | {
    reward_key(n) for n in standard_names()
}
"""What a GRPO step that updated writes (`grpolab.vocabulary`; a skip reason only when it did not)."""

SMALL = {
    "model": "tiny",
    "rollout.group_size": 4,
    "rollout.max_new_tokens": 12,
    "train.prompts_per_step": 2,
    "train.eval_limit": 2,
    "train.eval_every": 0,
}


@pytest.fixture()
def text_length_reward():
    """A reward with variance on random text, so the tiny model gets a learning signal."""
    register_reward("text_length", lambda r, task, env, ctx: (len(r.generated_text) % 13 / 13, "test"))
    yield
    unregister_reward("text_length")


def test_one_grpo_step_changes_the_trainable_parameters(text_length_reward):
    cfg = load_config(None, {**SMALL, "reward.weights": {"text_length": 1.0, "format": 1.0}})
    model, tok, ref = build_policy(cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    m = GRPOTrainer(model, tok, env_for(cfg), cfg, ref).step(1).metrics
    assert m["adv/mean_abs"] > 0 and m["skipped"] == 0
    after = dict(model.named_parameters())
    assert any(not torch.equal(before[n], after[n]) for n in before)
    assert all(torch.equal(frozen[n], after[n]) for n in frozen)  # LoRA: the base stays put
    assert METRIC_NAMES <= set(m)


def test_equal_rewards_give_no_update():
    cfg = load_config(None, {**SMALL, "reward.weights": {"completion": 1.0}})  # the random model never succeeds
    model, tok, ref = build_policy(cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    m = GRPOTrainer(model, tok, env_for(cfg), cfg, ref).step(1).metrics
    assert m["frac_zero_std"] == 1.0 and m["adv/mean_abs"] == 0.0
    # AdamW with zero gradients and no weight decay leaves the weights where they were
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters() if p.requires_grad)


class ScriptedCache:
    def __init__(self, rows: int):
        self.pointer = [0] * rows

    def batch_repeat_interleave(self, n: int) -> None:
        self.pointer = [p for p in self.pointer for _ in range(n)]


class ScriptedLM(torch.nn.Module):
    """A stand-in policy (not a Llama: the rollout decodes it one episode at a time through `forward`) that writes a
    fixed transcript; tool-response tokens are expected as fed input."""

    def __init__(self, sequence: list[int], vocab: int):
        super().__init__()
        self.sequence, self.vocab = sequence, vocab
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=None, **_):
        if cache is None:  # prefill: nothing of the completion consumed yet
            cache = ScriptedCache(input_ids.shape[0])
        else:  # each fed token (a sampled one, or a chunk of tool response) is consumed
            cache.pointer = [p + input_ids.shape[1] for p in cache.pointer]
        logits = torch.full((input_ids.shape[0], input_ids.shape[1], self.vocab), -1e9)
        for row, p in enumerate(cache.pointer):
            logits[row, -1, self.sequence[min(p, len(self.sequence) - 1)]] = 0.0
        return SimpleNamespace(logits=logits, cache=cache)


def test_tool_output_is_spliced_with_mask_zero(finance):
    """The rollout must execute the call and feed the real response back as mask-0 tokens, token for token."""
    cfg = load_config(None, SMALL)
    _, tok, _ = build_policy(cfg)
    task = finance.task("pct_change-ACME-Q3")
    _, ids, mask = reference_tokens(tok, finance, task)  # what an ideal policy + environment produce
    model = ScriptedLM(ids, len(tok))
    episodes = run_episodes(model, tok, finance, [task], 2, sampling_settings(cfg, max_new_tokens=400))
    for e in episodes:
        assert e.turns == 2 and e.stop_reason == "eos"
        assert e.completion_ids == ids and e.mask == mask
        assert e.text.strip() == finance.reference_transcript(task).strip()
        masked = tok.decode([t for t, m in zip(e.completion_ids, e.mask) if m == 0])
        assert masked.count("<tool_response>") == 2 and "<tool_call>" not in masked
        assert all(lp == 0.0 for lp, m in zip(e.logprobs, e.mask) if m == 0)


def test_train_cli_writes_two_metric_lines(tmp_path, grpolab_process, small_config):
    out = tmp_path / "run"
    proc = grpolab_process(
        "train",
        "--env",
        "finance",
        "--model",
        "tiny",
        "--steps",
        "2",
        "--out",
        str(out),
        "--quiet",
        "--config",
        str(small_config(tmp_path)),
    )
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert METRIC_NAMES <= set(rows[0]) and "heldout/success" in rows[-1]
    assert (out / "config.json").is_file() and (out / "eval" / "2.jsonl").is_file()


def test_killed_run_resumes_without_lost_or_repeated_steps(tmp_path, grpolab_process, small_config):
    out = tmp_path / "run"
    config = small_config(tmp_path, checkpoint_every=1)
    proc = grpolab_process(
        "train", "--model", "tiny", "--steps", "6", "--out", str(out), "--quiet", "--config", str(config)
    )

    # the kill comes at a known point: once step 2's checkpoint is in place (renamed there whole), so the run is
    # past step 2 and, with steps 3 to 6 still to go, not finished
    def past_step_2() -> bool:
        return any(step >= 2 for step, _ in RunDir(out).checkpoints()) if out.is_dir() else False

    deadline = time.monotonic() + 600  # a backstop only; the wait ends on the checkpoint or the process's exit
    while proc.poll() is None and not past_step_2() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None and past_step_2(), proc.stderr.read()
    os.killpg(proc.pid, signal.SIGKILL)  # kill -9, mid-step
    proc.wait()
    killed_at = (out / "metrics.jsonl").read_text().count("\n")
    assert 2 <= killed_at < 6
    resumed = grpolab_process("train", "--resume", str(out), "--quiet")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_existing_run_dir_is_not_overwritten(tmp_path, grpolab_process):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    proc = grpolab_process("train", "--model", "tiny", "--out", str(out), "--quiet")
    assert proc.wait(timeout=120) == 2
    assert "already has a run" in proc.stderr.read()
    assert (out / "metrics.jsonl").read_text() == '{"step": 1}\n'


def test_a_run_can_start_from_another_runs_warm_start(tmp_path):
    from grpolab.run.loop import train

    base = {**SMALL, "env": "arithmetic", "train.steps": 1, "train.eval_limit": 1}
    first = train(load_config(None, {**base, "train.sft_steps": 1}), tmp_path / "a", quiet=True)
    second = train(load_config(None, {**base, "train.sft_steps": 5}), tmp_path / "b", quiet=True, warm_start=first.path)
    a, b = torch.load(first.warm_start_path), torch.load(second.warm_start_path)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not (second.path / "sft.json").exists()  # its own SFT was skipped
    assert json.loads((second.path / "config.json").read_text())["train"]["sft_steps"] == 0


@pytest.mark.skipif(heap._malloc_trim() is None, reason="glibc's malloc_trim is not in this C library")
def test_heap_trim_returns_pages_freed_between_live_blocks():
    """Holes between blocks still in use stay resident after free(); the trim between phases hands them back."""

    def resident_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    blocks = [torch.ones(16 * 1024) for _ in range(4000)]  # 64 KiB each, under glibc's mmap threshold: in the heap
    kept = blocks[1::2]
    del blocks  # every other block freed: ~125 MiB of holes the heap cannot give back on its own
    before = resident_mb()
    heap.trim()
    assert before - resident_mb() > 60
    assert float(sum(b[0] for b in kept)) == len(kept)  # the blocks still in use are untouched


def test_evaluation_decodes_in_near_equal_batches(monkeypatch, finance):
    """A short last batch costs about as many decode steps as a full one: 49 tasks go as 25 + 24, not 48 + 1."""
    import grpolab.engine.evaluate as ev

    sizes: list[int] = []
    monkeypatch.setattr(ev, "run_episodes", lambda model, tok, env, tasks, *a: sizes.append(len(tasks)) or [])
    monkeypatch.setattr(ev, "heldout_summary", lambda episodes: {})
    cfg = load_config(None, {"env": "finance"})
    for limit, expected in [(40, [40]), (48, [48]), (49, [25, 24]), (100, [34, 34, 32])]:
        sizes.clear()
        ev.evaluate(torch.nn.Linear(1, 1), None, finance, cfg, split="all", limit=limit)
        assert sizes == expected
