"""What each benchmark's figures say, written from its results JSON (never typed by hand).

`readme_table.py` puts these sections under the table in docs/results.md, and the demo's and the scaffold's tables
into README.md. Every figure here is read from benchmarks/results/NAME.json; the words around them say what the
figures mean and were written when the result was read. A result that is missing leaves its section out.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
WIDTH = 118


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def ci(point: list[float]) -> str:
    """A (mean, low, high) fraction as `54% [44-63%]`."""
    return f"{pct(point[0])} [{100 * point[1]:.0f}-{pct(point[2])}]"


def points(margin: list[float]) -> str:
    """A (mean, low, high) difference of fractions as `+12 points [-3, +27]`."""
    m, lo, hi = (100 * x for x in margin)
    return f"{m:+.0f} points [{lo:+.0f}, {hi:+.0f}]"


def para(text: str) -> str:
    return textwrap.fill(" ".join(text.split()), WIDTH, break_on_hyphens=False, break_long_words=False)


def _seed_list(values: list[float]) -> str:
    return ", ".join(pct(v) for v in values)


def learning_table(result: dict[str, Any], base: dict[str, Any] | None) -> list[str]:
    """The one table of a learning result: base model, after SFT seeding, after GRPO (mean [95% CI], per seed)."""
    arm = result["arms"]["seeded+grpo"]
    steps = len(next(iter(result["curves"]["seeded+grpo"].values()))["reward/mean"])
    n, tasks = len(result["seeds"]), result["heldout_tasks"]
    base_success = pct(base["success"]) if base else "not measured"
    base_calls = pct(base["tool_call_prob"]) if base else "not measured"
    return [
        f"| held-out, {tasks} tasks, greedy, strict verifier | base model | after SFT seeding | "
        f"after GRPO ({steps} steps) |",
        "| --- | --- | --- | --- |",
        f"| success | {base_success} | {pct(arm['seeded_success'])} (mean of {n} seeds) | {ci(arm['success'])} "
        f"(mean [95% CI]; seeds {_seed_list(arm['per_seed_success'])}) |",
        f"| episodes that call a tool | {base_calls} | {pct(arm['seeded_tool_call_prob'])} | "
        f"{pct(arm['tool_call_prob'][0])} |",
    ]


def learning_source(result: dict[str, Any], base: dict[str, Any] | None) -> str:
    minutes = result["arms"]["seeded+grpo"]["minutes"]
    text = f"Measured {result['date']} ({minutes:.1f} min a seed): `{result['command']}`"
    if base:
        text += f"; the base model: `{base['command']}` ({base['date']})"
    return para(text + ".")


def demo_block() -> list[str]:
    """README: what the demo shows, from the demo's two-seed learning result."""
    result, base = load("learning_demo_answer_stop"), load("base_demo")
    if not result:
        return ["The demo's learning result is not measured yet (`python benchmarks/learning.py`)."]
    return [*learning_table(result, base), "", learning_source(result, base)]


def byo_block() -> list[str]:
    """README: the scaffold's unit converter trained on the embedded model."""
    result, base = load("byo_unitconv"), load("base_unitconv")
    if not result:
        return ["Not measured yet: `python benchmarks/learning.py --config runs/unitconv/config.toml`."]
    return [
        *learning_table(result, base),
        "",
        para(
            f"Measured {result['date']}: `mkdir -p runs && grpolab new-env unitconv --into runs && {result['command']}`"
            + (f"; the base model: `{base['command']}`." if base else ".")
        ),
    ]


def _learning_finance(lr: dict[str, Any]) -> list[str]:
    g, s = lr["arms"]["seeded+grpo"], lr["arms"]["sft-matched"]
    return [
        "### GRPO against more SFT at matched CPU time (finance)",
        "",
        "![held-out success per arm with 95% intervals, and the training reward per GRPO step]"
        "(../benchmarks/results/learning.png)",
        "",
        para(
            f"From the same SFT seeding (held-out success {pct(g['seeded_success'])} on average), GRPO reaches "
            f"{ci(g['success'])} over {len(lr['seeds'])} seeds (per seed {_seed_list(g['per_seed_success'])}); "
            f"spending the same CPU time on more SFT ({', '.join(map(str, lr['matched_sft_steps']))} steps) reaches "
            f"{ci(s['success'])}. GRPO's margin over matched SFT is {points(lr['grpo_margin_over_matched_sft'])}: on "
            "this task, with verified reference transcripts to imitate, SFT learns faster per CPU-second. GRPO's "
            "place is where no reference exists (the verifier only), which the transfer settings below measure."
        ),
    ]


