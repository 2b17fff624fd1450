"""The trl backend and the exported script: same settings, same rewards, tool output masked, two processes."""

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from grpolab.config import load_config  # noqa: E402
from grpolab.engine.sft import reference_tokens  # noqa: E402
from grpolab.envs import env_for  # noqa: E402
from grpolab.models import load_model  # noqa: E402
from grpolab.preflight.probes import PROBES  # noqa: E402
from grpolab.rewards.score import score_transcript  # noqa: E402
from grpolab.trl.backend import build_trl_trainer, prompt_rows  # noqa: E402
from grpolab.trl.export import export_trl  # noqa: E402
from grpolab.vocabulary import (  # noqa: E402
    ENTROPY,
    FRAC_ZERO_STD,
    HELDOUT_SUCCESS,
    KL,
    REWARD_MEAN,
    TOOL_CALL_PROB,
    reward_key,
)

TINY = {
    "model": "tiny",
    "env": "arithmetic",
    "rollout.group_size": 2,
    "rollout.max_new_tokens": 16,
    "train.prompts_per_step": 2,
    "train.steps": 1,
    "train.eval_limit": 2,
}

ODD = {
    **TINY,
    "env": "finance",
    "seed": 7,
    "rollout.group_size": 4,
    "rollout.max_new_tokens": 40,
    "rollout.temperature": 0.9,
    "rollout.top_p": 0.95,
    "grpo.learning_rate": 3e-5,
    "grpo.beta": 0.07,
    "grpo.epsilon": 0.15,
    "grpo.epsilon_high": 0.28,
    "grpo.loss_type": "dapo",
    "grpo.scale_rewards": False,
    "grpo.mu": 2,
    "grpo.max_grad_norm": 0.5,
    "train.steps": 3,
    "train.prompts_per_step": 3,
    "lora.rank": 8,
    "lora.alpha": 24,
    "lora.dropout": 0.05,
    "lora.target_modules": ["q_proj", "v_proj"],
    "reward.weights": {"format": 0.5, "schema": 1.0, "completion": 4.0, "length": -0.1},
}


def _script(tmp_path: Path, overrides: dict, standalone: bool = False) -> Path:
    out = tmp_path / "train_grpo.py"
    export_trl(load_config(None, overrides), out, standalone=standalone)
    return out


def test_exported_grpo_config_equals_the_lab_config(tmp_path):
    from grpolab.trl.settings import bf16_here

    cfg = load_config(None, ODD)
    ns = runpy.run_path(str(_script(tmp_path, ODD)), run_name="exported")
    args = ns["training_args"](str(tmp_path / "o"))
    assert args.num_generations == cfg.rollout.group_size == 4
    episodes = cfg.train.prompts_per_step * cfg.rollout.group_size  # in micro-batches within the token budget
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps == episodes
    assert args.steps_per_generation == args.gradient_accumulation_steps
    assert args.max_steps == cfg.train.steps * cfg.grpo.mu and args.num_iterations == cfg.grpo.mu
    assert args.learning_rate == cfg.grpo.learning_rate and args.beta == cfg.grpo.beta
    assert (args.epsilon, args.epsilon_high) == (cfg.grpo.epsilon, cfg.grpo.epsilon_high)
    assert args.loss_type == "dapo" and args.scale_rewards == "none"
    assert args.max_completion_length == cfg.rollout.max_new_tokens
    assert (args.temperature, args.top_p) == (cfg.rollout.temperature, cfg.rollout.top_p)
    assert args.max_grad_norm == cfg.grpo.max_grad_norm and args.seed == cfg.seed
    assert args.reward_weights == [cfg.reward.weights[k] for k in ("format", "schema", "completion", "length")]
    assert args.lr_scheduler_type == "constant"
    # bf16 only where this host runs it natively (never TRL's default): the answer depends on the CPU
    assert args.bf16 is bf16_here(cfg.train.precision) and args.gradient_checkpointing is False
    lora = ns["peft_config"]()
    assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (8, 24, 0.05)
    assert set(lora.target_modules) == {"q_proj", "v_proj"}
    funcs, _ = ns["reward_functions"](env_for(cfg), cfg)
    assert [f.__name__ for f in funcs] == ["format", "schema", "completion", "length"]
    text = _script(tmp_path, ODD).read_text()
    assert "beta=0.07,  # grpo.beta" in text and "learning_rate=3e-05,  # grpo.learning_rate" in text


