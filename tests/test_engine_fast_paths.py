"""The throughput paths give the same numbers as the plain ones: ragged batched decoding, chunked log-probs, TIS."""

import math

import pytest
import torch

from grpolab.config import load_config
from grpolab.engine import logprobs, rollout
from grpolab.engine.decoder import FastDecoder, supports
from grpolab.engine.grpo import sampler_mismatch, truncated_is_weights
from grpolab.engine.logprobs import (
    SharedPrefix,
    group_token_stats,
    length_segments,
    linear_logprobs,
    make_batch,
    token_logprobs,
)
from grpolab.engine.phases import Phases
from grpolab.engine.policy import build_policy
from grpolab.engine.sft import reference_tokens
from grpolab.engine.trainer import GRPOTrainer, sampler_logp
from grpolab.envs import env_for
from grpolab.models import build_tiny_model, load_tokenizer
from grpolab.rewards.components import register_reward, unregister_reward

TINY = {"model": "tiny", "rollout.group_size": 2, "rollout.max_new_tokens": 24, "train.prompts_per_step": 2}
ARCHITECTURES = ["tiny", "tiny-qwen3", "tiny-mistral"]
"""The tiny random models: the embedded Llama architecture, Qwen3 (q/k norms in attention) and Mistral."""


@pytest.fixture(scope="module")
def tiny():
    cfg = load_config(None, TINY)
    model, tok, _ = build_policy(cfg)
    return cfg, model, tok


@pytest.fixture(scope="module", params=ARCHITECTURES)
def tiny_arch(request):
    """(cfg, policy, tokenizer) of each tiny architecture."""
    cfg = load_config(None, {**TINY, "model": request.param})
    model, tok, _ = build_policy(cfg)
    return cfg, model, tok


def test_the_fast_decoder_drives_the_embedded_architecture(tiny_arch):
    cfg, model, _ = tiny_arch
    assert supports(model)
    expected = {"tiny": "llama", "tiny-qwen3": "qwen3", "tiny-mistral": "mistral"}[cfg.model]
    assert model.get_base_model().config.model_type == expected


def test_a_sliding_window_in_force_decodes_through_the_model(finance):
    """The ragged decoder attends to every earlier token, so a Mistral whose window is in force falls back to
    `model.forward`, and that rollout still records the policy's own log-probs."""
    tok = load_tokenizer()
    model = build_tiny_model(len(tok), architecture="mistral").eval()
    assert supports(model)
    model.config.sliding_window = 64
    assert not supports(model)
    cfg = load_config(None, {**TINY, "model": "tiny-mistral"})
    settings = rollout.sampling_settings(cfg, greedy=True)
    (e,) = rollout.run_episodes(model, tok, finance, [finance.task("pct_change-ACME-Q3")], 1, settings)
    seq = torch.tensor([e.prompt_ids + e.completion_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=seq).logits[0].float(), -1)
    n = len(e.prompt_ids)
    want = [float(logp[n + i - 1, t]) for i, t in enumerate(e.completion_ids)]
    assert len(e.logprobs) == len(want) > 0
    assert max(abs(a - b) for a, b in zip(e.logprobs, want)) < 1e-4


