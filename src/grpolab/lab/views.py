"""What the web lab shows, as HTML built from artifacts: run dirs, simulator results, probe reports.

No training logic and no Gradio here: every function takes plain data (or a path) and returns HTML or values, so
a malformed run dir becomes a message, never a stack trace on the page.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from grpolab.behaviour import HACK_CLASSES
from grpolab.report.changes import changes_html, run_changes
from grpolab.report.charts import svg_chart
from grpolab.report.html import probe_table
from grpolab.report.trajectories import trajectory_pair
from grpolab.rewards.rubric import DEFAULT_RUBRIC
from grpolab.rundir import RunDir, RunSnapshot, read_snapshot
from grpolab.rundir.numbers import drawable, num
from grpolab.rundir.snapshot import section
from grpolab.simulator.forecast import load_accuracy, winners_line
from grpolab.vocabulary import (
    ADV_MEAN_ABS,
    ALARMS,
    CONVERGENCE,
    HACK_MASS,
    HELDOUT_HEADLINE,
    HELDOUT_TOOL_CALL_PROB,
    KL,
    KL_BOUND,
    POLICY_LOSS,
    REWARD_MEAN,
    SPECS,
    SUCCESS,
    TOOL_CALL_PROB,
    logged_components,
    reward_key,
)


def message(text: str, kind: str = "info") -> str:
    return f"<div class='lab-msg lab-{kind}'>{html.escape(text)}</div>"


RunView = RunSnapshot
"""A run directory read defensively (`grpolab.rundir.snapshot`, the same reader as the report's)."""


def load_run(path: str | Path) -> RunSnapshot:
    """What the lab shows of a run directory: what could be read, and what was wrong with the rest."""
    return read_snapshot(path)


def list_runs(root: str | Path) -> list[str]:
    """Run directories in the runs folder (a symlink that leads out of it is not listed: the lab would refuse it)."""
    root = Path(root)
    if not root.is_dir():
        return []
    base = root.resolve()
    return sorted(d.name for d in root.iterdir() if d.is_dir() and base in d.resolve().parents and RunDir(d).is_run())


# ---- chart and stat cards ----------------------------------------------------------------------------------------


def chart(rows: list[dict[str, Any]], title: str) -> str:
    if not rows:
        return message("No steps recorded yet.")
    return svg_chart(title, list(CONVERGENCE), rows, [r["step"] for r in rows if r.get(ALARMS)])


def _card(title: str, value: str, detail: str, state: str = "") -> str:
    return (
        f"<div class='lab-card {state}'><div class='lab-card-title'>{html.escape(title)}</div>"
        f"<div class='lab-card-value'>{html.escape(value)}</div>"
        f"<div class='lab-card-detail'>{html.escape(detail)}</div></div>"
    )


def stat_cards(
    last: dict[str, Any], base_prior: float | None, kl_bound: float, source: str, prior_name: str = "base prior"
) -> str:
    """Episode reward with breakdown; tool_call_prob against the prior (the base model's, or where a simulation
    starts); kl against its bound; loss, advantage."""
    names = list(dict.fromkeys([*DEFAULT_RUBRIC.standard_names(), *logged_components([last])]))  # a user's too
    parts = " | ".join(f"{DEFAULT_RUBRIC.letter(n)}:{num(last.get(reward_key(n)))}" for n in names)
    kl = last.get(KL)
    stable = drawable(kl) and kl <= kl_bound
    prior = f"{prior_name} {base_prior:.0%}" if drawable(base_prior) else f"{prior_name} unknown"
    tcp = last.get(TOOL_CALL_PROB)
    return (
        "<div class='lab-cards'>"
        + "".join(
            [
                _card("episode reward", num(last.get(REWARD_MEAN)), parts),
                _card(TOOL_CALL_PROB, num(tcp, ".0%"), prior),
                _card(
                    KL,
                    num(kl, ".3f"),
                    f"bound {kl_bound:g}: " + ("stable" if stable else "UNSTABLE"),
                    "lab-good" if stable else "lab-bad",
                ),
                _card(
                    "policy loss / advantage",
                    f"{num(last.get(POLICY_LOSS), '+.3f')} / {num(last.get(ADV_MEAN_ABS), '.3f')}",
                    "loss / mean |advantage|",
                ),
            ]
        )
        + f"</div><div class='lab-source'>{html.escape(source)}</div>"
    )


def profile_accuracy_line() -> str:
    """How often the class-profile simulator named a real run's moves (`benchmarks/forecast_scoring.py`)."""
    sim = (load_accuracy().get("baselines") or {}).get("simulator")
    if not sim:
        return "Not scored on real runs in this checkout."
    return (
        f"On {sim['runs']} real runs it named the direction of {sim['direction']:.0%} of {sim['class_moves']} class "
        f"moves and the winner of {sim['winner']:.0%} of runs."
    )


def sim_cards(result: dict[str, Any], kl_bound: float) -> str:
    first, last = result["iterations"][0], result["iterations"][-1]
    runs = result["settings"]["runs"]
    if result.get("forecast"):
        pilot = result["pilot"]
        source = (
            f"forecast after {last['step']} iterations from {pilot['episodes']} pilot episodes ({pilot['source']}; "
            f"mean of {runs} seeded runs, step size fitted on real runs, the step-size slider is not used); "
            f"hack mass {last[HACK_MASS]:.0%}, success {last[SUCCESS]:.0%}. {result['accuracy_line']}"
        )
    else:
        source = (
            f"class-profile simulator after {last['step']} iterations (mean of {runs} seeded runs; "
            f"`grpolab simulate --pilot` forecasts from your model's own samples); "
            f"hack mass {last[HACK_MASS]:.0%}, success {last[SUCCESS]:.0%}. {profile_accuracy_line()}"
        )
    alerts = "".join(message(w, "error") for w in result.get("warnings", []))
    grows = result.get("growing") or {}
    if grows:
        named = ", ".join(f"{c} {a:.0%} \u2192 {b:.0%}" for c, (a, b) in grows.items())
        alerts += message(f"growing under these weights: {named}", "warn")
    wins = result.get("winners") or {}
    if len(wins) > 1:  # one mean curve hides a decision that flips in some runs only
        alerts += message(winners_line(wins, result["settings"]["runs"]))
    if result.get("unknown"):
        alerts += message(f"cannot forecast (no pilot episode reaches them): {', '.join(result['unknown'])}")
    # the simulation starts from its prior (by default the seeded demo model's first step), not the base model
    cards = stat_cards(last, first[TOOL_CALL_PROB], kl_bound, source, prior_name="at the start")
    return cards + alerts + class_panel(result.get("classes", {}))


def class_panel(classes: dict[str, Any]) -> str:
    """Where the simulated policy goes, class by class, under the names a real run's "What GRPO changed" uses;
    the shortcut classes the weights pay for are marked."""
    rows = []
    for name, c in sorted(classes.items(), key=lambda kv: -float(kv[1].get("final", 0.0))):
        start, end = float(c.get("initial", 0.0)), float(c.get("final", 0.0))
        if max(start, end) < 0.005:
            continue
        mark = " class='lab-bad'" if name in HACK_CLASSES and end > start + 0.05 else ""
        rows.append(
            f"<tr{mark}><td>{html.escape(name)}</td><td>{start:.0%}</td><td>{end:.0%}</td>"
            f"<td>{float(c.get('reward', 0.0)):+.2f}</td></tr>"
        )
    head = "<tr><th>episode class</th><th>at the start</th><th>at the end</th><th>reward</th></tr>"
    return f"<table class='lab-classes'>{head}{''.join(rows)}</table>" if rows else ""


def run_cards(view: RunSnapshot) -> str:
    if not view.metrics:
        return message("This run has no training steps yet.")
    last = view.metrics[-1]
    base = view.summary.get("base") or view.summary.get("0") or {}
    prior = base.get(HELDOUT_TOOL_CALL_PROB) if isinstance(base, dict) else None
    bound = last.get(KL_BOUND, section(view.config, "grpo").get(KL_BOUND))  # the config field the metric copies
    bound = bound if drawable(bound) else 0.12
    total = section(view.config, "train").get("steps", "?")
    return stat_cards(last, prior, bound, f"{view.path.name}: step {last['step']} of {total}")


# ---- rollouts, preflight, run summary ------------------------------------------------------------------------------


def episode_pair(view: RunSnapshot, task_id: str | None, label: str | None) -> str:
    """Base and trained trajectory of one held-out prompt side by side, tags highlighted."""
    labels = view.eval_labels()
    if not labels:
        return message("This run has no held-out evaluations to show yet.")
    first = labels[0]
    label = label if label in view.evals else labels[-1]
    left = {r.get("task_id"): r for r in view.evals.get(first, [])}
    right = {r.get("task_id"): r for r in view.evals.get(label, [])}
    if task_id not in left or task_id not in right:
        return message(f"No trajectory of {task_id!r} at {label!r}.", "warn")
    first_name = f"{first} model" if first == "base" else f"step {first}"
    return trajectory_pair(left[task_id], right[task_id], first_name, f"step {label}")


def task_ids(view: RunSnapshot) -> list[str]:
    labels = view.eval_labels()
    return [str(r.get("task_id")) for r in view.evals.get(labels[0], [])] if labels else []


def preflight_panel(report: dict[str, Any]) -> str:
    if not report.get("probes"):
        return message("No probe results.")
    gameable = report.get("gameable")
    gameable = gameable if isinstance(gameable, list) else []
    lines = "".join(f"<div class='lab-bad'>{html.escape(str(g))}</div>" for g in gameable)
    verdict = lines or "<div class='lab-good'>No probe matches or beats honest work under these weights.</div>"
    paid = report.get("shortcuts_paid")
    paid = paid if isinstance(paid, list) else []
    verdict += "".join(message(str(line), "warn") for line in paid)
    iso = report.get("isolation")
    sandbox = ""
    if iso:
        sandbox = message(f"sandbox: {iso['summary']}", "info" if iso["level"] == "strong" else "error")
    return verdict + sandbox + probe_table(report)


def run_summary(view: RunSnapshot) -> str:
    if not view.ok:
        return message("; ".join(view.problems) or "not a run directory", "error")
    cfg = view.config
    status = (
        f"env <b>{html.escape(str(cfg.get('env')))}</b>, model <b>{html.escape(str(cfg.get('model')))}</b>, "
        f"{len(view.metrics)} of {html.escape(str(section(cfg, 'train').get('steps', '?')))} steps recorded"
    )
    problems = "".join(message(p, "warn") for p in view.problems)
    cols = [c for c, v in view.summary.items() if isinstance(v, dict)]
    if cols:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        body = "".join(
            f"<tr><td>{html.escape(SPECS[k].title)}</td>"
            + "".join(f"<td>{num(view.summary[c].get(k), '.2f')}</td>" for c in cols)
            + "</tr>"
            for k in HELDOUT_HEADLINE
        )
        table = f"<table class='lab-table'><tr><th>held-out</th>{head}</tr>{body}</table>"
    else:
        table = message("No held-out evaluation yet.")
    return f"<p>{status}</p>{problems}{alarm_cards(view.alarms())}{table}"


def alarm_cards(alarms: list[tuple[int, str, str]]) -> str:
    """One card per alarm, not one per step it fired at: its first and last step, how many steps it fired at, and
    its reason at the first and at the last (the trend: `16% -> 40%` then `16% -> 91%`)."""
    by_name: dict[str, list[tuple[int, str]]] = {}
    for step, name, why in alarms:
        by_name.setdefault(name, []).append((step, why))
    cards = []
    for name, fired in by_name.items():
        fired.sort()
        (first, first_why), (last, last_why) = fired[0], fired[-1]
        steps = f"step {first}" if first == last else f"steps {first}-{last} ({len(fired)} steps)"
        trend = f"<div><b>at step {first}:</b> {html.escape(first_why)}</div>" + (
            f"<div><b>at step {last}:</b> {html.escape(last_why)}</div>" if last != first else ""
        )
        cards.append(
            f"<div class='lab-msg lab-error lab-alarm'><div><b>{html.escape(name)}</b>, {steps}</div>{trend}</div>"
        )
    return "".join(cards)


def what_changed(view: RunSnapshot) -> str:
    """The run's "What GRPO changed" section (start vs last evaluation, small multiples, flagged examples)."""
    if not view.ok:
        return ""
    changes = run_changes(view)
    if changes is None:
        return message("What GRPO changed shows once the run has two evaluations of its GRPO phase.")
    return changes_html(changes, view.metrics)


def chat_html(events: list[Any]) -> str:
    """A `grpolab.agent.ChatSession` answer, turn by turn: thoughts, real tool calls and responses, the answer."""
    out = []
    for e in events:
        if e.kind == "thought":
            out.append(f"<div class='traj'><span class='tag'>thought</span> {html.escape(e.text)}</div>")
        elif e.kind == "text" and e.text.strip():
            out.append(f"<div class='traj'>{html.escape(e.text)}</div>")
        elif e.kind == "tool_call":
            call = json.dumps({"name": e.name, "arguments": e.arguments}) if e.arguments is not None else e.text
            out.append(f"<div class='traj'><span class='tag'>tool_call</span> <code>{html.escape(call)}</code></div>")
        elif e.kind == "tool_response":
            body = html.escape(json.dumps(e.response))
            out.append(
                f"<div class='traj'><span class='tag'>tool_response ({html.escape(str(e.name))})</span> "
                f"<code>{body}</code> <small>(real output)</small></div>"
            )
        elif e.kind == "answer":
            out.append(f"<div class='traj'><b>answer:</b> {html.escape(e.text)} <small>(stop: {e.stop})</small></div>")
        elif e.kind == "error":
            out.append(message(e.text, "error"))
    return "".join(out) or message("No answer.")