def test_unexpressible_settings_are_named_in_the_script_and_on_the_terminal(tmp_path):
    overrides = {**TINY, "grpo.dynamic_filter": "skip"}
    text = _script(tmp_path, overrides).read_text()
    head = text.split("LAB_CONFIG =")[0]
    assert "grpo.dynamic_filter = 'skip'" in head and "grpo.kl_bound" in head
    from typer.testing import CliRunner

    from grpolab.cli import app

    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('model = "tiny"\n[grpo]\ndynamic_filter = "resample"\n')
    result = CliRunner().invoke(app, ["export-trl", "--config", str(cfg_file), "-o", str(tmp_path / "s.py")])
    assert result.exit_code == 0, result.output
    assert "not expressed in TRL" in result.output and "dynamic_filter = 'resample'" in result.output


def test_standalone_script_imports_its_bundled_grpolab(tmp_path):
    script = _script(tmp_path, TINY, standalone=True)
    code = (
        f"import runpy, sys; ns = runpy.run_path({str(script)!r}, run_name='x'); "
        "print(sys.modules['grpolab'].__file__); print(ns['training_args']('o').num_generations)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    path, g = out.stdout.split()[-2:]
    assert ".zip" in path and g == "2"


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    cfg = load_config(None, {**TINY, "env": "finance"})
    env = env_for(cfg)
    model, tok = load_model("tiny")
    return build_trl_trainer(cfg, env, model, tok, tmp_path_factory.mktemp("trl")), cfg, env, tok


def test_same_transcripts_get_the_same_rewards_through_both_backends(trainer):
    t, cfg, env, tok = trainer
    tasks = env.tasks("train")[:3]
    rows, texts = [], []
    for task in tasks:
        for text in [env.reference_transcript(task), *(probe(env, task) for probe in PROBES.values())]:
            rows.append(
                {
                    "prompt": env.messages(task),
                    "task_id": task.id,
                    "transcript": text,
                    "gen_tokens": len(tok(text, add_special_tokens=False).input_ids),
                }
            )
            texts.append(text)
    completions = [[{"role": "assistant", "content": x}] for x in texts]
    per_func = t._calculate_rewards(rows, [r["prompt"] for r in rows], completions, [[0]] * len(rows))
    trl_totals = (per_func * t.reward_weights.unsqueeze(0)).nansum(dim=1)
    native = [
        score_transcript(
            env, env.task(r["task_id"]), r["transcript"], cfg.reward.weights, cfg.reward.length_unit, r["gen_tokens"]
        ).total
        for r in rows
    ]
    assert torch.allclose(trl_totals, torch.tensor(native), atol=1e-5)
    assert len(set(native)) > 3  # the probes really score differently


def test_trl_path_masks_tool_output_from_the_loss(trainer, monkeypatch):
    """Feed reference transcripts (which contain tool responses) through TRL's generate-and-score step."""
    t, cfg, env, tok = trainer
    import grpolab.trl.backend as backend
    from grpolab.engine.rollout import Episode

    def scripted(model, tokenizer, env_, tasks, group, s, gen):
        eps = []
        for task in tasks:
            for _ in range(group):
                p, c, m = reference_tokens(tokenizer, env_, task)
                eps.append(
                    Episode(
                        task=task,
                        group=0,
                        prompt_ids=p,
                        completion_ids=c,
                        mask=m,
                        logprobs=[0.0] * len(c),
                        text=tokenizer.decode(c, skip_special_tokens=True),
                    )
                )
        return eps

    monkeypatch.setattr(backend, "run_episodes", scripted)
    rows = [r for r in prompt_rows(env)[:2] for _ in range(cfg.rollout.group_size)]
    t.model.train()
    out = t._generate_and_score_completions(rows)
    masks = [reference_tokens(tok, env, env.task(r["task_id"]))[2] for r in rows]
    for i, m in enumerate(masks):
        assert out["tool_mask"][i, : len(m)].tolist() == m
    assert 0 in masks[0] and 1 in masks[0]  # the transcript has policy text and a tool response
    t.current_gradient_accumulation_steps = 1  # set by the training loop; this test calls the loss directly
    loss = t.compute_loss(t.model, out)
    assert torch.isfinite(loss)


def _scripted_references(model, tokenizer, env_, tasks, group, s, gen):
    """A rollout that returns each task's reference transcript `group` times (tool responses included)."""
    from grpolab.engine.rollout import Episode

    eps = []
    for task in tasks:
        for _ in range(group):
            p, c, m = reference_tokens(tokenizer, env_, task)
            eps.append(Episode(task, 0, p, c, m, [0.0] * len(c)))
    return eps


@pytest.fixture(scope="module")
def reference_step(trainer) -> dict:
    """One generation batch of reference transcripts through the trainer (it does not depend on the loss type: the
    loss-type tests share it, each on its own copy)."""
    t, cfg, env, tok = trainer
    import grpolab.trl.backend as backend

    rows = [r for r in prompt_rows(env)[:2] for _ in range(cfg.rollout.group_size)]
    t.model.train()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backend, "run_episodes", _scripted_references)
        return t._generate_and_score_completions(rows)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "cispo"])