@pytest.mark.parametrize("direct", [True, False], ids=["direct-attention", "sdpa"])
def test_ragged_decoding_matches_the_full_forward(tiny_arch, finance, direct):
    """Rows of different lengths, a tool-response chunk fed to one row, rows leaving: every next-token
    distribution equals the plain forward over the whole sequence (1e-5), whichever attention one-token steps use."""
    _, model, tok = tiny_arch
    seqs = []
    for task_id in ("pct_change-ACME-Q3", "eps_surprise-ACME-Q2", "revenue_growth-ACME-Q1Q2"):
        prompt, completion, _ = reference_tokens(tok, finance, finance.task(task_id))
        seqs.append(prompt + completion)
    with torch.no_grad():
        full = [torch.log_softmax(model(input_ids=torch.tensor([s])).logits[0].float(), -1) for s in seqs]
    dec = FastDecoder(model, direct=direct)
    kv = dec.new_cache(3)
    pos = [100, 120, 140]
    ids = torch.zeros(3, max(pos), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : pos[i]] = torch.tensor(s[: pos[i]])
    logp = torch.log_softmax(dec.logits(dec.feed(kv, ids, torch.tensor(pos))), -1)
    errors = [float((logp[i] - full[i][pos[i] - 1]).abs().max()) for i in range(3)]
    live = [0, 1, 2]
    for step in range(1, 40):
        if step % 5 == 0 and 1 in live:  # a 17-token chunk (a tool response) for row 1 only
            chunk = torch.tensor([seqs[1][pos[1] : pos[1] + 17]])
            dec.feed(kv, chunk, torch.tensor([17]), rows=torch.tensor([live.index(1)]))
            pos[1] += 17
        last = torch.tensor([[seqs[i][pos[i]]] for i in live])
        logp = torch.log_softmax(dec.logits(dec.feed(kv, last, torch.ones(len(live), dtype=torch.long))), -1)
        for j, i in enumerate(live):
            errors.append(float((logp[j] - full[i][pos[i]]).abs().max()))
            pos[i] += 1
        if step == 20:  # row 0 finishes and leaves the batch
            kv.keep(torch.tensor([1, 2]))
            live = [1, 2]
    assert max(errors) < 1e-5 and len(errors) > 90


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_fused_rollout_weights_give_the_policy_and_the_reference(finance, name):
    """LoRA merged into fused q/k/v and gate/up matrices: the decoder's next-token log-probs equal the peft model's
    with adapters on (the policy) and, built under disable_adapter(), with them off (the reference)."""
    cfg = load_config(None, {**TINY, "model": name})
    model, tok, _ = build_policy(cfg)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # peft starts B at zero: give the adapters something to merge
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    prompt, completion, _ = reference_tokens(tok, finance, finance.task("pct_change-ACME-Q3"))
    seq = torch.tensor([prompt + completion])

    def decoded(dec: FastDecoder) -> torch.Tensor:
        kv = dec.new_cache(1)
        return torch.log_softmax(dec.logits(dec.feed(kv, seq, torch.tensor([seq.shape[1]]))), -1)[0]

    with torch.no_grad():
        policy = torch.log_softmax(model(input_ids=seq).logits[0, -1].float(), -1)
        with model.disable_adapter():
            reference = torch.log_softmax(model(input_ids=seq).logits[0, -1].float(), -1)
            fused_reference = FastDecoder(model)
        fused_policy = FastDecoder(model)
        unfused = FastDecoder(model, fused=False)
    assert fused_policy.fused is not None and unfused.fused is None
    assert float((policy - reference).abs().max()) > 1e-2  # the adapters matter here
    assert float((decoded(fused_policy) - policy).abs().max()) < 1e-4
    assert float((decoded(unfused) - policy).abs().max()) < 1e-4
    assert float((decoded(fused_reference) - reference).abs().max()) < 1e-4


def test_batched_rollout_equals_one_episode_at_a_time(tiny, finance):
    cfg, model, tok = tiny
    tasks = [finance.task("pct_change-ACME-Q3"), finance.task("eps_surprise-ACME-Q2")]  # prompts of two lengths
    settings = rollout.sampling_settings(cfg, greedy=True)
    batched = rollout.run_episodes(model, tok, finance, tasks, 2, settings)
    turns = rollout.TurnRules(tok, finance, settings)
    for e in batched:
        alone = rollout.Episode(e.task, e.group, rollout.prompt_ids(tok, finance, e.task))
        with torch.no_grad():
            rollout._decode_one(model, alone, turns, settings, None)
        assert alone.completion_ids == e.completion_ids and alone.stop_reason == e.stop_reason
        assert max(abs(a - b) for a, b in zip(alone.logprobs, e.logprobs)) < 1e-5


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_chunked_logprobs_and_gradients_equal_the_full_computation(temperature):
    torch.manual_seed(0)
    N, H, V = 600, 16, 1000  # more tokens than one chunk
    hidden = torch.randn(N, H, requires_grad=True)
    weight = torch.randn(V, H, requires_grad=True)
    targets = torch.randint(0, V, (N,))
    upstream = torch.randn(N)
    logp, entropy = linear_logprobs(hidden, weight, targets, temperature=temperature)
    (logp * upstream).sum().backward()
    got = (hidden.grad.clone(), weight.grad.clone())
    hidden.grad, weight.grad = None, None
    full = torch.log_softmax(hidden @ weight.T / temperature, -1)
    ref = full.gather(-1, targets[:, None]).squeeze(-1)
    (ref * upstream).sum().backward()
    assert torch.allclose(logp, ref, atol=1e-5)
    assert torch.allclose(entropy, -(full.exp() * full).sum(-1), atol=1e-4)
    assert torch.allclose(got[0], hidden.grad, atol=1e-5) and torch.allclose(got[1], weight.grad, atol=1e-5)
    uniform, _ = linear_logprobs(torch.zeros(1, H), torch.randn(V, H), torch.tensor([3]))
    assert uniform.item() == pytest.approx(-math.log(V))
    same, none = linear_logprobs(hidden, weight, targets, temperature, with_entropy=False)
    assert torch.equal(same, logp) and torch.all(none == 0)


