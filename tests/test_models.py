"""Another model than the embedded one: its tokenizer counts the tokens, its own thought tag earns format credit."""

import json

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from grpolab.envs import get_env
from grpolab.formats import InlineFormat, checked_format, thought_tag_of
from grpolab.models import load_tokenizer, model_token_counter
from grpolab.protocol import parse_transcript, render_thought
from grpolab.rewards.score import score_transcript

from .test_formats import HERMES

# Qwen3's handling of an assistant turn's reasoning, on the embedded tokenizer's special tokens: the <think> block is
# cut out of the content and rendered back as '<think>\n' + reasoning + '\n</think>\n\n' + the rest.
QWEN3_LIKE = HERMES.replace(
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}",
    "{%- elif message.role == 'assistant' and '</think>' in message.content %}"
    "{%- set reasoning = message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' }}"
    "{{- content + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}",
)
assert QWEN3_LIKE != HERMES


def _word_tokenizer(folder):
    """A tokenizer of another model, saved as a local model folder: one token per whitespace-separated word."""
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "</s>": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="</s>").save_pretrained(folder)
    return folder


def test_reward_score_counts_length_with_the_configured_models_tokenizer(tmp_path, cli):
    model = _word_tokenizer(tmp_path / "word-model")
    text = "<thought>I will answer from memory, no tool needed here.</thought>The answer is 14.17 percent."
    (tmp_path / "t.txt").write_text(text)
    config = tmp_path / "other.toml"
    config.write_text(f'model = "{model}"\nenv = "finance"\n')
    args = ("reward", "score", "--task", "pct_change-ACME-Q3", "--completion", str(tmp_path / "t.txt"), "--json")
    code, out, err = cli(*args, "--config", str(config))
    assert code == 0, err
    words = len(text.split())
    assert json.loads(out)["reasons"]["length"] == f"{words} generated tokens"
    code, out, _ = cli(*args, "--env", "finance")  # the default model: the embedded tokenizer's count differs
    embedded = model_token_counter("smollm2")(text)
    assert code == 0 and json.loads(out)["reasons"]["length"] == f"{embedded} generated tokens" != words


def test_the_tiny_models_count_with_the_embedded_tokenizer():
    text = "<thought>I need the report.</thought>"
    expected = len(load_tokenizer()(text, add_special_tokens=False).input_ids)
    assert {model_token_counter(name)(text) for name in ("smollm2", "tiny", "tiny-qwen3", "tiny-mistral")} == {expected}


def test_think_blocks_parse_as_thoughts_each_closed_by_its_own_tag():
    parsed = parse_transcript("<think>\nI need the ACME report.\n</think>\n\nThe answer is 14.17")
    assert parsed.errors == [] and parsed.opening.kind == "thought" and parsed.opening.closed
    assert parsed.opening.text.strip() == "I need the ACME report." and parsed.final_answer == "The answer is 14.17"
    mixed = parse_transcript("<think>I need the report.</thought>14.17")
    assert "</thought> inside <think>" in mixed.errors and not mixed.opening.closed
    assert "<think> is never closed" in mixed.errors


def test_a_think_block_earns_the_format_credit_a_thought_block_does():
    finance = get_env("finance")
    acme = finance.task("pct_change-ACME-Q3")
    honest = finance.reference_transcript(acme)
    as_think = honest.replace(render_thought(acme.reference_thought), render_thought(acme.reference_thought, "think"))
    assert as_think != honest and as_think.startswith("<think>\n")
    thought = score_transcript(finance, acme, honest, gen_tokens=100)
    think = score_transcript(finance, acme, as_think, gen_tokens=100)
    assert thought.components["format"] == think.components["format"] == 1.0, think.reasons["format"]
    empty = as_think.replace(acme.reference_thought, "...")
    assert score_transcript(finance, acme, empty, gen_tokens=100).components["format"] < 1.0  # still worded


def test_the_thought_tag_follows_the_chat_template(tokenizer):
    assert thought_tag_of(tokenizer) == "thought"  # the embedded SmolLM2 learns the lab's own tag
    finance = get_env("finance")
    acme = finance.task("pct_change-ACME-Q3")
    tokenizer.chat_template = QWEN3_LIKE
    assert thought_tag_of(tokenizer) == "think"
    fmt = InlineFormat(tokenizer)
    prompt_ids, completion, _ = fmt.reference_tokens(finance, acme)
    assert "reasoning inside <think>...</think>" in tokenizer.decode(prompt_ids)
    assert "<thought>" not in tokenizer.decode(prompt_ids)
    assert tokenizer.decode(completion, skip_special_tokens=True).startswith(
        f"<think>\n{acme.reference_thought}\n</think>\n\n<tool_call>"
    )


def test_a_qwen3_style_template_keeps_the_think_block_as_generated(tokenizer):
    """The template re-renders an assistant turn's reasoning in its own layout; the thought is written in that
    layout, so the conversation still extends the generated ids and the chat-template format is accepted."""
    tokenizer.chat_template = QWEN3_LIKE
    finance = get_env("finance")
    acme = finance.task("pct_change-ACME-Q3")
    fmt = checked_format(tokenizer, finance, "chat_template")  # refuses a template that re-renders the prefix
    assert fmt.thought_tag == finance.thought_tag == "think"
    prompt_ids, completion, mask = fmt.reference_tokens(finance, acme)
    assert "<think>...</think>" in tokenizer.decode(prompt_ids)
    turn = tokenizer.decode([t for t, m in zip(completion, mask) if m], skip_special_tokens=True)
    assert turn.startswith(f"<think>\n{acme.reference_thought}\n</think>\n\n<tool_call>")
