"""Checker parity: grpolab's BFCL checker against BFCL's own, on the same decoded model outputs.

    .venv/bin/python benchmarks/bfcl_parity.py [--model-tasks 6] [--sft-steps 12] [--sft-batch-size 2]
                                               [--max-new-tokens 128] [--venv DIR]

grpolab's checker (`grpolab.envs.bfcl.checker`, through `BFCLEnv.verify_calls`) runs here, in the project's venv.
BFCL's runs in a separate virtual environment (created once, under the grpolab cache; `--venv` to choose) with
`bfcl-eval` and all its dependencies: sentence-transformers there requires torch, so torch is pinned first (as the
Makefile does) or a bare requirement would pull a multi-GB CUDA build; `soundfile` is added because qwen-agent, a
dependency, imports it without declaring it. In that venv this same file runs as a worker (`--worker IN OUT`, JSON
in and out, standard library and bfcl_eval only) and calls BFCL's entry checks, `_evaluate_single_ast_entry` and
`_evaluate_single_relevance_entry` of `bfcl_eval.eval_checker.eval_runner`, on BFCL's own copies of the questions
and possible answers, with a stub handler whose `decode_ast` returns the decoded calls (the two projects parse
different text formats, so the comparison starts from the decoded calls: a malformed call makes the output
undecodable). BFCL is told the model is `Qwen_Qwen3-0.6B`, a prompt-mode entry of its registry: function names are
compared as the model wrote them (FC entries rename "a.b" to "a_b", which our prompts never do).

Cases: the gold answers of every task of the 11 single-turn categories (and a second gold answer made of the last
acceptable values), systematic perturbations of them (wrong value, wrong type, missing/extra parameters, wrong
function name, dropped/extra/reordered parallel calls, undecodable output...), and real outputs of the embedded
SmolLM2-135M after a short SFT warm start, from the greedy held-out evaluation (`--model-tasks` per category).
Writes benchmarks/results/bfcl_parity.json: agreement overall, on gold, per category and per case kind, and every
disagreement with its case.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import CONFIGS, write_results  # standard library only at import: the worker imports this file too

BFCL_MODEL = "Qwen_Qwen3-0.6B"
"""BFCL registry entry passed to its checker (prompt mode: no "." -> "_" renaming of function names)."""
TORCH_PIN = "torch==2.13.0"
UNDECODABLE = None
"""A case's `calls` when the output does not decode (a malformed call)."""


# ---- the worker: runs in the parity venv, imports only the standard library and bfcl_eval ----------------------


class _DecodedHandler:
    """Stands in for a BFCL model handler: the output is already decoded."""

    def decode_ast(self, result: Any, language: Any = None, has_tool_call_tag: bool = False) -> list[dict[str, Any]]:
        if result is UNDECODABLE:
            raise ValueError("the output has a malformed call")
        return [{name: args} for name, args in result]


def _digest(rows: list[Any]) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]


def worker(inp: Path, out: Path) -> None:
    from bfcl_eval.constants.enums import Language, ReturnFormat
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.utils import is_relevance_or_irrelevance, load_dataset_entry, load_ground_truth_entry

    cases = json.loads(inp.read_text())
    prompts: dict[str, dict[str, Any]] = {}
    answers: dict[str, Any] = {}
    digests = {}
    for category in sorted({c["category"] for c in cases}):
        entries = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
        prompts.update({e["id"]: e for e in entries})
        truth = [] if is_relevance_or_irrelevance(category) else load_ground_truth_entry(category)
        answers.update({e["id"]: e["ground_truth"] for e in truth})
        by_id = {e["id"]: e["ground_truth"] for e in truth}
        digests[category] = _digest(sorted([e["id"], e["function"], by_id.get(e["id"])] for e in entries))
    handler = _DecodedHandler()
    results = []
    for case in cases:
        category, calls = case["category"], case["calls"]
        try:
            if is_relevance_or_irrelevance(category):
                r = eval_runner._evaluate_single_relevance_entry(
                    handler, case["id"], calls, prompts[case["id"]], BFCL_MODEL, category
                )
            else:
                r = eval_runner._evaluate_single_ast_entry(
                    handler,
                    case["id"],
                    calls,
                    answers[case["id"]],
                    prompts[case["id"]],
                    BFCL_MODEL,
                    category,
                    language=Language.PYTHON,
                    return_format=ReturnFormat.PYTHON,
                    has_tool_call_tag=False,
                )
            results.append(
                {
                    "valid": bool(r["valid"]),
                    "error_type": r.get("error_type", ""),
                    "error": json.dumps(r.get("error", ""), default=str)[:400],
                }
            )
        except Exception as exc:  # BFCL raising is a finding, not a crash of the benchmark
            results.append({"valid": None, "error_type": "raised", "error": f"{type(exc).__name__}: {exc}"[:400]})
    out.write_text(json.dumps({"results": results, "digests": digests}))


