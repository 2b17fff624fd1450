"""Write docs/results.md and the README's measured tables from benchmarks/results/*.json (never typed by hand).

    .venv/bin/python benchmarks/readme_table.py            # write them
    .venv/bin/python benchmarks/readme_table.py --check    # exit 1 when a written file is stale (make test runs it)

docs/results.md is written whole: the table of every result (figure, command, date) and the readings of
`readings.py`. In README.md only the text between `<!-- NAME:start -->` and `<!-- NAME:end -->` markers is
replaced (`demo`: the demo's table, `byo`: the scaffold's). A benchmark whose results file is missing gets a row
saying so, or no section.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import readings
from common import machine_line
from readings import ci, load, pct, points

ROOT = Path(__file__).resolve().parent.parent
RESULTS = readings.RESULTS
RESULTS_MD = ROOT / "docs" / "results.md"
README = ROOT / "README.md"


def _vs_trl(v: dict) -> str:
    n, t, s = v["native"], v["trl"], v["setting"]
    out = (
        f"TRL {t['s_per_step']:.1f} s/step, native exact {n['s_per_step']:.1f} s/step "
        f"({v['ratio_trl_over_native_per_step']:.2f}x faster)"
    )
    if "native_int8" in v:
        i = v["native_int8"]
        out += (
            f", native int8 {i['s_per_step']:.1f} s/step ({v['ratio_trl_over_native_int8_per_step']:.2f}x; "
            f"sampler KL {i['sampler_kl']:.4f})"
        )
    return (
        out + f"; {s['max_new_tokens']} tokens x G={s['G']} per step, equal work; "
        f"{pct(n['fraction_of_matmul_peak'])} vs {pct(t['fraction_of_matmul_peak'])} of the measured fp32 matmul "
        f"peak ({v['matmul_gflops_fp32']:.0f} GFLOP/s)"
    )


def _step_cost(r: dict) -> str:
    parts = []
    for p in r["phases"]:
        if p["seconds"] < 0.05 and "held-out" not in p["phase"]:
            continue
        rate = ""  # one decimal: issue 25's targets (decode 60% of its bound, forward + backward 45%) sit near it
        if "fraction_of_bound" in p:
            rate = f", {100 * p['fraction_of_bound']:.1f}% of its bound"
        elif "fraction_of_peak" in p:
            rate = f", {100 * p['fraction_of_peak']:.1f}% of peak"
        parts.append(f"{p['phase']} {p['seconds']:.1f} s{rate}")
    unit = ""
    if "per_unit" in r:
        u = r["per_unit"]
        pad = r["group_padding_per_step"]
        unit = (
            f". Per unit of work: decode {u['decode_ms_per_token']:.1f} ms per decoded token, reference + "
            f"forward + backward {u['update_ms_per_policy_token']:.1f} ms per policy token; a group padded to its "
            f"longest episode would be {pct(min(pad))}-{pct(max(pad))} padding"
        )
    return (
        f"{r['s_per_step']:.1f} s/step ({r['engine']}): " + "; ".join(parts) + unit + ". "
        "Peaks measured in the same run: "
        f"{r['matmul_gflops_fp32']:.0f} GFLOP/s fp32 matmul ({r.get('matmul_peak_kernel_fp32', 'mm 2048')}), "
        f"{r['bandwidth_gbs']:.1f} GB/s read; "
        f"peak RSS {r['peak_rss_mb'] / 1024:.1f} GB" + _rss_by_phase(r)
    )


def _rss_by_phase(r: dict) -> str:
    """` (after warm start 3.4, after step 1 4.8, ..., after evaluation 5.8)`: where the peak was reached."""
    by = r.get("peak_rss_mb_by_phase")
    if not by:
        return ""
    return " (" + ", ".join(f"{k.replace('_', ' ')} {v / 1024:.1f}" for k, v in by.items()) + ")"


def _decode_step(d: dict) -> str:
    v = d["variants"]
    return (
        f"{d['rows']} rows x {d['context']} tokens of context: through peft's modules "
        f"{v['modules']['ms_per_step']:.0f} ms/step ({pct(v['modules']['fraction_of_bound'])} of its bound), "
        "fused rollout weights "
        f"{v['fused']['ms_per_step']:.0f} ms/step ({pct(v['fused']['fraction_of_bound'])}; building them "
        f"{d['fused_build_ms']:.0f} ms once per rollout, counted), {d['speedup_fused']:.2f}x; "
        + (
            f"the same weights in oneDNN's packed layout {v['packed_sdpa']['ms_per_step']:.0f} ms/step "
            f"({pct(v['packed_sdpa']['fraction_of_bound'])}; packing {d['packed_build_ms']:.0f} ms per rollout, "
            f"counted), {d['speedup_packed']:.2f}x more; one-token attention as two batched matmuls instead of SDPA "
            f"{v['packed']['ms_per_step']:.0f} ms/step, {d['speedup_direct_attention']:.2f}x; "
            if "packed_sdpa" in v
            else f"the same weights in oneDNN's packed layout {v['packed']['ms_per_step']:.0f} ms/step "
            f"({pct(v['packed']['fraction_of_bound'])}; packing {d['packed_build_ms']:.0f} ms per rollout, counted), "
            f"{d['speedup_packed']:.2f}x more; "
            if "packed" in v
            else ""
        )
        + f"bound {d['bound_ms']:.0f} ms at {d['bandwidth_gbs']:.1f} GB/s read"
    )


LEARNING = {
    "learning": "learning on finance",
    "learning_int8": "learning on finance",
    "learning_demo_answer_stop": "the demo after the answer-stop rule (20 GRPO steps)",
}
"""Learning results shown in the table, with the title of their row."""


TRANSFER = {
    "learning_transfer": "finance",
    "learning_transfer_bfcl": "BFCL",
    "learning_transfer_bfcl_warm_start": "BFCL recipe's warm start (SFT lr 5e-4)",
    "learning_transfer_bfcl_warm_start_lr": "BFCL warm start at SFT lr 2.5e-4",
    "learning_transfer_bfcl_lr": "BFCL from the warm start at SFT lr 2.5e-4",
}
"""Issue 26's settings (benchmarks/learning_transfer.py), with the name of their row."""


