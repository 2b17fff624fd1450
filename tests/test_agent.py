"""A trained agent out of its run: export (transformers folder, GGUF) and chat, on the tiny model."""

import copy
import io
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from grpolab.agent.chat import ChatSession, ChatSettings
from grpolab.agent.export import export_run, exported_config, load_exported
from grpolab.agent.gguf import permute_qk, write_gguf
from grpolab.config import load_config
from grpolab.engine.evaluate import evaluate
from grpolab.engine.policy import load_run_policy
from grpolab.engine.rollout import run_episodes, sampling_settings
from grpolab.envs import env_for
from grpolab.errors import UserError
from grpolab.formats import checked_format, stop_token_ids
from grpolab.models import load_model
from grpolab.protocol import parse_call, render_tool_response
from grpolab.rewards.components import register_reward, unregister_reward
from grpolab.rewards.replay import call_result
from grpolab.run.loop import train
from tests.test_formats import HERMES, LLAMA3

pytestmark = pytest.mark.xdist_group("test_agent")  # its module fixtures train a run: once, in one worker

TINY_RUN = {
    "model": "tiny",
    "env": "arithmetic",
    "rollout.group_size": 4,
    "rollout.max_new_tokens": 24,
    "train.prompts_per_step": 2,
    "train.steps": 1,
    "train.sft_steps": 2,
    "train.eval_limit": 4,
    "train.eval_every": 0,
    "reward.weights": {"agent_text_length": 1.0, "format": 1.0},
}


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """SFT warm start + one GRPO step on the tiny model, with a reward that varies so the LoRA moves."""
    register_reward("agent_text_length", lambda r, task, env, ctx: (len(r.generated_text) % 13 / 13, "test"))
    run = train(load_config(None, TINY_RUN), tmp_path_factory.mktemp("run") / "tiny", quiet=True)
    yield run.path
    unregister_reward("agent_text_length")


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "agent"
    return export_run(trained_run, out, gguf=True)


def rows(episodes):
    return [(e.task.id, e.text, e.score.total, e.score.solved) for e in episodes]


# ---- export ----


def test_export_reloads_with_plain_transformers_and_gives_the_same_heldout_results(trained_run, exported):
    policy, tok, cfg, _ = load_run_policy(trained_run)
    env = env_for(cfg)
    run_summary, run_eps = evaluate(policy, tok, env, cfg)
    model, tokenizer = load_exported(exported.out)  # AutoModelForCausalLM / AutoTokenizer.from_pretrained(DIR)
    assert type(model).__name__ == "LlamaForCausalLM" and not hasattr(model, "peft_config")
    out_summary, out_eps = evaluate(model, tokenizer, env, cfg)
    assert len(run_eps) == 4 and rows(out_eps) == rows(run_eps) and out_summary == run_summary
    # the comparison can tell models apart: the LoRA moved (the base alone gives other logits) and the export has it
    ids = torch.tensor([run_eps[0].prompt_ids + run_eps[0].completion_ids])
    with torch.no_grad():
        run_logits, out_logits = policy(input_ids=ids).logits, model(input_ids=ids).logits
        with policy.disable_adapter():
            base_logits = policy(input_ids=ids).logits
    assert torch.allclose(run_logits, out_logits, atol=1e-4)
    assert (run_logits - base_logits).abs().max() > 1e-3


def test_export_folder_has_tokenizer_chat_template_and_greedy_generation_config(trained_run, exported):
    files = {p.name for p in exported.out.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer_config.json"} <= files
    assert {"grpolab.json", "README.md", "gguf"} <= files and exported.gguf == exported.out / "gguf/agent.f32.gguf"
    _, tok, cfg, _ = load_run_policy(trained_run)
    _, tokenizer = load_exported(exported.out)
    messages = env_for(cfg).messages(env_for(cfg).tasks("heldout")[0])
    render = lambda t: t.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)  # noqa: E731
    assert render(tokenizer) == render(tok) and tokenizer(render(tok)).input_ids == tok(render(tok)).input_ids
    gen = json.loads((exported.out / "generation_config.json").read_text())
    eos = gen["eos_token_id"]
    assert gen["do_sample"] is False and set(eos if isinstance(eos, list) else [eos]) == stop_token_ids(tok)
    manifest = json.loads((exported.out / "grpolab.json").read_text())
    assert manifest["step"] == exported.step == 1 and manifest["config"]["env"] == "arithmetic"
    assert exported.folder_bytes > 0 and exported.gguf_bytes > 0