def _seeding(sd: dict[str, Any]) -> list[str]:
    first = next((r for r in sd["rows"] if r["tool_call_prob"] >= 0.5), None)
    cells = ", ".join(f"{r['sft_steps']}: {pct(r['tool_call_prob'])} / {pct(r['success'])}" for r in sd["rows"])
    text = (
        f"How many SFT steps put the protocol within reach of GRPO ({sd['heldout_tasks']} held-out tasks, greedy; "
        f"SFT steps: held-out episodes that call a tool / success): {cells}."
    )
    if first:
        text += (
            f" Greedy tool use is all-or-nothing: {first['sft_steps']} steps is the first count with calls on most "
            "tasks, which is why the demo seeds with that many."
        )
    return ["### SFT seeding", "", para(text)]


def _vs_trl(v: dict[str, Any]) -> list[str]:
    n, t = v["native"], v["trl"]
    text = (
        f"At the demo's shape ({v['setting']['config']}, through the same run loop; TRL {v['setting']['trl_version']} "
        f"through `rollout_func`, the lab's rollout), a native GRPO step took {n['s_per_step']:.1f} s and TRL's "
        f"{t['s_per_step']:.1f} s: {v['ratio_trl_over_native_per_step']:.2f}x per step, "
        f"{v['ratio_trl_over_native_per_token']:.2f}x per 1k policy tokens ({v['setting']['rounds'] - 1} steps "
        "timed, the first not counted)."
    )
    if "peak_rss_mb" in n:
        text += (
            f" Each ran in a process of its own: peak RSS native {n['peak_rss_mb'] / 1024:.1f} GB, TRL "
            f"{t['peak_rss_mb'] / 1024:.1f} GB."
        )
    return ["### The native engine against TRL", "", para(text)]


def _step_cost(r: dict[str, Any]) -> list[str]:
    phases = sorted((p for p in r["phases"] if "held-out" not in p["phase"]), key=lambda p: -p["seconds"])
    top = ", ".join(f"{p['phase']} {p['seconds']:.1f} s" for p in phases[:3])
    decode = next((p for p in r["phases"] if p["phase"] == "decode"), None)
    update = next((p for p in r["phases"] if p["phase"] == "forward + backward"), None)
    text = (
        f"One GRPO step of the demo config took {r['s_per_step']:.1f} s ({r['engine']} rollouts, "
        f"{r['precision']['chosen']}; why {r['precision']['chosen']}: {r['precision']['why']}). "
        f"The largest phases: {top}."
    )
    if decode and "fraction_of_bound" in decode:
        text += (
            f" Decode is bandwidth-bound (every weight read once per token row): {pct(decode['fraction_of_bound'])} "
            f"of the {r['bandwidth_gbs']:.1f} GB/s read bound."
        )
    if update and "fraction_of_peak" in update:
        text += (
            f" The update is FLOP-bound: {pct(update['fraction_of_peak'])} of the "
            f"{r['matmul_gflops_fp32']:.0f} GFLOP/s matmul roof ({r.get('matmul_peak_kernel_fp32', 'mm 2048')})."
        )
    return ["### Where a step's time goes", "", para(text)]


def _transfer(t: dict[str, Any], title: str) -> list[str]:
    arms = list(t["success"])
    lines = [f"### Where GRPO earns its keep: {title}", ""]
    seeds = f"{len(t['seeds'])} seed{'s' if len(t['seeds']) > 1 else ''}"
    if t["grpo_margin_over_matched_sft"]:
        margins = "; ".join(
            f"{env} {kind} {points(v)}"
            for env, kinds in t["grpo_margin_over_matched_sft"].items()
            for kind, v in kinds.items()
            if kind == "all" or len(kinds) == 1
        )
        lines.append(
            para(
                f"{seeds}, {t['grpo_steps']} GRPO steps against SFT for the same CPU time "
                f"({' and '.join(arms)}), paired by seed and task. GRPO's margin over matched SFT, all kinds: "
                f"{margins}. Retention of a skill the base model had (capitals, base {pct(t['base_retention'])}): "
                + ", ".join(f"{arm} {ci(t['retention'][arm])}" for arm in arms)
                + ". Per kind: the table above."
            )
        )
    return lines