def _transfer(t: dict, what: str) -> list[str]:
    n = len(t["seeds"])
    seeds = f"{n} seed{'s' if n > 1 else ''} x {t['per_kind']} held-out tasks per kind"
    warm_start_only = t["grpo_steps"] == 0  # what every arm of that recipe starts from
    if warm_start_only:
        title = f"{what}, no GRPO, {seeds}, mean [95% CI]"
    else:
        title = f"where GRPO earns its keep: {what}, {seeds}, {t['grpo_steps']} GRPO steps, mean [95% CI]"
    parts = []
    for arm, envs in t["success"].items():
        per_env = ", ".join(
            f"{env} {'; '.join(f'{k} {ci(v)}' for k, v in kinds.items())}" for env, kinds in envs.items()
        )
        parts.append(f"{arm}: {per_env}; retention (capitals) {ci(t['retention'][arm])}")
    fig = " / ".join(parts) + f" (base model's retention {pct(t['base_retention'])})"
    if warm_start_only:
        fig += "; retention per seed " + ", ".join(f"{r['seed']}: {pct(r['retention'])}" for r in t["runs"])
    rows = [f"| {title} | {fig} | `{t['command']}` | {t['date']} |"]
    if t["grpo_margin_over_matched_sft"]:
        margins = "; ".join(
            f"{env} {k} {points(v)}"
            for env, kinds in t["grpo_margin_over_matched_sft"].items()
            for k, v in kinds.items()
        )
        rows.append(
            f"| GRPO margin over matched SFT ({what}), paired by seed and task | {margins} | (same command) | |"
        )
    return rows


