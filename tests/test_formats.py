"""`rollout.format = "chat_template"`: the model's own template, tool results as `role: "tool"` messages.

The templates below are written here in each family's documented shape (Hermes / Qwen 2.5: calls as
`<tool_call>` JSON blocks, results in `<tool_response>` inside a user turn; Llama 3.1: the turn is one
{"name", "parameters"} object, results in an `ipython` turn), on the embedded tokenizer's special tokens.
"""

import json

import pytest
import torch

from grpolab.config import load_config
from grpolab.engine import rollout
from grpolab.engine.policy import build_policy
from grpolab.errors import UserError
from grpolab.formats import ChatTemplateFormat, checked_format
from grpolab.models import build_tiny_model, load_tokenizer
from grpolab.rewards.score import score_transcript

HERMES = (
    "{%- if tools %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '\\n\\n# Tools\\n\\nYou may call one or "
    "more functions to assist with the user query.\\n\\nYou are provided with function signatures within "
    "<tools></tools> XML tags:\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": '
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first and tools %}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
LLAMA3 = (
    "{{- '<|im_start|>system\\n' + messages[0].content + '\\n\\nYou have access to the following functions. To call "
    'a function, respond with JSON for a function call: {\\"name\\": function name, \\"parameters\\": dictionary of '
    "argument name and its value}.\\n' }}{%- for tool in tools %}{{- tool | tojson + '\\n' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}{%- for message in messages[1:] %}"
    "{%- if message.role == 'tool' %}{{- '<|im_start|>ipython\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# Like templates that drop earlier reasoning: the assistant's <thought> is not rendered back, so the conversation
# no longer extends the ids the model generated.
STRIPS_THOUGHTS = HERMES.replace(
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}",
    "{{- '<|im_start|>' + message.role + '\\n' + message.content.split('</thought>')[-1] + '<|im_end|>\\n' }}",
)


def _format(tok, template, finance, syntax="auto"):
    tok.chat_template = template
    return checked_format(tok, finance, "chat_template", syntax)


def _scripted(script):
    def choose(episodes, logits):
        ids = torch.tensor([script[e.task.id][len(e.completion_ids)] for e in episodes])
        return ids, torch.log_softmax(logits, -1).gather(-1, ids[:, None]).squeeze(-1)

    return choose


@pytest.mark.parametrize("template,syntax", [(HERMES, "hermes"), (LLAMA3, "llama3")])
def test_chat_template_episodes_splice_the_templates_tool_messages(tokenizer, finance, template, syntax):
    fmt = _format(tokenizer, template, finance)
    assert isinstance(fmt, ChatTemplateFormat) and fmt.syntax.name == syntax
    tasks = [finance.task("pct_change-ACME-Q3"), finance.task("eps_surprise-ACME-Q2")]
    refs = {t.id: fmt.reference_tokens(finance, t) for t in tasks}
    prompt = tokenizer.decode(refs[tasks[0].id][0])
    assert '"name": "calculator"' in prompt  # the template renders the tools
    cfg = load_config(None, {"model": "tiny", "rollout.format": "chat_template", "rollout.max_new_tokens": 400})
    model, _, _ = build_policy(cfg)
    settings = rollout.sampling_settings(cfg)
    episodes = rollout.run_episodes(
        model, tokenizer, finance, tasks, 1, settings, choose=_scripted({k: v[1] for k, v in refs.items()})
    )
    for e in episodes:
        prompt_ids, ids, mask = refs[e.task.id]
        assert e.prompt_ids == prompt_ids and e.completion_ids == ids and e.mask == mask
        assert e.turns == 2 and e.stop_reason == "eos"
        spliced = tokenizer.decode([t for t, m in zip(ids, mask) if m == 0])
        assert ("<tool_response>" if syntax == "hermes" else "ipython") in spliced and "<|im_start|>" in spliced
        # rewards read the canonical transcript: the same as the inline protocol's
        s = score_transcript(finance, e.task, e.text, count_tokens=len)
        assert s.components["completion"] == 1.0 and s.components["format"] == 1.0, s.reasons
        assert e.text.count("<tool_call>") == 2 and json.loads(e.text.split("<tool_response>")[1].split("<")[0])


def test_a_template_that_rewrites_earlier_turns_is_refused(tokenizer, finance):
    with pytest.raises(UserError, match="does not keep the conversation's prefix"):
        _format(tokenizer, STRIPS_THOUGHTS, finance)


def test_a_template_that_ignores_tools_is_refused(tokenizer, finance):
    with pytest.raises(UserError, match="ignores `tools`"):
        checked_format(tokenizer, finance, "chat_template")  # SmolLM2's own template has no tools


def test_a_chat_template_run_trains_end_to_end(tmp_path):
    """A local model folder whose tokenizer carries a Hermes-style template: SFT, GRPO, evaluation, report."""
    from grpolab.run.loop import train

    tok = load_tokenizer()
    original = tok.chat_template
    try:
        tok.chat_template = HERMES
        folder = tmp_path / "tiny-hermes"
        build_tiny_model(len(tok)).save_pretrained(folder)
        tok.save_pretrained(folder)
    finally:
        tok.chat_template = original
    overrides = {
        "model": str(folder),
        "env": "arithmetic",
        "rollout.format": "chat_template",
        "rollout.group_size": 2,
        "rollout.max_new_tokens": 16,
        "train.prompts_per_step": 1,
        "train.steps": 2,
        "train.sft_steps": 2,
        "train.eval_limit": 2,
    }
    run = train(load_config(None, overrides), tmp_path / "run", quiet=True)
    assert [r["step"] for r in run.metrics()] == [1, 2] and run.report_path.is_file()
    assert "heldout/success" in run.metrics()[-1]