def _bfcl_parity(p: dict[str, Any]) -> list[str]:
    o = p["overall"]
    return [
        "### BFCL checker parity",
        "",
        para(
            f"grpolab's own BFCL checker (no bfcl_eval import at run time) and the official `ast_checker` "
            f"(bfcl-eval {p['bfcl_eval_version']}, in a virtual environment of its own) agree on {o['agree']:,} of "
            f"{o['cases']:,} cases ({100 * o['agreement']:.2f}%): gold answers, systematic perturbations of them and "
            f"real model outputs, {len(p['disagreements'])} disagreements."
        ),
    ]


def _tau2_retail(t: dict[str, Any]) -> list[str]:
    b = t["base"]
    return [
        "### τ²-bench retail (solo setting)",
        "",
        para(
            f"The base model on the benchmark's {b['tasks']} test tasks, greedy: {100 * b['pass_rate']:.0f}% pass "
            f"(database and information checks), {100 * b['action_match']:.0f}% of reference actions made, "
            f"{100 * b['tool_call_prob']:.0f}% of episodes with a valid tool call. grpolab's verdict equals tau2's "
            f"own evaluator on {b['parity']} of the model's transcripts. The customer's scenario is one message with "
            "no simulated user, so these are not the benchmark's leaderboard numbers (docs/stateful.md)."
        ),
    ]


def _hack_detection(h: dict[str, Any]) -> list[str]:
    truth = h["truth"]
    hacked = [name for name, t in truth.items() if t["hacked"]]
    families = sorted({t["family"] for t in truth.values()})
    text = (
        f"{len(truth)} short real GRPO runs ({len(families)} families); {len(hacked)} hacked by the "
        f"held-out ground truth ({', '.join(hacked) or 'none'}), {len(truth) - len(hacked)} honest. Each detector's "
        "threshold is set, leaving the scored family out, to a false-alarm budget of "
        f"{pct(h['budget'])} per honest run."
    )
    for name in ("grpolab:any", "grpolab:any (shipped)"):
        view = h["detectors"].get(name, {}).get("left_out")
        if view:
            recall = "n/a" if view["recall"] is None else pct(view["recall"])
            fa = "n/a" if view["false_alarms"] is None else pct(view["false_alarms"])
            text += f" {name}: recall {recall}, false alarms on {fa} of honest runs."
    sim = h.get("simulator", {})
    if sim.get("winner_agreement") is not None:
        text += f" The simulator named the class that won in {pct(sim['winner_agreement'])} of runs"
        if sim.get("direction_accuracy") is not None:
            text += f" and the direction of {pct(sim['direction_accuracy'])} of {sim['class_moves']} class moves"
        text += "."
    if len(truth) < 24:
        text += f" The benchmark is still growing ({len(truth)} of the 24 runs it needs): no rate here is calibrated."
    return [
        "### Hack detection",
        "",
        "![recall, false alarms and lead time per detector](../benchmarks/results/hack_detection.png)",
        "",
        para(text),
    ]


def _rate(x: float | None) -> str:
    return "n/a" if x is None else pct(x)


def _end_mean(f: dict[str, Any], who: str, cls: str = "dropped_thought") -> float:
    """Mean share of `cls` at the last step of each benchmark run, forecast or real (`curves` in the results)."""
    ends = []
    for curve in f["curves"].values():
        rows = curve[who]
        last = rows[-1] if isinstance(rows, list) else rows[max(rows, key=int)]
        ends.append(last.get(cls, 0.0))
    return sum(ends) / len(ends)