def test_gguf_round_trip_through_transformers_gives_the_same_weights_config_and_tokenizer(exported):
    folder, tok = load_exported(exported.out)
    gguf_model, gguf_tok = load_exported(exported.out, gguf_file="gguf/agent.f32.gguf")
    a, b = folder.state_dict(), gguf_model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # F32: bit for bit
    for key in (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "rope_parameters",
        "tie_word_embeddings",
        "eos_token_id",
    ):
        assert getattr(gguf_model.config, key) == getattr(folder.config, key), key
    assert gguf_model.config.rms_norm_eps == pytest.approx(folder.config.rms_norm_eps)  # stored as float32
    text = tok.apply_chat_template([{"role": "user", "content": "Compute (3 + 4) * 5 <tool_call>"}], tokenize=False)
    assert gguf_tok(text).input_ids == tok(text).input_ids and gguf_tok.chat_template == tok.chat_template
    ids = torch.tensor([tok(text).input_ids])
    with torch.no_grad():
        assert torch.allclose(folder(input_ids=ids).logits, gguf_model(input_ids=ids).logits, atol=1e-4)


def test_gguf_f16_is_half_the_size_and_close(exported, tmp_path):
    folder, tok = load_exported(exported.out)
    info = write_gguf(folder, tok, tmp_path / "m.f16.gguf", "m", "f16")
    half = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.f16.gguf", dtype=torch.float32)
    assert info.bytes < 0.6 * exported.gguf_bytes
    a, b = folder.state_dict(), half.state_dict()
    assert all(torch.allclose(a[k], b[k], rtol=1e-3, atol=1e-4) for k in a)


def test_qk_permutation_is_the_inverse_of_transformers_unpermute():
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    unpermute = LlamaTensorProcessor()._reverse_permute_weights
    w = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    assert not np.array_equal(permute_qk(w, 4, 4), w)
    assert np.array_equal(unpermute(permute_qk(w, 4, 4), 4, 4), w)  # q
    k = w[:32]
    assert np.array_equal(unpermute(permute_qk(k, 4, 2), 4, 2), k)  # k with grouped-query heads


def test_gguf_refuses_what_it_cannot_encode(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    model, tok = load_model("tiny")
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=len(tok)))
    with pytest.raises(UserError, match="architecture is 'gpt2'.*convert_hf_to_gguf"):
        write_gguf(gpt2, tok, tmp_path / "x.gguf", "x")
    other = copy.deepcopy(tok)
    other.add_tokens(["<grpolab-new-token>"])
    with pytest.raises(UserError, match="vocabulary"):
        write_gguf(model, other, tmp_path / "x.gguf", "x")
    assert not list(tmp_path.iterdir())


def test_export_model_cli_checks_heldout_and_never_overwrites(trained_run, tmp_path, cli):
    out = tmp_path / "agent"
    code, stdout, _ = cli(
        "export-model", "--run", str(trained_run), "--out", str(out), "--check", "--limit", "2", "--json"
    )
    data = json.loads(stdout)
    assert code == 0 and data["check"]["identical"] == data["check"]["n"] == 2 and data["gguf"] is None
    code, _, err = cli("export-model", "--run", str(trained_run), "--out", str(out))
    assert code == 2 and "already exists and is not empty" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli(
        "export-model", "--run", str(trained_run), "--out", str(tmp_path / "x"), "--gguf", "--gguf-type", "q4"
    )
    assert code == 2 and "unknown GGUF tensor type 'q4'" in err
    (tmp_path / "file").write_text("in the way")
    code, _, err = cli("export-model", "--run", str(trained_run), "--out", str(tmp_path / "file" / "agent"))
    assert code == 2 and "cannot write" in err and "--out" in err
    code, _, err = cli("export-model", "--run", str(tmp_path / "nope"), "--out", str(tmp_path / "x"))
    assert code == 2 and "config.json" in err and not (tmp_path / "x").exists()
    assert not list(tmp_path.glob(".*export-*"))  # a failed export leaves nothing behind


# ---- chat ----


class ScriptedLM(torch.nn.Module):
    """Writes `sequence`, one token per position after the prompt, whatever it is fed (fed tokens move it on)."""

    def __init__(self, sequence: list[int], vocab: int):
        super().__init__()
        self.sequence, self.vocab = sequence, vocab
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, cache=None, use_cache=None, **_):
        consumed = -1 if cache is None else cache + input_ids.shape[1]  # -1: the prefill consumed the prompt
        logits = torch.full((1, input_ids.shape[1], self.vocab), -1e9)
        logits[0, -1, self.sequence[min(consumed + 1, len(self.sequence) - 1)]] = 0.0
        return SimpleNamespace(logits=logits, cache=consumed)


def scripted_session(tok, env, sequence, **settings):
    return ChatSession(ScriptedLM(sequence, len(tok)), tok, env, ChatSettings(**settings))


@pytest.fixture()
def tok(tokenizer):
    """The embedded tokenizer (conftest's `tokenizer`: its chat template restored after the test)."""
    return tokenizer