def test_length_segments_need_no_padding_by_hand():
    assert length_segments([10, 100, 9, 100]) == [[1, 3], [0], [2]]  # longest first, equal lengths share a call
    assert length_segments([5]) == [[0]]
    assert length_segments([]) == []


def test_shared_prefix_stats_match_the_plain_forward(tiny, finance):
    """Running the prompt once and its completions in length-sorted calls gives the same log-probs and the same
    gradients as G full left-padded rows."""
    _, model, tok = tiny
    prompt, ids, mask = reference_tokens(tok, finance, finance.task("pct_change-ACME-Q3"))
    comps, masks = [ids[:38], ids, ids[:7], ids[:40], []], [mask[:38], mask, mask[:7], mask[:40], []]
    assert len(length_segments([len(c) for c in comps])) > 1  # the calls really are cut
    weights = torch.randn(len(comps), len(ids))
    lora = [p for p in model.parameters() if p.requires_grad]

    def gradients(logp: torch.Tensor) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        (logp * weights).sum().backward()
        return [p.grad.clone() for p in lora]

    plain = token_logprobs(model, make_batch([prompt] * len(comps), comps, masks, tok.pad_token_id))
    aligned = torch.zeros(len(comps), len(ids))  # plain is right-aligned; shared is left-aligned
    for i, c in enumerate(comps):
        if c:
            aligned[i, : len(c)] = plain[i, plain.shape[1] - len(c) :]
    plain_grads = gradients(aligned)
    shared, shared_mask = group_token_stats(model, prompt, comps, masks, tok.pad_token_id)
    assert torch.allclose(aligned, shared.logp, atol=1e-5), (aligned - shared.logp).abs().max()
    assert shared_mask.sum() == sum(sum(m) for m in masks)
    assert torch.all(shared.logp[shared_mask == 0] == 0)  # tool output and padding get no log-prob
    shared_grads = gradients(shared.logp)
    assert any(g.abs().sum() > 0 for g in shared_grads)
    for a, b in zip(plain_grads, shared_grads):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-3), (a - b).abs().max()


def test_a_group_split_into_parts_runs_its_prompt_once_with_the_same_gradients(tiny, finance, monkeypatch):
    """The parts of a split group read one prompt forward (SharedPrefix); their backward passes stop at its outputs
    and one flush sends the sum through the prompt: same log-probs and LoRA gradients as the group in one call."""
    _, model, tok = tiny
    prompt, ids, mask = reference_tokens(tok, finance, finance.task("pct_change-ACME-Q3"))
    comps, masks = [ids[:38], ids, ids[:7], ids[:40]], [mask[:38], mask, mask[:7], mask[:40]]
    weights = torch.randn(len(comps), len(ids))
    lora = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad(set_to_none=True)
    whole, _ = group_token_stats(model, prompt, comps, masks, tok.pad_token_id)
    (whole.logp * weights[:, : whole.logp.shape[1]]).sum().backward()
    expected = [p.grad.clone() for p in lora]

    prompt_runs = []
    run_prompt = logprobs.prompt_prefix
    monkeypatch.setattr(logprobs, "prompt_prefix", lambda m, p: (prompt_runs.append(p), run_prompt(m, p))[1])
    model.zero_grad(set_to_none=True)
    shared = SharedPrefix(model)
    parts = []
    for rows in ([0, 1], [2, 3]):
        prefix = shared.get(prompt)
        stats, _ = group_token_stats(
            model, prompt, [comps[i] for i in rows], [masks[i] for i in rows], tok.pad_token_id, prefix=prefix
        )
        (stats.logp * weights[rows, : stats.logp.shape[1]]).sum().backward()
        parts.append(stats.logp.detach())
    before_flush = [None if p.grad is None else p.grad.clone() for p in lora]
    shared.flush()
    got = [p.grad for p in lora]
    assert prompt_runs == [prompt]  # one prompt forward for the group's two parts
    assert any(b is None or not torch.equal(b, g) for b, g in zip(before_flush, got))  # the flush adds the prompt's
    for i, rows in enumerate(([0, 1], [2, 3])):
        k = parts[i].shape[1]
        assert torch.allclose(parts[i], whole.logp[rows, :k], atol=1e-5)
    for a, b in zip(expected, got):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4), (a - b).abs().max()


