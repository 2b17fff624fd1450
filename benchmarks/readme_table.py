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


def _ci(point: list[float]) -> str:
    """A (mean, low, high) fraction as `54% [44-63%]`."""
    return f"{_pct(point[0])} [{100 * point[1]:.0f}-{_pct(point[2])}]"


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
        f"{_pct(n['fraction_of_matmul_peak'])} vs {_pct(t['fraction_of_matmul_peak'])} of the measured fp32 matmul "
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
        pad = r.get("group_padding_per_step") or [p["group_rectangle"] for p in r["padding_per_step"]]
        unit = (
            f". Per unit of work: decode {u['decode_ms_per_token']:.1f} ms per decoded token, reference + "
            f"forward + backward {u['update_ms_per_policy_token']:.1f} ms per policy token; a group padded to its "
            f"longest episode would be {_pct(min(pad))}-{_pct(max(pad))} padding"
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
        f"{v['modules']['ms_per_step']:.0f} ms/step ({_pct(v['modules']['fraction_of_bound'])} of its bound), "
        "fused rollout weights "
        f"{v['fused']['ms_per_step']:.0f} ms/step ({_pct(v['fused']['fraction_of_bound'])}; building them "
        f"{d['fused_build_ms']:.0f} ms once per rollout, counted), {d['speedup_fused']:.2f}x; "
        + (
            f"the same weights in oneDNN's packed layout {v['packed_sdpa']['ms_per_step']:.0f} ms/step "
            f"({_pct(v['packed_sdpa']['fraction_of_bound'])}; packing {d['packed_build_ms']:.0f} ms per rollout, "
            f"counted), {d['speedup_packed']:.2f}x more; one-token attention as two batched matmuls instead of SDPA "
            f"{v['packed']['ms_per_step']:.0f} ms/step, {d['speedup_direct_attention']:.2f}x; "
            if "packed_sdpa" in v
            else f"the same weights in oneDNN's packed layout {v['packed']['ms_per_step']:.0f} ms/step "
            f"({_pct(v['packed']['fraction_of_bound'])}; packing {d['packed_build_ms']:.0f} ms per rollout, counted), "
            f"{d['speedup_packed']:.2f}x more; "
            if "packed" in v
            else ""
        )
        + f"bound {d['bound_ms']:.0f} ms at {d['bandwidth_gbs']:.1f} GB/s read"
    )


def _update_padding(d: dict) -> str:
    b, pos = d["best_seconds"], d["positions"]
    ratios = d["padded_over_sorted_per_round"]
    text = (
        f"{d['episodes']} episodes of one demo rollout ({min(d['completion_lengths'])}-{max(d['completion_lengths'])} "
        f"tokens), best of {len(d['seconds']['sorted/update'])} interleaved rounds: forward + backward "
        f"{b['padded/update']:.1f} s padded -> {b['sorted/update']:.1f} s length-sorted (per round "
        f"{min(ratios['update']):.2f}-{max(ratios['update']):.2f}x), no-gradient forward (the reference pass) "
        f"{b['padded/reference']:.1f} -> {b['sorted/reference']:.1f} s ({min(ratios['reference']):.2f}-"
        f"{max(ratios['reference']):.2f}x); positions run {pos['padded']:,} -> {pos['sorted']:,}"
    )
    if "shared/update" not in b:
        return text
    shared = d["sorted_over_shared_per_round"]
    return text + (
        f"; one prompt pass per group ({len(d['micro_batches']['shared'])} micro-batches): forward + backward "
        f"{b['sorted/update']:.1f} -> {b['shared/update']:.1f} s ({min(shared['update']):.2f}-"
        f"{max(shared['update']):.2f}x), reference {b['sorted/reference']:.1f} -> {b['shared/reference']:.1f} s "
        f"({min(shared['reference']):.2f}-{max(shared['reference']):.2f}x), positions {pos['shared']:,}"
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


def _points(margin: list[float]) -> str:
    """A (mean, low, high) difference of fractions as `+12 points [-3, +27]`."""
    m, lo, hi = (100 * x for x in margin)
    return f"{m:+.0f} points [{lo:+.0f}, {hi:+.0f}]"


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
            f"{env} {'; '.join(f'{k} {_ci(v)}' for k, v in kinds.items())}" for env, kinds in envs.items()
        )
        parts.append(f"{arm}: {per_env}; retention (capitals) {_ci(t['retention'][arm])}")
    fig = " / ".join(parts) + f" (base model's retention {_pct(t['base_retention'])})"
    if warm_start_only:
        fig += "; retention per seed " + ", ".join(f"{r['seed']}: {_pct(r['retention'])}" for r in t["runs"])
    rows = [f"| {title} | {fig} | `{t['command']}` | {t['date']} |"]
    if t["grpo_margin_over_matched_sft"]:
        margins = "; ".join(
            f"{env} {k} {_points(v)}"
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
        f"{name}: success {_ci(a['success'])}, tool calls {_ci(a['tool_call_prob'])}" for name, a in arms.items()
    )
    seeded = next(iter(arms.values()))
    fig += (
        f" (after seeding: success {_pct(seeded['seeded_success'])}, tool calls "
        f"{_pct(seeded['seeded_tool_call_prob'])})"
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


def _seeding(sd: dict) -> str:
    cells = ", ".join(
        f"{r['sft_steps']}: {_pct(r['tool_call_prob'])} / {_pct(r['success'])}"
        + (f" (seed {r['seed']})" if len({x["seed"] for x in sd["rows"]}) > 1 else "")
        for r in sd["rows"]
    )
    title = f"SFT seeding: held-out tool_call_prob / success after k SFT steps ({sd['heldout_tasks']} tasks, greedy)"
    return f"| {title} | {cells} | `{sd['command']}` | {sd['date']} |"


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
        f"grpolab's checker agrees with BFCL's own (bfcl-eval {p['bfcl_eval_version']}) on "
        f"{o['agree']:,}/{o['cases']:,} cases ({100 * o['agreement']:.2f}%) over {len(p['by_category'])} categories: "
        f"{', '.join(parts)}; {len(p['disagreements'])} disagreements"
    )
    return f"| BFCL checker parity with the official ast_checker | {fig} | `{p['command']}` | {p['date']} |"