def test_trl_micro_batches_give_the_one_batch_loss(trainer, reference_step, monkeypatch, loss_type):
    """The mapping splits a step into micro-batches (gradient accumulation over one generation batch): summed, their
    losses are the loss of the step taken in one batch, for every loss type it splits."""
    import copy

    t = trainer[0]
    monkeypatch.setattr(t, "loss_type", loss_type)
    t.model.train()
    out = {k: v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for k, v in reference_step.items()}
    n = len(out["completion_ids"])

    def part(i: int, j: int) -> dict:
        return {k: v[i:j] if isinstance(v, torch.Tensor) and v.dim() and len(v) == n else v for k, v in out.items()}

    with torch.no_grad():
        monkeypatch.setattr(t, "current_gradient_accumulation_steps", 1, raising=False)
        monkeypatch.setattr(t.args, "steps_per_generation", 1)
        whole = t.compute_loss(t.model, out)
        monkeypatch.setattr(t, "current_gradient_accumulation_steps", 2, raising=False)
        monkeypatch.setattr(t.args, "steps_per_generation", 2)
        halves = t.compute_loss(t.model, part(0, n // 2)) + t.compute_loss(t.model, part(n // 2, n))
    assert torch.isfinite(whole) and torch.allclose(whole, halves, rtol=1e-5, atol=1e-7), (whole, halves)


def test_the_trl_step_is_micro_batched_within_the_native_token_budget(tmp_path):
    from grpolab.config import DEMO_CONFIG
    from grpolab.trl.settings import grpo_settings, longest_prompt, micro_batch, micro_batch_cap

    demo = load_config(DEMO_CONFIG)  # 16 episodes of a ~390-token prompt and up to 2 x 160 policy tokens
    args = {s.name: s.value for s in grpo_settings(demo, "o")}
    assert (args["per_device_train_batch_size"], args["gradient_accumulation_steps"]) == (2, 8)
    assert args["steps_per_generation"] == 8  # one generation batch, the whole step, per optimizer step
    bnpo = {
        s.name: s.value
        for s in grpo_settings(
            demo.model_copy(update={"grpo": demo.grpo.model_copy(update={"loss_type": "bnpo"})}), "o"
        )
    }
    assert (bnpo["per_device_train_batch_size"], bnpo["gradient_accumulation_steps"]) == (16, 1)
    assert [micro_batch(n, 4) for n in (16, 8, 12, 6, 7, 1)] == [4, 4, 4, 3, 1, 1]
    # TRL runs each episode's prompt again: 1600 positions // (389 + 320) = 2 episodes (without it: 5)
    assert longest_prompt(demo) == 389 and micro_batch_cap(demo) == 2
    longer = demo.model_copy(update={"rollout": demo.rollout.model_copy(update={"max_new_tokens": 2000})})
    assert micro_batch_cap(longer) == 1
    # the script decides it where it runs: two processes take 8 episodes each, in 4 micro-batches of 2
    script = tmp_path / "train_grpo.py"
    export_trl(load_config(DEMO_CONFIG, {"model": "tiny"}), script)
    env = {**os.environ, "WORLD_SIZE": "2"}
    code = (
        f"import runpy; ns = runpy.run_path({str(script)!r}, run_name='exported'); "
        "print(ns['MICRO_BATCH'], ns['EPISODES_PER_STEP'] // ns['WORLD_SIZE'] // ns['MICRO_BATCH'])"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["2", "4"]
    text = script.read_text()  # (GRPOConfig itself needs the launcher's process group for WORLD_SIZE=2)
    for arg in ("per_device_train_batch_size=MICRO_BATCH", "gradient_accumulation_steps=EPISODES_PER_STEP // "):
        assert arg in text, arg


def test_trl_truncation_mask_drops_exactly_the_budget_cut_episodes(trainer, monkeypatch):
    """With mask_truncated_completions on, TRL's own test (last token EOS or pad) must agree with the lab's rule:
    an answer-stopped episode keeps its loss, a budget-cut one loses it."""
    t, cfg, env, tok = trainer
    import grpolab.trl.backend as backend
    from grpolab.engine.rollout import Episode

    def scripted(model, tokenizer, env_, tasks, group, s, gen):
        eps = []
        for task in tasks:
            for j in range(group):
                p, c, m = reference_tokens(tokenizer, env_, task)
                c, m = c[:-1], m[:-1]  # no EOS at the end: the answer-stop rule or the budget ended it
                eps.append(Episode(task, 0, p, c, m, [0.0] * len(c), stop_reason=("answer", "budget")[j % 2]))
        return eps

    monkeypatch.setattr(backend, "run_episodes", scripted)
    monkeypatch.setattr(t, "mask_truncated_completions", True)
    monkeypatch.setattr(t.args, "mask_truncated_completions", True)
    rows = [r for r in prompt_rows(env)[:2] for _ in range(cfg.rollout.group_size)]
    t.model.train()
    out = t._generate_and_score_completions(rows)
    loss_tokens = (out["completion_mask"] * out["tool_mask"]).sum(-1)
    stops = [e.stop_reason for e in t.rollout_func.last_episodes]
    assert stops == ["answer", "budget"] * 2
    assert [bool(n > 0) for n in loss_tokens] == [True, False, True, False]
    # the appended EOS is not trained on: the answer-stopped episode keeps exactly its own policy tokens
    assert int(loss_tokens[0]) == sum(t.rollout_func.last_episodes[0].mask)


def test_exported_script_carries_the_objective_options_and_the_trl_section(tmp_path):
    options = {
        **TINY,
        "grpo.loss_type": "cispo",
        "grpo.epsilon_high": 4.0,
        "grpo.scale_rewards": "batch",
        "grpo.importance_sampling_level": "sequence",
        "grpo.mask_truncated_completions": True,
        "grpo.multi_objective_aggregation": "normalize_then_sum",
        "grpo.top_entropy_quantile": 0.2,
        "train.trackio_project": "demo-runs",
        "trl": {"per_device_train_batch_size": 2, "sapo_temperature_pos": 0.9},
    }
    ns = runpy.run_path(str(_script(tmp_path, options)), run_name="exported")
    args = ns["training_args"](str(tmp_path / "o"))
    assert (args.loss_type, args.epsilon_high, args.scale_rewards) == ("cispo", 4.0, "batch")
    assert args.importance_sampling_level == "sequence" and args.mask_truncated_completions
    assert args.multi_objective_aggregation == "normalize_then_sum" and args.top_entropy_quantile == 0.2
    assert args.project == "demo-runs"
    assert args.per_device_train_batch_size == 2 and args.sapo_temperature_pos == 0.9  # as written, not computed


def test_train_backend_trl_writes_a_lab_run_dir(tmp_path):
    from typer.testing import CliRunner

    from grpolab.cli import app

    cfg_file = tmp_path / "tiny.toml"
    cfg_file.write_text(
        'model = "tiny"\nenv = "arithmetic"\n[rollout]\ngroup_size = 2\nmax_new_tokens = 12\n'
        "[train]\nsteps = 2\nprompts_per_step = 2\neval_limit = 2\n"
    )
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app, ["train", "--config", str(cfg_file), "--backend", "trl", "--out", str(out), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    import json

    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert {REWARD_MEAN, reward_key("format"), KL, ENTROPY, FRAC_ZERO_STD, TOOL_CALL_PROB} <= set(rows[0])
    assert HELDOUT_SUCCESS in rows[-1] and rows[0]["backend"] == "trl"
    assert json.loads((out / "config.json").read_text())["train"]["backend"] == "trl"
    result = CliRunner().invoke(app, ["eval", "--run", str(out), "--limit", "2", "--json"])
    assert result.exit_code == 0, result.output


def test_exported_script_runs_on_two_cpu_processes_with_accelerate(tmp_path, request):
    # on a user's folder as `grpolab new-env` writes it: tasks from JSONL (env data), a tools module, and a
    # TRL-shaped reward from a plugin file, which the script imports before it reads its config
    from grpolab.rewards import unregister_reward
    from grpolab.scaffold import new_env

    request.addfinalizer(lambda: unregister_reward("names_unit"))  # exporting imported it here too
    folder = new_env("units", tmp_path)
    overrides = {**TINY, "env": None, "train.steps": 2, "train.sft_steps": 1}
    out = tmp_path / "train_grpo.py"
    export_trl(load_config(folder / "config.toml", overrides), out)
    script = out
    assert str(folder / "rewards.py") in script.read_text() and str(folder / "tasks.jsonl") in script.read_text()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    accelerate = Path(sys.executable).with_name("accelerate")
    out = subprocess.run(
        [
            str(accelerate),
            "launch",
            "--config_file",
            str(tmp_path / "accelerate_cpu2.yaml"),
            str(script),
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "2 steps on 2 process(es)" in out.stdout
    assert (tmp_path / "out" / "final").is_dir()


def test_exported_script_is_lint_clean_python(tmp_path):
    """The script comes from a real template file: the rendered output must be Python that ruff accepts."""
    import shutil

    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    for standalone in (False, True):
        script = tmp_path / f"s{int(standalone)}" / "train_grpo.py"
        script.parent.mkdir()  # export_trl makes no folder
        export_trl(load_config(None, ODD), script, standalone=standalone)
        # the project's rules but import order: outside the repository, grpolab is a third-party import
        lint = [ruff, "check", "--isolated", "--select", "E,F,B,UP", "--line-length", "120", str(script)]
        proc = subprocess.run(lint, capture_output=True)
        assert proc.returncode == 0, proc.stdout.decode()