def test_truncated_importance_weights_by_hand():
    old = torch.log(torch.tensor([[0.5, 0.2, 0.9]]))
    sampler = torch.log(torch.tensor([[0.25, 0.4, 0.1]]))
    # ratios 2, 0.5, 9 -> capped at 2
    assert torch.allclose(truncated_is_weights(old, sampler, cap=2.0), torch.tensor([[2.0, 0.5, 2.0]]))
    kl, outside = sampler_mismatch(old, sampler, torch.tensor([[1.0, 1.0, 0.0]]))
    # k3 with r = 2 and r = 0.5 over the two masked-in tokens: ((2 - ln 2 - 1) + (0.5 + ln 2 - 1)) / 2
    assert kl == pytest.approx(((1 - math.log(2)) + (math.log(2) - 0.5)) / 2)
    assert outside == 1.0
    same = torch.log(torch.tensor([[0.3, 0.3]]))
    assert sampler_mismatch(same, same, torch.ones(1, 2)) == (0.0, 0.0)


@pytest.fixture()
def text_length_reward():
    """A reward with variance on random text, so the tiny model gets a learning signal."""
    register_reward("text_length", lambda r, task, env, ctx: (len(r.generated_text) % 13 / 13, "test"))
    yield {"text_length": 1.0}
    unregister_reward("text_length")


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_an_int8_run_trains_and_logs_the_mismatch(text_length_reward, name):
    """One GRPO update from an int8 rollout and one from the exact engine, on each tiny architecture: the exact
    engine's rollout log-probs are the trainer's (no mismatch)."""
    tiny = {**TINY, "model": name}
    cfg = load_config(None, {**tiny, "rollout.engine": "int8", "reward.weights": text_length_reward})
    model, tok, ref = build_policy(cfg)
    trainer = GRPOTrainer(model, tok, env_for(cfg), cfg, ref)
    assert not trainer.sampler.exact and trainer.sampler.model is not model
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    m = trainer.step(1).metrics
    assert m["skipped"] == 0 and m["mismatch/kl"] > 0 and 0 <= m["mismatch/ratio_out"] <= 1
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters() if p.requires_grad)
    # the sampler's adapters are the policy's own parameters: it follows the update without a copy
    shared = {id(p) for p in trainer.sampler.model.parameters()}
    assert all(id(p) in shared for p in model.parameters() if p.requires_grad)
    exact_cfg = load_config(None, {**tiny, "reward.weights": text_length_reward})
    exact = GRPOTrainer(model, tok, env_for(exact_cfg), exact_cfg, ref)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    m_exact = exact.step(1).metrics
    assert m_exact["mismatch/kl"] < 1e-6 and m_exact["mismatch/ratio_out"] == 0.0
    assert m_exact["skipped"] == 0
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters() if p.requires_grad)


def test_an_int8_run_with_several_epochs_takes_its_old_log_probs_from_the_policy_not_the_sampler(
    text_length_reward, monkeypatch
):
    """With mu > 1 the clipped ratio's denominator is the policy before the update. The int8 sampler only
    approximates it, so one extra no-gradient pass computes it: those log-probs equal the fp32 policy's and differ
    from the ones the sampler recorded."""
    cfg = load_config(None, {**TINY, "rollout.engine": "int8", "grpo.mu": 2, "reward.weights": text_length_reward})
    model, tok, ref = build_policy(cfg)
    trainer = GRPOTrainer(model, tok, env_for(cfg), cfg, ref)
    phases = Phases()
    episodes, _, _ = trainer.collect(1, phases)
    chunks = trainer._chunks(episodes)
    expected = [logp.clone() for logp in trainer._logps(model, chunks)]  # the policy before the update, fp32
    seen: list = []
    real_logps = trainer._logps
    monkeypatch.setattr(trainer, "_logps", lambda m, cs: seen.append(real_logps(m, cs)) or seen[-1])
    advantages = torch.linspace(-1, 1, len(episodes))
    trainer.update(episodes, advantages, phases)
    old = seen[-1]  # the reference pass (beta > 0) comes first, the old-log-prob pass after it
    assert phases.seconds["old_logprobs"] > 0 and len(old) == len(expected)
    for c, got, want in zip(chunks, old, expected):
        assert torch.allclose(got, want, atol=1e-5)
        sampled = sampler_logp(c.episodes, want)
        mask = want != 0
        assert (sampled[mask] - want[mask]).abs().max() > 1e-4  # the int8 sampler's own numbers are not it


