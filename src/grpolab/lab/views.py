"""What the web lab shows, as HTML built from artifacts: run dirs, simulator results, probe reports.

No training logic and no Gradio here: every function takes plain data (or a path) and returns HTML or values, so
a malformed run dir becomes a message, never a stack trace on the page.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpolab.metrics import reward_key
from grpolab.report.charts import svg_chart
from grpolab.report.html import CONVERGENCE, drawable_metrics, probe_table, showable_episodes
from grpolab.report.trajectories import trajectory_pair
from grpolab.rewards.components import letter, standard_names
from grpolab.rundir import RunDir


def message(text: str, kind: str = "info") -> str:
    return f"<div class='lab-msg lab-{kind}'>{html.escape(text)}</div>"


@dataclass
class RunView:
    """A run directory read defensively: what could be read, and what was wrong with the rest."""

    path: Path
    config: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    evals: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    preflight: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.config)

    def eval_labels(self) -> list[str]:
        """Evaluation labels in order: base, then steps."""
        steps = sorted((k for k in self.evals if k.isdigit()), key=int)
        return (["base"] if "base" in self.evals else []) + steps


def load_run(path: str | Path) -> RunView:
    view = RunView(Path(path))
    run = RunDir(view.path)
    if not view.path.is_dir():
        view.problems.append(f"{view.path} is not a directory")
        return view
    cfg = run.artifact("config.json", view.problems)
    if not isinstance(cfg, dict):
        view.problems.append("config.json is missing or unreadable: not a grpolab run directory")
        return view
    view.config = cfg
    # the same defensive reading as the report: malformed rows and values are left out and named
    view.metrics = drawable_metrics(run, view.problems)
    view.evals = {
        label: showable_episodes(run.eval_rows(label), f"eval/{label}.jsonl", view.problems)
        for label in run.eval_labels()
    }
    view.summary = run.eval_summary(view.problems)
    pre = run.artifact("preflight.json", view.problems)
    view.preflight = pre if isinstance(pre, dict) else {}
    return view


def _section(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    value = cfg.get(name)
    return value if isinstance(value, dict) else {}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


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
    return svg_chart(title, CONVERGENCE, rows, [r["step"] for r in rows if r.get("alarms")])


def _num(x: Any, fmt: str = "+.2f") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and math.isfinite(x) else "n/a"


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
    parts = " | ".join(f"{letter(n)}:{_num(last.get(reward_key(n)))}" for n in standard_names())
    kl = last.get("kl")
    stable = _finite(kl) and kl <= kl_bound
    prior = f"{prior_name} {base_prior:.0%}" if _finite(base_prior) else f"{prior_name} unknown"
    tcp = last.get("tool_call_prob")
    return (
        "<div class='lab-cards'>"
        + "".join(
            [
                _card("episode reward", _num(last.get("reward/mean")), parts),
                _card("tool_call_prob", _num(tcp, ".0%"), prior),
                _card(
                    "kl",
                    _num(kl, ".3f"),
                    f"bound {kl_bound:g}: " + ("stable" if stable else "UNSTABLE"),
                    "lab-good" if stable else "lab-bad",
                ),
                _card(
                    "policy loss / advantage",
                    f"{_num(last.get('policy_loss'), '+.3f')} / {_num(last.get('adv/mean_abs'), '.3f')}",
                    "loss / mean |advantage|",
                ),
            ]
        )
        + f"</div><div class='lab-source'>{html.escape(source)}</div>"
    )


def sim_cards(result: dict[str, Any], kl_bound: float) -> str:
    first, last = result["iterations"][0], result["iterations"][-1]
    source = (
        f"simulator after {last['step']} iterations (mean of {result['settings']['runs']} seeded runs); "
        f"hack mass {last['hack_mass']:.0%}, success {last['success']:.0%}"
    )
    alerts = "".join(message(w, "error") for w in result.get("warnings", []))
    # the simulation starts from its prior (by default the seeded demo model's first step), not the base model
    return stat_cards(last, first["tool_call_prob"], kl_bound, source, prior_name="at the start") + alerts


def run_cards(view: RunView) -> str:
    if not view.metrics:
        return message("This run has no training steps yet.")
    last = view.metrics[-1]
    base = view.summary.get("base") or view.summary.get("0") or {}
    prior = base.get("heldout/tool_call_prob") if isinstance(base, dict) else None
    bound = last.get("kl_bound", _section(view.config, "grpo").get("kl_bound"))
    bound = bound if _finite(bound) else 0.12
    total = _section(view.config, "train").get("steps", "?")
    return stat_cards(last, prior, bound, f"{view.path.name}: step {last['step']} of {total}")


# ---- rollouts, preflight, run summary ------------------------------------------------------------------------------


def episode_pair(view: RunView, task_id: str | None, label: str | None) -> str:
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


def task_ids(view: RunView) -> list[str]:
    labels = view.eval_labels()
    return [str(r.get("task_id")) for r in view.evals.get(labels[0], [])] if labels else []


def preflight_panel(report: dict[str, Any]) -> str:
    if not report.get("probes"):
        return message("No probe results.")
    gameable = report.get("gameable")
    gameable = gameable if isinstance(gameable, list) else []
    lines = "".join(f"<div class='lab-bad'>{html.escape(str(g))}</div>" for g in gameable)
    verdict = lines or "<div class='lab-good'>No probe matches or beats honest work under these weights.</div>"
    iso = report.get("isolation")
    sandbox = ""
    if iso:
        sandbox = message(f"sandbox: {iso['summary']}", "info" if iso["level"] == "strong" else "error")
    return verdict + sandbox + probe_table(report)


def run_summary(view: RunView) -> str:
    if not view.ok:
        return message("; ".join(view.problems) or "not a run directory", "error")
    cfg = view.config
    status = (
        f"env <b>{html.escape(str(cfg.get('env')))}</b>, model <b>{html.escape(str(cfg.get('model')))}</b>, "
        f"{len(view.metrics)} of {html.escape(str(_section(cfg, 'train').get('steps', '?')))} steps recorded"
    )
    problems = "".join(message(p, "warn") for p in view.problems)
    cols = [c for c, v in view.summary.items() if isinstance(v, dict)]
    if cols:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        body = "".join(
            f"<tr><td>{k}</td>"
            + "".join(f"<td>{_num(view.summary[c].get(f'heldout/{k}'), '.2f')}</td>" for c in cols)
            + "</tr>"
            for k in ("success", "tool_call_prob", "schema")
        )
        table = f"<table class='lab-table'><tr><th>held-out</th>{head}</tr>{body}</table>"
    else:
        table = message("No held-out evaluation yet.")
    alarms = [
        f"step {r['step']}: {k}: {v}"
        for r in view.metrics
        if isinstance(r.get("alarms"), dict)
        for k, v in r["alarms"].items()
    ]
    alarm_html = "".join(message(a, "error") for a in alarms)
    return f"<p>{status}</p>{problems}{alarm_html}{table}"


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