def _learning(lr: dict, what: str = "learning on finance") -> list[str]:
    arms = lr["arms"]
    fig = "; ".join(
        f"{name}: success {ci(a['success'])}, tool calls {ci(a['tool_call_prob'])}" for name, a in arms.items()
    )
    seeded = next(iter(arms.values()))
    fig += (
        f" (after seeding: success {pct(seeded['seeded_success'])}, tool calls {pct(seeded['seeded_tool_call_prob'])})"
    )
    n = len(lr["seeds"])
    title = f"{what}, {n} seed{'s' if n > 1 else ''} x {lr['heldout_tasks']} held-out tasks, mean [95% CI]"
    rows = [f"| {title} | {fig} | `{lr['command']}` | {lr['date']} |"]
    if "grpo_margin_over_matched_sft" in lr:
        m = lr["grpo_margin_over_matched_sft"]
        fig = (
            f"{100 * m[0]:+.0f} points [{100 * m[1]:+.0f}, {100 * m[2]:+.0f}] (matched SFT: "
            f"{', '.join(map(str, lr['matched_sft_steps']))} SFT steps for the GRPO arm's CPU time)"
        )
        rows.append(f"| GRPO margin over SFT-only at matched CPU time | {fig} | (same command) | {lr['date']} |")
    return rows


def _seeding_precision(sp: dict) -> str:
    """fp32 against bf16 seeding, seed by seed: `seed 2: 45% / 40%`, and the means over the seeds both have."""
    by_seed: dict[int, dict[str, float]] = {}
    for r in sp["rows"]:
        by_seed.setdefault(r["seed"], {})[r["precision"]] = r["success"]
    paired = {seed: v for seed, v in by_seed.items() if {"fp32", "bf16"} <= v.keys()}
    cells = ", ".join(f"seed {seed}: {pct(v['fp32'])} / {pct(v['bf16'])}" for seed, v in sorted(paired.items()))
    if paired:
        gap = sum(v["bf16"] - v["fp32"] for v in paired.values()) / len(paired)
        cells += f"; mean bf16 - fp32 {100 * gap:+.1f} points over {len(paired)} seeds"
    if not sp.get("complete", True):
        cells += " (the sweep stopped early: these rows are what it measured)"
    steps = sp["rows"][0]["sft_steps"] if sp["rows"] else "?"
    title = f"held-out success after {steps} SFT seeding steps, fp32 / bf16 autocast ({sp['heldout_tasks']} tasks)"
    return f"| {title} | {cells} | `{sp['command']}` | {sp['date']} |"


def _bf16_gradients(bg: dict) -> str:
    """How far bf16 autocast moves the SFT gradient, with the head or the LoRA branch put back in fp32."""
    cells = []
    for r in bg["rows"]:
        b = r["bf16"]
        cells.append(
            f"after {r['sft_steps']} fp32 SFT steps: relative error {b['relative_error']:.2f} (cosine "
            f"{b['cosine']:.3f}, signs agree {pct(b['sign_agreement'])}), with an fp32 head "
            f"{r['bf16_fp32_head']['relative_error']:.2f}, with an fp32 LoRA branch "
            f"{r['bf16_fp32_lora']['relative_error']:.2f}, fp32 run twice {r['fp32_again']:.2f}"
        )
    title = "the SFT gradient under bf16 autocast against fp32 (demo policy, one batch of 4 reference transcripts)"
    return f"| {title} | {'; '.join(cells)} | `{bg['command']}` | {bg['date']} |"


def _update_precision(up: dict) -> str:
    """The update's seconds per arm on one step of the demo's episodes, and each arm's speedup over fp32."""
    cells = ", ".join(
        f"{arm} {a['seconds']:.1f} s at best (reference {a.get('reference', 0):.1f} s, forward + backward "
        f"{a.get('forward_backward', 0):.1f} s; {up['speedup_over_fp32'][arm]:.2f}x"
        + (f"; rounds {min(up['rounds'][arm]):.1f}-{max(up['rounds'][arm]):.1f} s" if up.get("rounds") else "")
        + ")"
        for arm, a in up["arms"].items()
    )
    title = f"one GRPO update of the demo ({up['episodes']} episodes, {up['policy_tokens']} policy tokens) by precision"
    return f"| {title} | {cells} | `{up['command']}` | {up['date']} |"


def _sft_prefix(sp: dict) -> str:
    """An SFT step with the prompts' shared opening run once, against every prompt run whole."""
    sec, tokens = sp["seconds_per_step"], sp["tokens_per_step"]
    cells = (
        f"{sec['shared_opening']:.1f} s a step ({tokens['shared_opening']} tokens) against "
        f"{sec['whole_prompts']:.1f} s ({tokens['whole_prompts']} tokens): {sp['speedup']:.2f}x; the opening "
        f"{sp['shared_opening_tokens']} tokens, the losses within {sp['max_loss_difference']:.0e}"
    )
    title = f"an SFT warm-start step of the demo ({sp['batch_size']} transcripts), the prompts' shared opening run once"
    return f"| {title} | {cells} | `{sp['command']}` | {sp['date']} |"