def _forecast(f: dict[str, Any]) -> list[str]:
    """The forecast beside the ceiling and the baselines, then each run's real winner against the forecast's."""
    s, ceiling = f["scores"], f["ceiling"]
    head = "| forecaster | direction of moved classes | winner | share error (0-1) | reward-curve R² |"
    lines = [head, "| --- | --- | --- | --- | --- |"]
    named = {
        "forecast": "forecast from a pilot (leave one config out)",
        "simulator": "class-profile simulator (before)",
        "naive": "naive replicator (first step's advantages)",
    }
    for key, title in named.items():
        v = s[key]
        r2 = v.get("reward_r2")
        lines.append(
            f"| {title} | {_rate(v['direction'])} of {v['class_moves']} | {_rate(v['winner'])} of {v['runs']} | "
            f"{v['share_error']:.2f} | {'n/a' if r2 is None else f'{r2:.2f}'} |"
        )
    other = f.get("other_geometry")
    if other:
        v, r2 = other["scores"], other["scores"].get("reward_r2")
        lines.append(
            f"| the same forecast, {other['geometry']} step | {_rate(v['direction'])} of {v['class_moves']} | "
            f"{_rate(v['winner'])} of {v['runs']} | {v['share_error']:.2f} | {'n/a' if r2 is None else f'{r2:.2f}'} |"
        )
    r2 = ceiling.get("reward_r2")
    lines.append(
        f"| ceiling: another seed's real run | {_rate(ceiling['direction'])} of {ceiling['class_moves']} | "
        f"{_rate(ceiling['winner'])} of {ceiling['runs']} pairs | {ceiling['share_error']:.2f} | "
        f"{'n/a' if r2 is None else f'{r2:.2f}'} |"
    )
    if ceiling.get("reward_r2_noise") is not None:
        lines.append(
            "| ceiling: each step's expected reward, exactly (the 16-episode sampling noise of a step's mean left) | "
            f"n/a | n/a | n/a | {ceiling['reward_r2_noise']:.2f} |"
        )
    second = f.get("hack_detection_set") or {}
    if second.get("forecast"):
        a, c = second["forecast"], second["ceiling"]
        lines.append(
            f"| second set (hack_detection's {a['runs']} runs, 6 episodes a step): forecast / its ceiling | "
            f"{_rate(a['direction'])} / {_rate(c['direction'])} | {_rate(a['winner'])} / {_rate(c['winner'])} | "
            f"{a['share_error']:.2f} / {c['share_error']:.2f} | n/a |"
        )
    runs = []
    for key, r in sorted(f["per_run"]["forecast"].items()):
        grows = ", ".join(f"{c} {pct(a)}→{pct(b)}" for c, (a, b) in r.get("growing", {}).items()) or "nothing"
        moved = ", ".join(f"{c} {d:+.2f}" for c, d in r["moved"].items()) or "no class moved"
        runs.append(f"{key}: real {moved} (winner {r['real_winner']}); forecast grows {grows}")
    fit = f["shipped_fit"]
    speeds = f"speed {fit['speed']:.3g}"
    if "decision_speed" in fit:
        speeds += f", decision speed {fit['decision_speed']:.3g}, within-class speed {fit.get('within_speed', 0):.3g}"
    text = (
        f"{f['runs']} real GRPO runs at the demo's shape ({', '.join(f['configs'])}), each forecast from a pilot "
        "of the other configs' first-step episodes re-scored under its weights, with the step sizes fitted on the "
        f"other configs' runs (shipped, fitted on all: {speeds}). A class moved where its share changed by "
        "0.15 or more between the pooled first steps and the run's last two steps."
    )
    if "decision_speed" in fit:
        text += (
            " The thought-or-not decision (dropped_thought: the first tag a tool call) moves at a speed of its own, "
            "fitted with the class speed on the share gap, and each class's own episodes move inside it at a "
            "within-class speed fitted on the reward curve (its better episodes grow, so a class's reward is not "
            "frozen at its pilot mean)."
        )
    if f.get("geometry") == "natural":
        text += (
            " The forecast steps in the natural geometry of the class softmax: a class's logit moves by its own mean "
            "advantage (the Fisher-preconditioned step, which an adaptive optimiser such as Adam approximates), where "
            "the euclidean step (plain softmax policy gradient) moves a rare class in proportion to its share."
        )
    tail = [
        "The lab "
        + (
            "forecasts the demo's config from the shipped pilot: its share error is lower than the class-profile "
            "simulator's and it is at most one scored case behind it on direction and on winner."
            if f.get("lab_forecasts")
            else "keeps the class-profile simulator: the forecast's share error is not lower, or it is more than "
            "one scored case behind on direction or winner."
        )
    ]
    if s["forecast"].get("winner_brier") is not None:
        brier = {key: s[key].get("winner_brier") for key in named}
        shown = ", ".join(f"{named[k].split(' (')[0]} {v:.2f}" for k, v in brier.items() if v is not None)
        tail.append(
            "The winner split, scored: the forecast says which share of its seeded runs each class ends largest in, "
            "and its Brier score against each real run's winner (0: certain and right; 2: certain and wrong; a "
            f"forecaster with one winner scores 0 or 2) is {shown}; another seed's real run as the forecast, "
            f"{ceiling['winner_brier']:.2f}. Where the real seeds of one config end with different winners, no "
            "single winner is right on both; the split can be."
        )
    by_config = s["forecast"].get("reward_r2_by_config") or {}
    if by_config:
        seeds, noise = ceiling.get("reward_r2_by_config") or {}, ceiling.get("reward_r2_noise_by_config") or {}
        r2 = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
        shown = "; ".join(
            f"{c} {r2(v)} (another seed {r2(seeds.get(c))}, sampling noise {r2(noise.get(c))})"
            for c, v in by_config.items()
        )
        tail.append(
            "The reward-curve R² above pools every run's steps, so it also credits the forecast with telling the "
            "configs' reward scales apart. Read within each config, against that config's own spread only, the "
            f"forecast's R² is lower, beside the same two ceilings read the same way: {shown}."
        )
    what_ifs = _what_ifs(f["per_run"]["forecast"], f.get("ceiling_pairs") or {})
    if what_ifs:
        tail.append(what_ifs)
    branch = load("forced_branch")
    if branch:
        free, banned = branch["arms"]["free"]["classes"], branch["arms"]["no_thought"]["classes"]
        n = branch["prompts"] * branch["group"]
        d = banned.get("dropped_thought", {"episodes": 0, "mean_total": 0.0, "solved": 0.0})
        tail.append(
            f"The seeded model's own no-thought branch (`{branch['command']}`, {n} episodes each way): with the "
            f"thought banned, {d['episodes']} of {n} episodes are dropped_thought, mean reward {d['mean_total']:+.2f}, "
            f"solved {pct(d['solved'])}; sampled freely, {free.get('dropped_thought', {}).get('episodes', 0)} of "
            f"{n}. {f.get('branch_episodes', 0)} of these episodes join every pilot. From its first-step share "
            f"({pct(f['start']['dropped_thought'])}) the forecast takes the class to {pct(_end_mean(f, 'forecast'))} "
            f"on average over the runs' last step; the real runs took it to {pct(_end_mean(f, 'real'))}."
        )
    return [
        "### Forecasting GRPO",
        "",
        para(text),
        "",
        *lines,
        "",
        *[f"- {line}" for line in runs],
        "",
        *[para(t) for t in tail],
    ]


