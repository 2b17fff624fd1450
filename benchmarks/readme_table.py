"""Write the README's results table from benchmarks/results/*.json (never typed by hand).

    .venv/bin/python benchmarks/readme_table.py

Replaces the text between `<!-- results:start -->` and `<!-- results:end -->` in README.md. A benchmark whose
results file is missing gets a row saying so.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
START, END = "<!-- results:start -->", "<!-- results:end -->"


def _load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def rows() -> list[str]:
    out = ["| result | figure | command | date |", "| --- | --- | --- | --- |"]
    v = _load("vs_trl")
    if v:
        n, t, s = v["native"], v["trl"], v["setting"]
        what = f"GRPO step, native vs TRL {s['trl_version']} ({s['model']}, G={s['G']}, {s['max_new_tokens']} new tokens, LoRA r={s['lora_rank']}, fp32)"
        fig = (f"native {n['s_per_step']:.1f} s/step ({n['completion_tokens_per_step']:.0f} tokens), TRL "
               f"{t['s_per_step']:.1f} s/step ({t['completion_tokens_per_step']:.0f} tokens): {v['ratio_trl_over_native_per_step']:.2f}x "
               f"per step, {v['ratio_trl_over_native_per_token']:.2f}x per generated token; {_pct(n['fraction_of_matmul_peak'])} vs "
               f"{_pct(t['fraction_of_matmul_peak'])} of the measured fp32 matmul peak ({v['matmul_gflops_fp32']:.0f} GFLOP/s); "
               f"peak RSS {v['peak_rss_mb_both'] / 1024:.1f} GB (both in one process)")  # fmt: skip
        out.append(f"| {what} | {fig} | `{v['command']}` | {v['date']} |")
    else:
        out.append("| native vs TRL step | not measured yet | `python benchmarks/vs_trl.py` | |")
    lr = _load("learning")
    if lr:
        h = lr["headline"]
        seeds = lr["seeds"]
        per_seed = ", ".join(f"seed {k}: {_pct(s['sft_only']['success'])} -> {_pct(s['sft_grpo']['success'])}"
                             for k, s in seeds.items())  # fmt: skip
        fig = (f"held-out success ({h['heldout_tasks']} tasks): base {_pct(lr['base']['success'])}, SFT-only "
               f"{_pct(h['sft_only_success_mean'])}, SFT+GRPO {_pct(h['sft_grpo_success_mean'])} (mean over "
               f"{len(seeds)} seeds; {per_seed}); GRPO margin {100 * h['grpo_margin_mean']:+.0f} points "
               f"(per seed {', '.join(f'{100 * m:+.0f}' for m in h['grpo_margin_per_seed'])}); "
               f"{h['minutes_sft_grpo_mean']:.1f} min per SFT+GRPO run; GRPO-only from base: success "
               f"{_pct(lr['grpo_only']['success'])}, frac_zero_std {lr['grpo_only']['frac_zero_std']:.2f}")  # fmt: skip
        out.append(
            f"| learning on finance pct_change (SmolLM2-135M, fp32) | {fig} | `{lr['command']}` | {lr['date']} |"
        )
        gs = lr["group_size"]
        fig = "; ".join(f"G={g} x {r['prompts_per_step']} prompts: frac_zero_std {r['frac_zero_std']:.2f}, held-out "
                        f"{_pct(r['heldout_success_before'])} -> {_pct(r['heldout_success_after'])}" for g, r in gs.items())  # fmt: skip
        out.append(
            f"| group size at 16 samples per step (from one SFT warm start) | {fig} | (same command) | {lr['date']} |"
        )
    else:
        out.append("| learning headline | not measured yet | `python benchmarks/learning.py` | |")
    out.append(_bfcl_parity_row())
    for name, label in (("step_cost", "GRPO step cost"), ("sim_speed", "simulator speed")):
        r = _load(name)
        if r:
            out.append(f"| {label} | `{json.dumps({k: v for k, v in r.items() if k not in ('command', 'date')})}` | "
                       f"`{r.get('command', '')}` | {r.get('date', '')} |")  # fmt: skip
    out.append(f"\nMachine: {platform.machine()}, 2 CPU cores, fp32 (figures above come from the JSON files in "
               "benchmarks/results/, written by the commands shown).")  # fmt: skip
    return out


def _bfcl_parity_row() -> str:
    p = _load("bfcl_parity")
    if not p:
        return "| BFCL checker parity | not measured yet | `python benchmarks/bfcl_parity.py` | |"
    o, g, m = p["overall"], p["gold"], p["model_outputs"]
    kinds = [k for k in p["by_kind"] if k not in ("gold", "gold_alternative", "model")]
    parts = [f"gold answers {g['agree']:,}/{g['cases']:,}", f"{len(kinds)} kinds of perturbed answers"]
    if m["cases"]:
        parts.append(f"{m['agree']}/{m['cases']} real outputs of SmolLM2-135M after {m['sft_steps']} SFT steps")
    fig = (
        f"grpolab's checker agrees with BFCL's own (bfcl-eval {p['bfcl_eval_version']}) on {o['agree']:,}/{o['cases']:,} "
        f"cases ({100 * o['agreement']:.2f}%) over {len(p['by_category'])} categories: {', '.join(parts)}; "
        f"{len(p['disagreements'])} disagreements"
    )
    return f"| BFCL checker parity with the official ast_checker | {fig} | `{p['command']}` | {p['date']} |"


def main() -> None:
    readme = ROOT / "README.md"
    text = readme.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"README.md needs the markers {START} and {END}")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(head + START + "\n" + "\n".join(rows()) + "\n" + END + tail)
    print("\n".join(rows()))


if __name__ == "__main__":
    main()