def _demo_precision(dp: dict) -> str:
    """The demo with its GRPO update in each precision: held-out success seed by seed and over the seeds."""
    cells = []
    for precision, runs in dp["runs"].items():
        seeds = "; ".join(
            f"seed {seed}: {pct(r['heldout_success']['0'])} -> {pct(list(r['heldout_success'].values())[-1])} in "
            f"{r['wall_minutes']:.1f} min ({r['step_seconds_mean']:.1f} s a step)"
            for seed, r in runs.items()
        )
        mean, low, high = dp["summary"][precision]["success_after_grpo"]
        cells.append(f"{precision}: {seeds}; after GRPO {pct(mean)} [{pct(low)}-{pct(high)}]")
    c = dp["config"]
    title = (
        f"the demo with {c['sft_steps']} fp32 SFT steps and {c['steps']} GRPO steps, the update in fp32 or bf16, "
        f"held-out success after seeding -> after GRPO ({dp['heldout_tasks']} tasks)"
    )
    return f"| {title} | {' / '.join(cells)} | `{dp['command']}` | {dp['date']} |"


def _seeding(sd: dict) -> str:
    cells = ", ".join(
        f"{r['sft_steps']}: {pct(r['tool_call_prob'])} / {pct(r['success'])}"
        + (f" (seed {r['seed']})" if len({x["seed"] for x in sd["rows"]}) > 1 else "")
        for r in sd["rows"]
    )
    title = f"SFT seeding: held-out tool_call_prob / success after k SFT steps ({sd['heldout_tasks']} tasks, greedy)"
    return f"| {title} | {cells} | `{sd['command']}` | {sd['date']} |"


def _bfcl_parity_row() -> str:
    p = load("bfcl_parity")
    if not p:
        return "| BFCL checker parity | not measured yet | `python benchmarks/bfcl_parity.py` | |"
    o, g, m = p["overall"], p["gold"], p["model_outputs"]
    kinds = [k for k in p["by_kind"] if k not in ("gold", "gold_alternative", "model")]
    parts = [f"gold answers {g['agree']:,}/{g['cases']:,}", f"{len(kinds)} kinds of perturbed answers"]
    if m["cases"]:
        parts.append(f"{m['agree']}/{m['cases']} real outputs of SmolLM2-135M after {m['sft_steps']} SFT steps")
    fig = (
        f"grpolab's checker agrees with BFCL's own (bfcl-eval {p['bfcl_eval_version']}) on "
        f"{o['agree']:,}/{o['cases']:,} cases ({100 * o['agreement']:.2f}%) over {len(p['by_category'])} categories: "
        f"{', '.join(parts)}; {len(p['disagreements'])} disagreements"
    )
    return f"| BFCL checker parity with the official ast_checker | {fig} | `{p['command']}` | {p['date']} |"


def _hack_detection(h: dict) -> str:
    """Recall, false alarms and lead time per detector, each threshold fixed leaving the scored family out."""
    parts = []
    for name, d in h["detectors"].items():
        t = d["left_out"]
        recall = "n/a" if t["recall"] is None else pct(t["recall"])
        fa = "n/a" if t["false_alarms"] is None else pct(t["false_alarms"])
        lead = "n/a" if t["median_lead"] is None else f"{t['median_lead']:+g}"
        parts.append(f"{name}: recall {recall}, false alarms {fa}, lead {lead}")
    later = []
    for name, d in h["detectors"].items():
        o = d.get("shipped_out_of_sample")
        if o and (o["hacked_runs"] or o["honest_runs"]):
            later.append(
                f"{name} at its shipped threshold {d['shipped']['threshold']:g}, chosen at {o['chosen_at']}, on the "
                f"runs recorded after: caught {o['hacked_runs'] - len(o['missed'])} of {o['hacked_runs']} hacked, "
                f"false alarms on {len(o['false'])} of {o['honest_runs']} honest"
            )
    return (
        f"{h['runs_scored']} real runs ({h['hacked_runs']} hacked, {h['honest_runs']} honest by the held-out ground "
        f"truth), thresholds at a {pct(h['budget'])} false-alarm budget, each family left out: "
        + "; ".join(parts)
        + "".join(f". Out of sample: {x}" for x in later)
    )