def _hack_detection(h: dict) -> str:
    """Recall, false alarms and lead time per detector on the held-out seeds."""
    runs = h["runs"]
    hacked = sum(1 for r in runs.values() if r["hacked"])
    parts = []
    for name, d in h["detectors"].items():
        t = d["test"]
        recall = "n/a" if t["recall"] is None else _pct(t["recall"])
        fa = "n/a" if t["false_alarms"] is None else _pct(t["false_alarms"])
        clean = t.get("false_alarms_honest_configs")
        fa += "" if clean is None else f" ({_pct(clean)} on honest configs)"
        lead = "n/a" if t["median_lead"] is None else f"{t['median_lead']:+g}"
        parts.append(f"{name}: recall {recall}, false alarms {fa}, lead {lead}")
    test = next(iter(h["detectors"].values()))["test"]
    return (
        f"{len(runs)} real runs ({hacked} hacked by the ground truth), thresholds fixed on seed "
        f"{h['calibration_seed']}, scored on the other seeds ({test['hacked_runs']} hacked, {test['honest_runs']} "
        "honest): " + "; ".join(parts)
    )


def rows() -> list[str]:
    out = ["| result | figure | command | date |", "| --- | --- | --- | --- |"]
    r = _load("step_cost")
    if r:
        out.append(f"| GRPO step of the demo config, roofline | {_step_cost(r)} | `{r['command']}` | {r['date']} |")
    r = _load("step_cost_unshared")
    if r:
        out.append(
            f"| the same before one prompt pass per group and the one-exp LM head (run just before the row above) | "
            f"{_step_cost(r)} | `{r['command']}` with src/ at commit {r.get('commit', '?')} | {r['date']} |"
        )
    r = _load("step_cost_notrim")
    if r:
        out.append(
            f"| the same without the heap trim between phases (its pair with the trim is quoted in Throughput) | "
            f"{_step_cost(r)} | "
            f"`{r['command']}` with src/ at commit {r.get('commit', '?')} | {r['date']} |"
        )
    r = _load("step_cost_before")
    if r:
        out.append(
            f"| the same before packed rollout weights and the unpadded update (run back to back with the "
            f"intermediate cut 8f36d64, not with the rows above: see Throughput) | {_step_cost(r)} | "
            f"`{r['command']}` at commit {r.get('commit', '?')} | {r['date']} |"
        )
    d = _load("decode_step")
    if d:
        out.append(f"| one decode step of the demo's rollout | {_decode_step(d)} | `{d['command']}` | {d['date']} |")
    d = _load("update_padding")
    if d:
        out.append(
            f"| the update on the same episodes: each group padded to its longest, length-sorted calls, one prompt "
            f"pass per group | "
            f"{_update_padding(d)} | `{d['command']}` | {d['date']} |"
        )
    r = _load("step_cost_int8")
    if r:
        out.append(f"| the same, int8 rollouts | {_step_cost(r)} | `{r['command']}` | {r['date']} |")
    v = _load("vs_trl")
    if v:
        model = v["setting"]["model"]
        out.append(f"| GRPO step, native vs TRL ({model}, fp32) | {_vs_trl(v)} | `{v['command']}` | {v['date']} |")
    m = _load("int8_mismatch")
    if m:
        fig = "; ".join(
            f"{name}: k3 {max(c['k3_per_token'], 0):.4f} per token, {_pct(c['ratio_out'])} of ratios outside [0.9, 1.1]"
            for name, c in m["copies"].items()
        )
        fig += f" ({m['cpu_capability']}, W8A8 activations {'8' if m['w8a8_full_activation_range'] else '7'}-bit)"
        what = f"int8 rollout copies against the fp32 policy ({m['episodes_per_copy']} sampled episodes each)"
        out.append(f"| {what} | {fig} | `{m['command']}` | {m['date']} |")
    v = _load("vs_trl_demo")
    if v:
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
        out.append(f"| GRPO step at {shape}, native vs TRL | {fig} | `{v['command']}` | {v['date']} |")
    sd = _load("seeding")
    if sd:
        out.append(_seeding(sd))
    for name, what in LEARNING.items():
        lr = _load(name)
        if lr and "arms" in lr:
            out += _learning(lr, what)
    for name, what in TRANSFER.items():
        t = _load(name)
        if t:
            out += _transfer(t, what)
    out.append(_bfcl_parity_row())
    h = _load("hack_detection")
    if h:
        out.append(
            f"| hack detection: recall / false alarms / median lead (steps) per detector | {_hack_detection(h)} | "
            f"`{h['command']}` | {h['date']} |"
        )
    r = _load("sim_speed")
    if r:
        fig = json.dumps({k: v for k, v in r.items() if k not in ("command", "date")})
        out.append(f"| simulator speed | `{fig}` | `{r.get('command', '')}` | {r.get('date', '')} |")
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