def _what_ifs(per_run: dict[str, dict[str, Any]], ceiling_pairs: dict[str, dict[str, Any]]) -> str:
    """Each config other than the demo's read as a what-if over its weights: the directions it got right on its real
    runs beside that config's own seed-to-seed ceiling (one seed's run as the forecast of another's), and the share
    of its seeded runs that ended on each real run's winner."""
    configs: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for key, r in sorted(per_run.items()):
        name, _, seed = key.rpartition("-")
        if name != "demo":
            configs.setdefault(name, []).append((seed, r))
    parts = []
    for name, runs in configs.items():
        right, moved = _directions([r for _, r in runs])
        pairs = [p for key, p in ceiling_pairs.items() if key.partition("->")[0].rpartition("-")[0] == name]
        seed_right, seed_moved = _directions(pairs)
        ceiling = (
            f" (another seed's run as the forecast: {seed_right} of {seed_moved} over {len(pairs)} pairs, winner "
            f"{sum(p['forecast_winner'] == p['real_winner'] for p in pairs)} of {len(pairs)})"
            if pairs
            else ""
        )
        winners = sum(r["forecast_winner"] == r["real_winner"] for _, r in runs)
        splits = ", ".join(
            f"seed {seed}'s {r['real_winner']} {pct(r['real_winner_split'])}"
            for seed, r in runs
            if r.get("real_winner_split") is not None
        )
        parts.append(
            f"{name}: {right} of {moved} moved classes in the direction forecast over {len(runs)} runs, winner "
            f"{winners} of {len(runs)}{ceiling}"
            + (f"; its seeded runs ended on each real winner in {splits}" if splits else "")
        )
    if not parts:
        return ""
    return (
        "Each config read as a what-if over the demo's weights (forecast from the other configs' pilots, before any "
        "of its own steps): " + "; ".join(parts) + "."
    )