# ---- the parity venv -------------------------------------------------------------------------------------------


def ensure_venv(path: Path, version: str) -> Path:
    python = path / "bin" / "python"
    stamp = path / f".bfcl-eval-{version}"
    if stamp.is_file():
        return python
    print(f"creating the parity venv at {path} (bfcl-eval {version} with its dependencies; a few minutes)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(path)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, TORCH_PIN], check=True)  # before anything that requires torch (sentence-transformers)
    subprocess.run([*pip, f"bfcl-eval=={version}", "soundfile"], check=True)
    stamp.touch()
    return python


def run_worker(python: Path, cases: list[dict[str, Any]]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "cases.json", Path(tmp) / "results.json"
        inp.write_text(json.dumps(cases))
        # bfcl_eval creates result/score folders under BFCL_PROJECT_ROOT when imported: keep them in the temp dir
        env = {**os.environ, "BFCL_PROJECT_ROOT": tmp}
        subprocess.run([str(python), __file__, "--worker", str(inp), str(out)], check=True, env=env)
        return json.loads(out.read_text())


# ---- the cases -------------------------------------------------------------------------------------------------


def _last_value(acceptable: Any, required: bool) -> Any:
    """The last acceptable value (nested answers resolved the same way); _OMIT when only "" is acceptable."""
    from grpolab.envs.bfcl.env import _OMIT

    values = [v for v in (acceptable if isinstance(acceptable, list) else []) if v != ""]
    if not values:
        return _OMIT
    v = values[-1]
    if isinstance(v, dict) and v and all(isinstance(x, list) for x in v.values()):
        return {k: r for k, x in v.items() if (r := _last_value(x, False)) is not _OMIT}
    if isinstance(v, list):
        return [_last_value([x], False) if isinstance(x, dict) else x for x in v]
    return v


def _alternative_gold(task: Any) -> list[tuple[str, dict[str, Any]]]:
    from grpolab.envs.bfcl.env import _OMIT

    calls = []
    for expected in task.truth:
        ((name, params),) = expected.items()
        calls.append((name, {k: v for k, accs in params.items() if (v := _last_value(accs, False)) is not _OMIT}))
    return calls


def _other_value(value: Any, rng: random.Random) -> Any:
    """A different value of the same type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.choice([1, -1, 7])
    if isinstance(value, float):
        return value + rng.choice([0.5, 1.0, -2.25])
    if isinstance(value, str):
        return value + rng.choice(["x", " north", "2"])
    if isinstance(value, list):
        return value + value[-1:] if value else ["x"]
    if isinstance(value, dict):
        if not value:
            return {"x": 1}
        key = rng.choice(sorted(value))
        return {**value, key: _other_value(value[key], rng)}
    return "x"


def _other_type(value: Any) -> Any:
    """The same content as another type (what small models often write)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return int(value) if value.strip().lstrip("-").isdigit() else [value]
    if isinstance(value, list | dict):
        return json.dumps(value)
    return "None"


def _dummy(spec: dict[str, Any]) -> Any:
    return {"integer": 3, "float": 1.5, "boolean": True, "array": ["a"], "tuple": ["a"], "dict": {"a": 1}}.get(
        spec.get("type"), "something"
    )


def perturbations(task: Any, seed: int) -> list[tuple[str, Any]]:
    """(kind, calls) cases made from a task's answer; calls is UNDECODABLE for a malformed output."""
    functions = task.meta["functions"]
    by_name = {f["name"]: f for f in functions}
    gold = [(name, dict(args)) for name, args in task.reference_calls]
    if "irrelevance" in task.kind:
        first = functions[0]["name"] if functions else "any_function"
        return [("gold", []), ("call_anyway", [(first, {})]), ("undecodable", UNDECODABLE)]
    if "relevance" in task.kind:
        return [("gold", gold), ("no_call", []), ("undecodable", UNDECODABLE)]
    out: list[tuple[str, Any]] = [("gold", gold), ("no_call", []), ("undecodable", UNDECODABLE)]
    alternative = _alternative_gold(task)
    if alternative != gold:
        out.append(("gold_alternative", alternative))

    def edit(kind: str, change: Any) -> None:
        """Apply `change(name, args, spec, rng) -> (name, args) or None` to one call picked at random."""
        rng = random.Random(f"{seed}:{task.id}:{kind}")
        i = rng.randrange(len(gold))
        name, args = gold[i]
        function = by_name.get(name, {})
        changed = change(name, dict(args), function, rng)
        if changed:  # None or [] where the edit does not apply to this task
            out.append((kind, [*gold[:i], changed, *gold[i + 1 :]]))

    def params_of(args: dict[str, Any], function: dict[str, Any], pred: Any) -> list[str]:
        props = function.get("parameters", {}).get("properties", {})
        return sorted(p for p in args if pred(p, props.get(p, {}), function.get("parameters", {}).get("required", [])))

    def on_param(pred: Any, new_value: Any) -> Any:
        def change(name, args, function, rng):
            options = params_of(args, function, pred)
            if not options:
                return None
            p = rng.choice(options)
            value = new_value(args[p], rng)
            return None if value == args[p] and type(value) is type(args[p]) else (name, {**args, p: value})

        return change

    edit("wrong_value", on_param(lambda p, spec, req: True, _other_value))
    edit("wrong_type", on_param(lambda p, spec, req: True, lambda v, rng: _other_type(v)))
    edit(
        "string_variant",
        on_param(
            lambda p, spec, req: spec.get("type") == "string",
            lambda v, rng: v.upper().replace(" ", "_") + "." if isinstance(v, str) else v,
        ),
    )
    edit(
        "float_as_int",
        on_param(
            lambda p, spec, req: spec.get("type") == "float",
            lambda v, rng: int(v) if isinstance(v, float) and v.is_integer() else v,
        ),
    )
    edit(
        "int_as_float",
        on_param(lambda p, spec, req: spec.get("type") == "integer", lambda v, rng: float(v) if type(v) is int else v),
    )
    edit(
        "missing_required",
        lambda n, a, f, rng: (
            (o := params_of(a, f, lambda p, s, req: p in req))
            and (n, {k: v for k, v in a.items() if k != rng.choice(o)})
        ),
    )
    edit(
        "missing_optional",
        lambda n, a, f, rng: (
            (o := params_of(a, f, lambda p, s, req: p not in req))
            and (n, {k: v for k, v in a.items() if k != rng.choice(o)})
        ),
    )
    edit("extra_undeclared", lambda n, a, f, rng: (n, {**a, "zz_extra": 1}))

    def extra_declared(name, args, function, rng):
        props = function.get("parameters", {}).get("properties", {})
        free = sorted(p for p in props if p not in args)
        if not free:
            return None
        p = rng.choice(free)
        return name, {**args, p: props[p].get("default", _dummy(props[p])) if isinstance(props[p], dict) else 1}

    edit("extra_declared", extra_declared)
    edit("wrong_function", lambda n, a, f, rng: (rng.choice([g for g in by_name if g != n] or [n + "_v2"]), a))
    edit(
        "name_separator",
        lambda n, a, f, rng: (
            (n.replace(".", "_") if "." in n else n.replace("_", ".", 1), a) if "." in n or "_" in n else None
        ),
    )
    if len(gold) > 1:
        out += [("reordered", gold[::-1]), ("dropped_call", gold[:-1])]
    out.append(("extra_call", gold + gold[:1]))
    return out


def synthetic_cases(env: Any, seed: int) -> list[dict[str, Any]]:
    cases = []
    for task in env.tasks("train") + env.tasks("heldout"):
        for kind, calls in perturbations(task, seed):
            cases.append({"id": task.id, "category": task.kind, "kind": kind, "calls": calls})
    return cases


def model_cases(
    env: Any, per_category: int, sft_steps: int, sft_batch_size: int, max_new_tokens: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Greedy held-out outputs of the embedded model after a short SFT warm start on the non-live train split."""
    from grpolab.config import load_config
    from grpolab.engine.evaluate import evaluate
    from grpolab.engine.policy import build_policy
    from grpolab.engine.sft import sft_warm_start
    from grpolab.envs.bfcl.data import CATEGORIES, is_live
    from grpolab.rewards.replay import replay

    cfg = load_config(CONFIGS / "bfcl.toml")
    cfg.rollout.max_new_tokens = max_new_tokens  # parity needs the calls, not long rambles after them
    t0 = time.perf_counter()
    model, tokenizer, _ = build_policy(cfg)  # load_model("smollm2") with LoRA adapters, as training does
    env.task_kinds = [k for k in CATEGORIES if not is_live(k)]
    sft_warm_start(
        model,
        tokenizer,
        env,
        sft_steps,
        sft_batch_size,
        cfg.train.sft_learning_rate,
        cfg.seed,
        on_step=lambda step, loss: print(f"  SFT step {step}/{sft_steps}: loss {loss:.3f}", flush=True),
    )
    t_sft = time.perf_counter() - t0
    cases, success = [], {}
    for category in CATEGORIES:
        env.task_kinds = [category]
        summary, episodes = evaluate(model, tokenizer, env, cfg, "heldout", per_category)
        success[category] = summary["heldout/success"]
        for e in episodes:
            r = replay(env, e.task, e.text)
            calls = [(c.name, c.arguments) for c in r.calls] if all(c.ok for c in r.calls) else UNDECODABLE
            cases.append(
                {
                    "id": e.task.id,
                    "category": category,
                    "kind": "model",
                    "calls": calls,
                    "text": e.text,
                    "completion": e.score.components["completion"] if e.score else None,
                }
            )
        print(
            f"  model outputs: {category} {len(episodes)} episodes, success {summary['heldout/success']:.2f}",
            flush=True,
        )
    env.task_kinds = None
    setting = {
        "model": "smollm2",
        "sft_steps": sft_steps,
        "sft_batch_size": sft_batch_size,
        "per_category": per_category,
        "max_new_tokens": cfg.rollout.max_new_tokens,
        "sft_and_generation_s": round(time.perf_counter() - t0, 1),
        "sft_s": round(t_sft, 1),
        "grpolab_success": success,
    }
    return cases, setting


# ---- comparing -------------------------------------------------------------------------------------------------


def grpolab_verdict(env: Any, tasks: dict[str, Any], case: dict[str, Any]) -> tuple[bool, str]:
    from grpolab.protocol import ToolCall

    if case["calls"] is UNDECODABLE:
        calls = [ToolCall(raw="{", error="tool call is not valid JSON")]
    else:
        calls = [ToolCall(raw="", name=name, arguments=args) for name, args in case["calls"]]
    verdict = env.verify_calls(tasks[case["id"]], calls)
    return verdict.passed, verdict.reason


def _rate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    agree = sum(r["agree"] for r in rows)
    return {
        "cases": len(rows),
        "agree": agree,
        "agreement": round(agree / len(rows), 5) if rows else None,
        "grpolab_pass": sum(r["grpolab"] for r in rows),
        "bfcl_pass": sum(r["bfcl"] is True for r in rows),
    }


def data_digests(env: Any) -> dict[str, str]:
    """The same digest the worker computes from BFCL's files, from grpolab's tasks (ids, functions, answers)."""
    rows: dict[str, list[Any]] = {}
    for task in env.tasks("train") + env.tasks("heldout"):
        rows.setdefault(task.kind, []).append([task.id, task.meta["functions"], task.truth or None])
    return {k: _digest(sorted(v)) for k, v in rows.items()}


def _by(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    return {k: _rate([r for r in rows if r[key] == k]) for k in sorted({r[key] for r in rows})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", nargs=2, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--model-tasks", type=int, default=6, help="held-out model outputs per category (0: none)")
    parser.add_argument("--sft-steps", type=int, default=12, help="SFT warm start before generating")
    parser.add_argument(
        "--sft-batch-size",
        type=int,
        default=2,
        help="SFT batch (full-vocabulary logits of long BFCL prompts: 4 took 12 GB)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=128, help="generation budget per model output")
    parser.add_argument("--seed", type=int, default=0, help="seed of the perturbations")
    parser.add_argument("--venv", type=Path, default=None, help="parity venv (default: under the grpolab cache)")
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    t0 = time.perf_counter()
    from grpolab.envs.bfcl.data import package_version
    from grpolab.envs.bfcl.env import BFCLEnv
    from grpolab.models import cache_dir

    version = package_version()
    if version is None:
        raise SystemExit("bfcl-eval is not installed in the project's venv: run `make setup`")
    python = ensure_venv(args.venv or cache_dir() / f"bfcl-parity-venv-{version}", version)
    t_venv = time.perf_counter() - t0
    env = BFCLEnv()
    cases = synthetic_cases(env, args.seed)
    setting: dict[str, Any] = {}
    if args.model_tasks > 0:
        model, setting = model_cases(env, args.model_tasks, args.sft_steps, args.sft_batch_size, args.max_new_tokens)
        cases += model
    t1 = time.perf_counter()
    tasks = env.all_tasks()
    ours = [grpolab_verdict(env, tasks, c) for c in cases]
    t_ours = time.perf_counter() - t1
    t1 = time.perf_counter()
    theirs = run_worker(python, [{k: c[k] for k in ("id", "category", "calls")} for c in cases])
    t_theirs = time.perf_counter() - t1
    rows = []
    for case, (ok, reason), bfcl in zip(cases, ours, theirs["results"]):
        rows.append(
            {
                **case,
                "grpolab": ok,
                "grpolab_reason": reason,
                "bfcl": bfcl["valid"],
                "bfcl_error_type": bfcl["error_type"],
                "bfcl_error": bfcl["error"],
                "agree": ok == bfcl["valid"],
            }
        )
    ours_digests = data_digests(env)
    gold = [r for r in rows if r["kind"] in ("gold", "gold_alternative")]
    disagreements = [
        {
            k: r.get(k)
            for k in (
                "id",
                "category",
                "kind",
                "calls",
                "text",
                "grpolab_reason",
                "grpolab",
                "bfcl",
                "bfcl_error_type",
                "bfcl_error",
            )
        }
        for r in rows
        if not r["agree"]
    ]
    wall = time.perf_counter() - t0
    command = "python benchmarks/bfcl_parity.py" + "".join(
        f" --{k.replace('_', '-')} {getattr(args, k)}"
        for k in ("model_tasks", "sft_steps", "sft_batch_size", "max_new_tokens")
    )
    result = {
        "bfcl_eval_version": version,
        "bfcl_model_name": BFCL_MODEL,
        "data_identical": {k: ours_digests.get(k) == v for k, v in theirs["digests"].items()},
        "overall": _rate(rows),
        "gold": _rate(gold),
        "model_outputs": {**_rate([r for r in rows if r["kind"] == "model"]), **setting},
        "bfcl_raised": sum(r["bfcl"] is None for r in rows),
        "by_category": _by(rows, "category"),
        "by_kind": _by(rows, "kind"),
        "disagreements": disagreements,
        "timing_s": {
            "venv": round(t_venv, 1),
            "grpolab_checker": round(t_ours, 2),
            "bfcl_checker": round(t_theirs, 1),
            "wall": round(wall, 1),
        },
        "date": time.strftime("%Y-%m-%d"),
        "command": command,
    }
    write_results("bfcl_parity", result)
    o, g = result["overall"], result["gold"]
    print(
        f"agreement {o['agree']}/{o['cases']} ({100 * o['agreement']:.2f}%), gold {g['agree']}/{g['cases']}; "
        f"{len(disagreements)} disagreements; BFCL raised on {result['bfcl_raised']}; {wall:.0f} s"
    )
    for kind, r in result["by_kind"].items():
        print(f"  {kind:<18} {r['agree']}/{r['cases']}")
    for d in disagreements[:20]:
        print(
            f"  {d['id']} {d['kind']}: grpolab {d['grpolab']} ({d['grpolab_reason'][:80]}) vs BFCL {d['bfcl']} "
            f"({d['bfcl_error_type']})"
        )


if __name__ == "__main__":
    main()