def _scripted(script: dict[str, list[int]]):
    """Pick, for each live episode, the next token of its task's reference transcript (teacher forcing)."""

    def choose(episodes, logits):
        ids = torch.tensor([script[e.task.id][len(e.completion_ids)] for e in episodes])
        return ids, torch.log_softmax(logits, -1).gather(-1, ids[:, None]).squeeze(-1)

    return choose


def test_batched_rollout_with_tool_turns_equals_one_episode_at_a_time(tiny_arch, finance):
    """Tool responses enter as chunks and finished episodes leave the batch: the same tokens, masks and log-probs
    as decoding each episode alone. The tokens are the references' (2 or 3 tool calls each, different lengths)."""
    cfg, model, tok = tiny_arch
    tasks = [finance.task(t) for t in ("pct_change-ACME-Q3", "eps_surprise-ACME-Q2", "revenue_growth-ACME-Q1Q2")]
    refs = {t.id: reference_tokens(tok, finance, t) for t in tasks}
    choose = _scripted({tid: ids for tid, (_, ids, _) in refs.items()})
    settings = rollout.sampling_settings(cfg, max_new_tokens=400, max_turns=3)
    batched = rollout.run_episodes(model, tok, finance, tasks, 2, settings, choose=choose)
    turns = rollout.TurnRules(tok, finance, settings)
    for e in batched:
        _, ids, mask = refs[e.task.id]
        assert e.completion_ids == ids and e.mask == mask and e.stop_reason == "eos"  # spliced exactly
        assert e.turns == len(e.task.reference_calls) >= 2
        alone = rollout.Episode(e.task, e.group, rollout.prompt_ids(tok, finance, e.task))
        with torch.no_grad():
            rollout._decode_one(model, alone, turns, settings, None, choose)
        assert alone.completion_ids == e.completion_ids
        assert max(abs(a - b) for a, b in zip(alone.logprobs, e.logprobs)) < 1e-5


def test_unwritten_cache_columns_are_zero_not_stale_memory(tiny):
    """Masked columns get attention weight 0, and 0 x NaN from stale memory would be NaN: buffers start at 0."""
    _, model, _ = tiny
    kv = FastDecoder(model).new_cache(3)
    kv.reserve(500)
    assert all(bool((k == 0).all()) and bool((v == 0).all()) for k, v in zip(kv.keys, kv.values))


def test_sampling_draws_from_the_softmax_at_the_temperature():
    """Inverse-CDF sampling (one uniform per row) has the distribution of softmax(logits / T), top-p applied."""
    torch.manual_seed(0)
    logits = torch.randn(4, 20) * 2
    generator = torch.Generator().manual_seed(1)
    for temperature, top_p in ((1.0, 1.0), (0.7, 1.0), (1.0, 0.8)):
        settings = rollout.SamplingSettings(10, 1, temperature, top_p)
        counts = torch.zeros(4, 20)
        for _ in range(4000):
            ids, logp = rollout.sample_next(logits, settings, generator)
            counts[torch.arange(4), ids] += 1
        probs = torch.softmax(logits / temperature, -1)
        if top_p < 1:
            sorted_p, idx = probs.sort(-1, descending=True)
            keep = sorted_p.cumsum(-1) - sorted_p < top_p
            probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p * keep)
            probs = probs / probs.sum(-1, keepdim=True)
            assert counts[probs == 0].sum() == 0  # nothing outside the nucleus
        assert (counts / 4000 - probs).abs().max() < 0.03
        assert torch.allclose(logp, torch.log_softmax(logits / temperature, -1).gather(-1, ids[:, None]).squeeze(-1))