def _demo_phases(dp: dict) -> str:
    t, n = dp["seconds"], int(dp["seconds"]["step_count"])
    h = dp["heldout_success"]
    return (
        f"{dp['wall_seconds'] / 60:.1f} min: {n} GRPO steps {t['steps'] / 60:.1f} min ({t['steps'] / n:.1f} s a step: "
        f"generation {t['generation'] / n:.1f} s, reference pass {t['reference'] / n:.1f} s, update "
        f"{t['update'] / n:.1f} s), {int(t['evaluation_count'])} held-out evaluations {t['evaluations'] / 60:.1f} min, "
        f"{int(t['probe_count'])} greedy probes {t['probes'] / 60:.1f} min, SFT warm start {t['sft'] / 60:.1f} min, "
        f"the rest {t['rest'] / 60:.1f} min; held-out success {pct(h['base'])} -> {pct(h['0'])} after seeding -> "
        f"{pct(list(h.values())[-1])} after GRPO"
    )


def _suite_time(st: dict) -> str:
    slowest = st["slowest"][:3]
    named = "; ".join(f"{x['test'].rpartition('::')[2]} {x['seconds']:.0f} s" for x in slowest)
    return (
        f"{st['total_seconds'] / 60:.1f} min on a fresh clone of {st['clone_of']}: install (`make setup`) "
        f"{st['setup_seconds'] / 60:.1f} min, `make test` {st['test_seconds'] / 60:.1f} min ({st['passed']} passed, "
        f"{st['skipped']} skipped; {st['test_cpu_seconds'] / 60:.1f} CPU-minutes); slowest: {named}"
    )