def _directions(runs: list[dict[str, Any]]) -> tuple[int, int]:
    """Moved classes whose direction was forecast right, and moved classes, over scored runs or seed pairs."""
    return sum(sum(r["direction_right"].values()) for r in runs), sum(len(r["direction_right"]) for r in runs)


def _example_runs(e: dict[str, Any]) -> list[str]:
    """The TRL and verifiers examples, checked and trained on the embedded model with no change to their code."""
    titles = {
        "trl_env": "a TRL environment_factory class and its reward_funcs (examples/trl_env)",
        "verifiers_env": "a verifiers 0.4 environment (examples/verifiers_env)",
    }
    head = (
        "| environment | probes below honest work | held-out success: base / after SFT / after GRPO | "
        "reward per step: first / last |"
    )
    lines = [head, "| --- | --- | --- | --- |"]
    for name, r in e["runs"].items():
        h = r["heldout"]
        shown = " / ".join(pct(h[k]["success"]) if h[k]["success"] is not None else "n/a" for k in h)
        m = r["smallest_margin"]
        probes = (
            f"{r['probes'] - len(r['gameable'])} of {r['probes']} (smallest margin {m['probe']} {m['margin']:+.2f})"
        )
        rewards = r["reward_per_step"]
        steps = f"{rewards[0]:+.2f} / {rewards[-1]:+.2f} over {r['grpo_steps']} steps" if rewards else "n/a"
        lines.append(f"| {titles.get(name, name)} | {probes} | {shown} of {r['heldout_tasks']} tasks | {steps} |")
    text = (
        f"Each example's own config as written (SmolLM2, 10 SFT steps on its rows' references, 10 GRPO steps of G=8 x "
        f"2 prompts), `{e['command']}`, {e['date']}. Each held out only a few of its rows: these runs show that the "
        "environments are checked and trained with no change to their code, not how much GRPO adds."
    )
    return ["### Environments written for TRL and for verifiers, run unchanged", "", para(text), "", *lines]


TRANSFER = {
    "learning_transfer": "finance (kinds with a verifier only, shifted tools)",
    "learning_transfer_bfcl_lr": "BFCL, from the warm start at SFT lr 2.5e-4",
}
"""The transfer settings given a reading (the table has them all)."""


def sections() -> list[str]:
    """docs/results.md's readings, one section per benchmark that has a result."""
    out: list[str] = []

    def add(lines: list[str]) -> None:
        out.extend([*lines, ""])

    learning_demo, base = load("learning_demo_answer_stop"), load("base_demo")
    if learning_demo:
        add(["### The demo", "", *learning_table(learning_demo, base), "", learning_source(learning_demo, base)])
    if load("byo_unitconv"):
        add(["### Bring your own task: the scaffold's unit converter", "", *byo_block()])
    for name, reading in (
        ("learning", _learning_finance),
        ("seeding", _seeding),
        ("step_cost", _step_cost),
        ("vs_trl_demo", _vs_trl),
        ("bfcl_parity", _bfcl_parity),
        ("hack_detection", _hack_detection),
        ("forecast_scoring", _forecast),
        ("example_runs", _example_runs),
        ("tau2_retail", _tau2_retail),
    ):
        result = load(name)
        if result:
            add(reading(result))
    for name, title in TRANSFER.items():
        t = load(name)
        if t:
            add(_transfer(t, title))
    return out


if __name__ == "__main__":
    argparse.ArgumentParser(description="Print docs/results.md's readings (readme_table.py writes them).").parse_args()
    print("\n".join(sections()))