def test_an_int8_linear_stays_within_a_few_percent_of_fp32_on_this_cpu():
    """Without VNNI, fbgemm sums pairs of u8 x s8 products in saturating int16 and the full 8-bit activation range
    overflows (20% error per layer on an AVX2-only EPYC, a garbage policy): the layer picks the range exact here."""
    from torch import nn

    from grpolab.engine.sampler import Int8Linear

    torch.manual_seed(0)
    linear = nn.Linear(576, 1536, bias=False)
    x = torch.randn(16, 576)
    exact = linear(x)
    assert float((Int8Linear(linear)(x) - exact).norm() / exact.norm()) < 0.05


def test_packed_rollout_weights_give_the_plain_linear():
    """The rollout's oneDNN-packed weights compute F.linear (fp32 rounding) at any row count, and they really are
    packed where oneDNN is available (the layout the decode step's speed comes from)."""
    from grpolab.engine.fused import PackedLinear

    torch.manual_seed(0)
    weight, bias = torch.randn(48, 32), torch.randn(48)
    packed, plain = PackedLinear(weight, bias), PackedLinear(weight, bias, packed=False)
    assert packed.packed == torch.backends.mkldnn.is_available() and not plain.packed
    for shape in [(1, 32), (16, 32), (16, 1, 32), (3, 50, 32)]:
        x = torch.randn(*shape)
        assert torch.allclose(packed(x), torch.nn.functional.linear(x, weight, bias), atol=1e-5)
        assert torch.equal(plain(x), torch.nn.functional.linear(x, weight, bias))


def test_a_long_prompt_prefills_in_bounded_pieces_with_the_same_result(tiny_arch, finance, monkeypatch):
    """Prompts whose attention scores would pass PREFILL_SCORES_BYTES are fed a few rows at a time in column chunks
    (tau2_retail's 5k-token prompts, 32 at once, were killed for memory): same tokens, same log-probs."""
    cfg, model, tok = tiny_arch
    tasks = [finance.task(t) for t in ("pct_change-ACME-Q3", "eps_surprise-ACME-Q2", "revenue_growth-ACME-Q1Q2")]
    settings = rollout.sampling_settings(cfg, greedy=True, max_new_tokens=24)
    whole = rollout.run_episodes(model, tok, finance, tasks, 2, settings)
    monkeypatch.setattr(rollout, "PREFILL_SCORES_BYTES", 1)  # one row at a time...
    monkeypatch.setattr(rollout, "PREFILL_COLUMNS", 37)  # ...in chunks of 37 tokens
    pieces = rollout.run_episodes(model, tok, finance, tasks, 2, settings)
    for a, b in zip(whole, pieces):
        assert a.completion_ids == b.completion_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_prompts_sharing_a_long_start_prefill_it_once_with_the_same_result(tiny_arch, finance, monkeypatch):
    """A batch whose prompts share their start (a system prompt: tau2_retail's ~4.5k tokens) prefills it once and
    forks it: fewer tokens fed, same tokens sampled, same log-probs."""
    from grpolab.engine.decoder import FastDecoder

    cfg, model, tok = tiny_arch
    tasks = [finance.task(t) for t in ("pct_change-ACME-Q3", "eps_surprise-ACME-Q2", "revenue_growth-ACME-Q1Q2")]
    prompts = [rollout.prompt_ids(tok, finance, t) for t in tasks]
    monkeypatch.setattr(rollout, "SHARED_PREFIX_MIN", 8)
    shared = rollout.shared_prefix(prompts)
    assert 8 <= shared < min(len(p) for p in prompts) and all(p[:shared] == prompts[0][:shared] for p in prompts)
    assert rollout.shared_prefix(prompts[:1]) == 0 and rollout.shared_prefix([[1, 2, 3], [1, 2, 3]]) == 0
    fed: list[int] = []
    feed = FastDecoder.feed

    def counting(self, kv, ids, n_valid, rows=None):
        fed.append(int(n_valid.sum()))
        return feed(self, kv, ids, n_valid, rows)

    monkeypatch.setattr(FastDecoder, "feed", counting)
    settings = rollout.sampling_settings(cfg, greedy=True, max_new_tokens=24)
    once = rollout.run_episodes(model, tok, finance, tasks, 2, settings)
    prefill_once = fed[0] + fed[1]
    fed.clear()
    monkeypatch.setattr(rollout, "SHARED_PREFIX_MIN", 10**9)  # every prompt whole
    whole = rollout.run_episodes(model, tok, finance, tasks, 2, settings)
    assert fed[0] == sum(len(p) for p in prompts) and prefill_once == fed[0] - 2 * shared
    for a, b in zip(once, whole):
        assert a.completion_ids == b.completion_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4