@pytest.mark.parametrize("fmt,template", [("inline", None), ("chat_template", HERMES), ("chat_template", LLAMA3)])
def test_chat_runs_the_real_tools_and_reports_each_step(tok, finance, fmt, template):
    tok.chat_template = template or tok.chat_template
    task = finance.task("pct_change-ACME-Q3")
    _, ids, _ = checked_format(tok, finance, fmt).reference_tokens(finance, task)  # what a perfect agent writes
    session = scripted_session(tok, finance, ids, max_new_tokens=400, format=fmt)
    events = list(session.send(task.prompt, deltas=True))
    kinds = [e.kind for e in events if e.kind != "delta"]
    assert kinds == ["thought", "tool_call", "tool_response", "tool_call", "tool_response", "answer"]
    calls = [e for e in events if e.kind == "tool_call"]
    responses = [(e.name, e.response) for e in events if e.kind == "tool_response"]
    assert [(c.name, c.arguments) for c in calls] == task.reference_calls
    assert responses == [(n, finance.toolbox.execute(n, a)) for n, a in task.reference_calls]  # real tool output
    assert events[-1].text == task.reference_answer.strip() and events[-1].stop == "eos"
    assert session.last_transcript.strip() == finance.reference_transcript(task).strip()
    if template != LLAMA3:  # llama3 calls are rewritten as <tool_call> blocks once parsed: deltas skip that part
        assert "".join(e.text for e in events if e.kind == "delta") == session.last_transcript


def test_chat_survives_malformed_calls_and_stops_at_the_limits(tok, arithmetic):
    enc = lambda text: tok(text, add_special_tokens=False).input_ids  # noqa: E731
    bad = "<tool_call>{nope</tool_call>"
    error = call_result(arithmetic.toolbox, parse_call("{nope")).response
    script = enc(bad) + enc(render_tool_response(error)) + enc("<thought>[bold]x</thought>") + enc(bad) + [0] * 50
    events = list(scripted_session(tok, arithmetic, script, max_turns=1, max_new_tokens=400).send("hi"))
    assert [e.kind for e in events] == ["tool_call", "tool_response", "thought", "tool_call", "error", "answer"]
    assert events[0].name is None and "not valid JSON" in events[0].text and "error" in events[1].response
    assert events[2].text == "[bold]x" and "tool-call limit" in events[4].text and events[-1].stop == "turn_limit"
    looping = list(scripted_session(tok, arithmetic, enc("la"), max_new_tokens=7).send("hi"))
    assert looping[-1].stop == "budget" and "token budget (7" in looping[-2].text
    small = ScriptedLM(enc("la"), len(tok))
    small.config = SimpleNamespace(max_position_embeddings=len(enc(arithmetic.system_prompt())) + 40)
    full = list(ChatSession(small, tok, arithmetic).send("hi"))
    assert full[-1].stop == "context" and "context window" in full[-2].text
    assert full[-1].text.startswith("la") and len(enc(full[-1].text)) < 40


def test_greedy_chat_is_the_greedy_heldout_episode(arithmetic):
    cfg = load_config(None, {"model": "tiny", "rollout.max_new_tokens": 24})
    model, tok = load_model("tiny")
    task = arithmetic.tasks("heldout")[0]
    episode = run_episodes(model, tok, arithmetic, [task], 1, sampling_settings(cfg, greedy=True))[0]
    session = ChatSession(model, tok, arithmetic, ChatSettings.from_config(cfg))
    events = list(session.send(task.prompt))
    assert session.last_transcript == episode.text and events[-1].stop == episode.stop_reason


def test_chat_history_is_kept_only_when_asked(tok, arithmetic):
    session = scripted_session(tok, arithmetic, tok("Four.", add_special_tokens=False).input_ids + [2])
    list(session.send("2+2?"))
    assert [m["role"] for m in session.messages("again")] == ["system", "user"]
    session.settings.keep_history = True
    list(session.send("2+2?"))
    assert session.messages("again")[1:] == [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "Four."},
        {"role": "user", "content": "again"},
    ]


def test_chat_refuses_envs_that_run_no_tools(tok, arithmetic):
    env = copy.copy(arithmetic)
    env.executes_tools = False
    with pytest.raises(UserError, match="runs no tools"):
        ChatSession(None, tok, env)


def test_chat_cli_answers_questions_from_flags_and_stdin(trained_run, exported, cli, monkeypatch):
    code, out, _ = cli("chat", "--run", str(trained_run), "-q", "Compute 2 + 2", "--json", "--max-new-tokens", "8")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and lines[0] == {"kind": "question", "text": "Compute 2 + 2"} and lines[-1]["kind"] == "answer"
    monkeypatch.setattr("sys.stdin", io.StringIO("Compute 1 + 1\n\nCompute 3 * 3\n"))
    code, out, _ = cli("chat", "--run", str(trained_run), "--max-new-tokens", "4")
    assert code == 0 and out.count("agent: ") == 2
    code, out, _ = cli("chat", "--model", str(exported.out), "-q", "Compute 2 + 2", "--json")
    assert code == 0 and json.loads(out.splitlines()[-1])["kind"] == "answer"
    cfg = exported_config(exported.out)  # the folder brings its run's env and prompt settings (default env: finance)
    assert cfg.env == "arithmetic" and cfg.model == str(exported.out)
    code, _, err = cli("chat", "--run", str(trained_run), "--model", "tiny", "-q", "hi")
    assert code == 2 and "--run or --model" in err