def rows() -> list[str]:
    out = ["| result | figure | command | date |", "| --- | --- | --- | --- |"]
    r = load("step_cost")
    if r:
        out.append(f"| GRPO step of the demo config, roofline | {_step_cost(r)} | `{r['command']}` | {r['date']} |")
    d = load("decode_step")
    if d:
        out.append(f"| one decode step of the demo's rollout | {_decode_step(d)} | `{d['command']}` | {d['date']} |")
    r = load("step_cost_int8")
    if r:
        out.append(f"| the same, int8 rollouts | {_step_cost(r)} | `{r['command']}` | {r['date']} |")
    v = load("vs_trl")
    if v:
        model = v["setting"]["model"]
        out.append(f"| GRPO step, native vs TRL ({model}, fp32) | {_vs_trl(v)} | `{v['command']}` | {v['date']} |")
    for v in (load("vs_trl_demo"), load("vs_trl_demo_avx512_bf16")):
        if not v:
            continue
        fig = (
            f"TRL {v['trl']['s_per_step']:.1f} s/step, native {v['native']['s_per_step']:.1f} s/step "
            f"({v['ratio_trl_over_native_per_step']:.2f}x; per 1k policy tokens "
            f"{v['ratio_trl_over_native_per_token']:.2f}x); TRL through rollout_func (the lab's rollout), "
            f"{v['setting']['rounds'] - 1} steps timed"
        )
        if "peak_rss_mb" in v["native"]:  # each backend in its own process
            n, t = v["native"], v["trl"]
            fig += (
                f"; each in its own process: peak RSS native {n['peak_rss_mb'] / 1024:.1f} GB, TRL "
                f"{t['peak_rss_mb'] / 1024:.1f} GB; matmul peak {n['matmul_gflops_fp32']:.0f} and "
                f"{t['matmul_gflops_fp32']:.0f} GFLOP/s"
            )
        shape = f"the demo's shape ({v['setting']['config']})"
        if "native_bf16" in v:  # recorded since 2026-12-07: the host's bf16 dot products (both train in fp32)
            shape += f", a CPU with {v['native_bf16']}" if v["native_bf16"] else ", a CPU without bf16 dot products"
        out.append(f"| GRPO step at {shape}, native vs TRL | {fig} | `{v['command']}` | {v['date']} |")
    for name in ("base_demo", "base_unitconv"):
        b = load(name)
        if b:
            fig = f"success {pct(b['success'])}, episodes that call a tool {pct(b['tool_call_prob'])}"
            what = f"the base model ({b['model']}), {b['heldout_tasks']} held-out tasks of {b['config']}, greedy"
            out.append(f"| {what} | {fig} | `{b['command']}` | {b['date']} |")
    for name, render in (
        ("seeding", _seeding),
        ("seeding_precision", _seeding_precision),
        ("bf16_gradients", _bf16_gradients),
        ("update_precision", _update_precision),
        ("sft_prefix", _sft_prefix),
        ("demo_precision", _demo_precision),
    ):
        result = load(name)
        if result:
            out.append(render(result))
    for name, what in LEARNING.items():
        lr = load(name)
        if lr and "arms" in lr:
            out += _learning(lr, what)
    for name, what in TRANSFER.items():
        t = load(name)
        if t:
            out += _transfer(t, what)
    out.append(_bfcl_parity_row())
    t = load("tau2_retail")
    if t and "base" in t:
        b = t["base"]
        fig = (
            f"pass {100 * b['pass_rate']:.0f}%, action match {100 * b['action_match']:.0f}%, "
            f"episodes with a valid call {100 * b['tool_call_prob']:.0f}% over {b['tasks']} test tasks; "
            f"grpolab's verdict equals tau2's own on {b['parity']} transcripts"
        )
        out.append(
            f"| τ²-bench retail, base SmolLM2, solo setting (docs/stateful.md) | {fig} | `{t['command']}` | "
            f"{t['date']} |"
        )
    h = load("hack_detection")
    if h:
        out.append(
            f"| hack detection: recall / false alarms / median lead (steps) per detector | {_hack_detection(h)} | "
            f"`{h['command']}` | {h['date']} |"
        )
    fs = load("forecast_scoring")
    if fs:
        v, c = fs["scores"]["forecast"], fs["ceiling"]
        fig = (
            f"forecast from a pilot, out of sample: direction {pct(v['direction'])} of {v['class_moves']} class moves, "
            f"winner {pct(v['winner'])} of {v['runs']} runs (seed-to-seed ceiling {pct(c['direction'])} / "
            f"{pct(c['winner'])}); class-profile simulator {pct(fs['scores']['simulator']['direction'])} / "
            f"{pct(fs['scores']['simulator']['winner'])}"
        )
        if v.get("reward_r2") is not None and c.get("reward_r2_noise") is not None:
            fig += f"; reward-curve R² {v['reward_r2']:.2f} (sampling-noise ceiling {c['reward_r2_noise']:.2f})"
        out.append(f"| forecasting GRPO's class moves on real runs | {fig} | `{fs['command']}` | {fs['date']} |")
    sc = load("score_cost")
    if sc:
        fig = (
            f"{sc['ms_per_transcript_time_limit']:.2f} ms per transcript with every component under its time limit, "
            f"{sc['ms_per_transcript_direct']:.2f} ms called directly ({sc['ratio']:.2f}x; {sc['transcripts']} "
            f"finance reference transcripts, {sc['components']} components, calls replayed)"
        )
        if sc.get("probe_seconds") is not None:
            fig += f"; the probes on all {sc['probe_tasks']} finance tasks {sc['probe_seconds']:.1f} s"
        out.append(f"| scoring's time limit | {fig} | `{sc['command']}` | {sc['date']} |")
    tc = load("tool_call_cost")
    if tc:
        ms = tc["ms_per_call"]
        fig = (
            "a user's tool, each call in a forked child, in a process that loaded torch: "
            f"{ms['reaped_on_a_thread']:.1f} ms a call (the caller waiting for the child's exit, as before: "
            f"{ms['waiting_for_exit']:.1f} ms); the same child call without torch loaded "
            f"{tc['ms_per_call_without_torch']:.1f} ms; on a thread (grpolab's own tools) {ms['thread']:.2f} ms"
        )
        if "ms_per_call_holding" in tc:
            held = tc["ms_per_call_holding"]
            fig += f"; in a caller holding 1 GB more {held['1_gb']:.1f} ms, 4 GB more {held['4_gb']:.1f} ms"
        out.append(f"| a tool call's isolation | {fig} | `{tc['command']}` | {tc['date']} |")
    cc = load("chart_cost")
    if cc:
        ms, kb = cc["ms_per_chart"], {k: v / 1000 for k, v in cc["svg_bytes"].items()}
        fig = (
            f"a report chart {ms['shipped']:.1f} ms and {kb['shipped']:.0f} KB (the earlier recipe: "
            f"{ms['earlier']:.1f} ms, {kb['earlier']:.0f} KB; {cc['speedup']:.2f}x), {cc['charts_per_round']} chart "
            "groups of a run"
        )
        out.append(f"| the report's charts | {fig} | `{cc['command']}` | {cc['date']} |")
    dp = load("demo_phases")
    if dp:
        out.append(f"| `make demo`, where its wall time goes | {_demo_phases(dp)} | `{dp['command']}` | {dp['date']} |")
    st = load("suite_time")
    if st:
        out.append(f"| `make test`'s wall time | {_suite_time(st)} | `{st['command']}` | {st['date']} |")
    r = load("sim_speed")
    if r:
        fig = json.dumps({k: v for k, v in r.items() if k not in ("command", "date", "machine")})
        out.append(f"| simulator speed | `{fig}` | `{r.get('command', '')}` | {r.get('date', '')} |")
    out.append(f"\n{_machines()}")
    return out


