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
        what = (
            f"GRPO step, native vs TRL {s['trl_version']} ({s['model']}, G={s['G']}, "
            f"{s['max_new_tokens']} new tokens, LoRA r={s['lora_rank']}, fp32)"
        )
        fig = (
            f"native {n['s_per_step']:.1f} s/step ({n['completion_tokens_per_step']:.0f} tokens), TRL "
            f"{t['s_per_step']:.1f} s/step ({t['completion_tokens_per_step']:.0f} tokens): "
            f"{v['ratio_trl_over_native_per_step']:.2f}x per step, "
            f"{v['ratio_trl_over_native_per_token']:.2f}x per generated token; "
            f"{_pct(n['fraction_of_matmul_peak'])} vs {_pct(t['fraction_of_matmul_peak'])} of the measured fp32 "
            f"matmul peak ({v['matmul_gflops_fp32']:.0f} GFLOP/s); "
            f"peak RSS {v['peak_rss_mb_both'] / 1024:.1f} GB (both in one process)"
        )
        out.append(f"| {what} | {fig} | `{v['command']}` | {v['date']} |")
    else:
        out.append("| native vs TRL step | not measured yet | `python benchmarks/vs_trl.py` | |")
    lr = _load("learning")
    if lr:
        h = lr["headline"]
        seeds = lr["seeds"]
        per_seed = ", ".join(
            f"seed {k}: {_pct(s['sft_only']['success'])} -> {_pct(s['sft_grpo']['success'])}" for k, s in seeds.items()
        )
        fig = (
            f"held-out success ({h['heldout_tasks']} tasks): base {_pct(lr['base']['success'])}, SFT-only "
            f"{_pct(h['sft_only_success_mean'])}, SFT+GRPO {_pct(h['sft_grpo_success_mean'])} (mean over "
            f"{len(seeds)} seeds; {per_seed}); GRPO margin {100 * h['grpo_margin_mean']:+.0f} points "
            f"(per seed {', '.join(f'{100 * m:+.0f}' for m in h['grpo_margin_per_seed'])}); "
            f"{h['minutes_sft_grpo_mean']:.1f} min per SFT+GRPO run; GRPO-only from base: success "
            f"{_pct(lr['grpo_only']['success'])}, frac_zero_std {lr['grpo_only']['frac_zero_std']:.2f}"
        )
        out.append(
            f"| learning on finance pct_change (SmolLM2-135M, fp32) | {fig} | `{lr['command']}` | {lr['date']} |"
        )
        gs = lr["group_size"]
        fig = "; ".join(
            f"G={g} x {r['prompts_per_step']} prompts: frac_zero_std {r['frac_zero_std']:.2f}, held-out "
            f"{_pct(r['heldout_success_before'])} -> {_pct(r['heldout_success_after'])}"
            for g, r in gs.items()
        )
        out.append(
            f"| group size at 16 samples per step (from one SFT warm start) | {fig} | (same command) | {lr['date']} |"
        )
    else:
        out.append("| learning headline | not measured yet | `python benchmarks/learning.py` | |")
    for name, label in (("step_cost", "GRPO step cost"), ("sim_speed", "simulator speed")):
        r = _load(name)
        if r:
            out.append(
                f"| {label} | `{json.dumps({k: v for k, v in r.items() if k not in ('command', 'date')})}` | "
                f"`{r.get('command', '')}` | {r.get('date', '')} |"
            )
    out.append(
        f"\nMachine: {platform.machine()}, 2 CPU cores, fp32 (figures above come from the JSON files in "
        "benchmarks/results/, written by the commands shown)."
    )
    return out


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
