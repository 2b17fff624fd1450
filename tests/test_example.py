"""examples/grpo_one_file.py runs real GRPO steps on the tiny random model: tools run, rewards and loss are finite,
the adapters move."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

from grpolab.engine import rollout
from grpolab.engine.logprobs import group_token_stats
from grpolab.engine.sft import reference_tokens

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "grpo_one_file.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("grpo_one_file", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def first_of_each_group_writes_its_reference(run_episodes):
    """`run_episodes` with the first episode of each group teacher-forced through its task's reference transcript
    (the engine's `choose` hook): the tiny random model never writes a tool call of its own, so this is how one
    reaches the tool. The other episodes sample from the model."""

    def forced(model, tokenizer, env, tasks, group_size, settings, generator=None, *args, **kwargs):
        script = {t.id: reference_tokens(tokenizer, env, t)[1] for t in tasks}
        first: dict[int, int] = {}  # group -> id() of its forced episode

        def choose(episodes, logits):
            ids, _ = rollout.sample_next(logits, settings, generator)
            for row, e in enumerate(episodes):
                if first.setdefault(e.group, id(e)) == id(e):
                    ids[row] = script[e.task.id][len(e.completion_ids)]
            logp = torch.log_softmax(logits / settings.temperature, -1)
            return ids, logp.gather(-1, ids[:, None]).squeeze(-1)

        return run_episodes(model, tokenizer, env, tasks, group_size, settings, generator, choose=choose)

    return forced


@pytest.fixture
def alone():
    """The example's process has no plugin rewards: ones another test registered in this worker (the scaffold's
    names_unit, letter U) would clash with the example's own component's letter; they are back afterwards."""
    from grpolab.rewards import components

    saved = dict(components._REGISTERED)
    components._REGISTERED.clear()
    yield
    components._REGISTERED.update(saved)


def test_the_example_runs_grpo_steps_with_real_tool_calls(example, alone, monkeypatch, tmp_path):
    monkeypatch.setattr(example, "run_episodes", first_of_each_group_writes_its_reference(example.run_episodes))
    argv = ["--model", "tiny", "--steps", "2", "--group-size", "3", "--sft-steps", "1", "--out", str(tmp_path)]
    logs, policy = example.main(argv)

    assert [log.step for log in logs] == [1, 2]  # neither step skipped
    for log in logs:
        assert len(log.rewards) == len(log.episodes) == 2 * 3
        assert all(math.isfinite(r) for r in log.rewards) and math.isfinite(log.loss) and math.isfinite(log.kl)
        assert max(log.rewards) > min(log.rewards)  # a learning signal: the advantages are not all 0
        assert log.grad_norm > 0 and log.update_norm > 0
        calling = [e for e in log.episodes if e.results]
        assert len(calling) >= 2 and log.tool_calls >= 2  # one forced episode per group at least
        for e in calling:
            for (name, arguments), result in zip(e.evidence.calls, e.results, strict=True):
                assert name == "convert" and result.response == example.convert(**arguments)  # the tool really ran
            assert 0 in e.mask  # its response was spliced in as tool output, outside the loss
            assert e.score.components["schema"] > 0
        solved = [e for e in log.episodes if e.score.solved]
        assert solved and all(e.score.components["unit"] == 1.0 for e in solved)  # the verifier and the reward read it

    # peft starts LoRA's B matrices at zero (the seeding's adapters were merged away): any nonzero B was moved by
    # a GRPO optimizer step; the base weights are frozen
    lora_b = [p for n, p in policy.named_parameters() if "lora_B" in n]
    assert lora_b and any(bool(p.detach().abs().sum() > 0) for p in lora_b)
    assert all(not p.requires_grad for n, p in policy.named_parameters() if "lora_" not in n)

    # and they moved the right way: the last step's best episode (a reference solution, advantage > 0) is likelier
    # under the trained policy than under the start (the adapters off)
    best = max(logs[-1].episodes, key=lambda e: e.score.total)
    pad = policy.config.pad_token_id

    def logp_sum() -> float:
        stats, mask = group_token_stats(policy, best.prompt_ids, [best.completion_ids], [best.mask], pad)
        return float((stats.logp * mask).sum())

    with torch.no_grad():
        trained = logp_sum()
        with policy.disable_adapter():
            start = logp_sum()
    assert trained > start