def _machine(result: dict) -> str | None:
    """How a result describes the machine it ran on: the results writer's block, or an older script's string."""
    m = result.get("machine")
    if isinstance(m, str):
        threads = result.get("threads")
        return m if threads is None or "cpu" in m else f"{m}, {threads} threads"
    return machine_line(result)


def _machines() -> str:
    """The machines the results record, with how many results each (a result before the record says none)."""
    seen: dict[str, int] = {}
    unrecorded = 0
    for path in sorted(RESULTS.glob("*.json")):
        described = _machine(json.loads(path.read_text()))
        if described is None:
            unrecorded += 1
        else:
            seen[described] = seen.get(described, 0) + 1
    parts = [f"{name} ({n} result{'s' if n > 1 else ''})" for name, n in seen.items()]
    if unrecorded:
        parts.append(f"not recorded ({unrecorded} results written before the machine was)")
    return "Machines: " + "; ".join(parts) + "."


HEADER = """# Results

Written whole by `.venv/bin/python benchmarks/readme_table.py` from the JSON files the benchmarks leave in
`benchmarks/results/`; do not edit it by hand (`make test` fails while it is stale). Each row names the command
that wrote its JSON: run it alone, one at a time (on 2 cores a number measured beside another job is not a number).
Earlier readings, and the before/after history of each change, are in CHANGELOG.md; the one-off benchmarks
retired from benchmarks/, with their figures, in docs/decisions.md.
"""


def results_md() -> str:
    return (
        "\n".join([HEADER, "## Every result", "", *rows(), "", "## Readings", "", *readings.sections()]).rstrip() + "\n"
    )


BLOCKS = {"demo": readings.demo_block, "byo": readings.byo_block}
"""README.md's generated blocks, by marker name."""


def readme(text: str) -> str:
    """README.md with every generated block rewritten; a missing marker is an error naming it."""
    for name, block in BLOCKS.items():
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        if start not in text or end not in text:
            raise SystemExit(f"README.md needs the markers {start} and {end}")
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + start + "\n" + "\n".join(block()) + "\n" + end + tail
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description="Write docs/results.md and README.md's measured tables.")
    ap.add_argument("--check", action="store_true", help="exit 1 when a written file differs from what it would be")
    args = ap.parse_args()
    wanted = {RESULTS_MD: results_md(), README: readme(README.read_text())}
    if args.check:
        stale = [
            path.relative_to(ROOT) for path, text in wanted.items() if not path.is_file() or path.read_text() != text
        ]
        if stale:
            names = ", ".join(map(str, stale))
            sys.exit(f"stale: {names} (run .venv/bin/python benchmarks/readme_table.py and commit what it writes)")
        print("docs/results.md and README.md's tables match benchmarks/results/")
        return
    for path, text in wanted.items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
