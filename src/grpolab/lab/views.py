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

from grpolab.report.html import highlight, probe_table, svg_chart
from grpolab.rundir import read_jsonl

CHART_KEYS = ["reward/mean", "kl", "tool_token_mass"]
"""The convergence & token-shift chart: mean reward, kl and tool_token_mass per iteration."""


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


def _read_json(path: Path, problems: list[str]) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(errors="replace"))
    except ValueError as exc:
        problems.append(f"{path.name} is not valid JSON ({exc})")
        return None


def load_run(path: str | Path) -> RunView:
    view = RunView(Path(path))
    p = view.path
    if not p.is_dir():
        view.problems.append(f"{p} is not a directory")
        return view
    cfg = _read_json(p / "config.json", view.problems)
    if not isinstance(cfg, dict):
        view.problems.append("config.json is missing or unreadable: not a grpolab run directory")
        return view
    view.config = cfg
    view.metrics = [r for r in read_jsonl(p / "metrics.jsonl") if isinstance(r.get("step"), int)]
    for f in sorted((p / "eval").glob("*.jsonl")) if (p / "eval").is_dir() else []:
        view.evals[f.stem] = read_jsonl(f)
    summary = _read_json(p / "eval" / "summary.json", view.problems)
    view.summary = summary if isinstance(summary, dict) else {}
    pre = _read_json(p / "preflight.json", view.problems)
    view.preflight = pre if isinstance(pre, dict) else {}
    return view


def list_runs(root: str | Path) -> list[str]:
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if d.is_dir() and (d / "config.json").is_file())


# ---- chart and stat cards ----------------------------------------------------------------------------------------


def chart(rows: list[dict[str, Any]], title: str) -> str:
    if not rows:
        return message("No steps recorded yet.")
    return svg_chart(title, CHART_KEYS, rows, [r["step"] for r in rows if r.get("alarms")])


def sim_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Simulator iterations renamed to the run-dir metric names the chart reads."""
    return [{"step": it["step"], "reward/mean": it["reward"], "kl": it["kl"], "tool_token_mass": it["tool_token_mass"]}
            for it in result["iterations"]]  # fmt: skip


def _num(x: Any, fmt: str = "+.2f") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and math.isfinite(x) else "n/a"


def _card(title: str, value: str, detail: str, state: str = "") -> str:
    return (f"<div class='lab-card {state}'><div class='lab-card-title'>{html.escape(title)}</div>"
            f"<div class='lab-card-value'>{html.escape(value)}</div>"
            f"<div class='lab-card-detail'>{html.escape(detail)}</div></div>")  # fmt: skip


def stat_cards(last: dict[str, Any], base_prior: float | None, kl_bound: float, source: str) -> str:
    """Episode reward with breakdown; tool_call_prob against the base prior; kl against its bound; loss, advantage."""
    parts = " | ".join(f"{k[0].upper()}:{_num(last.get(f'reward/{k}'))}" for k in ("format", "schema", "completion",
                                                                                   "length"))  # fmt: skip
    kl = last.get("kl")
    stable = isinstance(kl, (int, float)) and kl <= kl_bound
    prior = f"base prior {base_prior:.0%}" if base_prior is not None else "base prior unknown"
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
                ),  # fmt: skip
                _card(
                    "policy loss / advantage",
                    f"{_num(last.get('policy_loss'), '+.3f')} / {_num(last.get('adv/mean_abs'), '.3f')}",
                    "loss / mean |advantage|",
                ),  # fmt: skip
            ]
        )
        + f"</div><div class='lab-source'>{html.escape(source)}</div>"
    )


def sim_cards(result: dict[str, Any], kl_bound: float) -> str:
    first, last = result["iterations"][0], result["iterations"][-1]
    row = {"reward/mean": last["reward"], "reward/format": last["reward/F"], "reward/schema": last["reward/S"],
           "reward/completion": last["reward/C"], "reward/length": last["reward/L"], "kl": last["kl"],
           "tool_call_prob": last["tool_call_prob"], "policy_loss": last["policy_loss"],
           "adv/mean_abs": last["adv/mean_abs"]}  # fmt: skip
    source = (f"simulator after {last['step']} iterations (mean of {result['settings']['runs']} seeded runs); "
              f"hack mass {last['hack_mass']:.0%}, success {last['success']:.0%}")  # fmt: skip
    return stat_cards(row, first["tool_call_prob"], kl_bound, source)


def run_cards(view: RunView) -> str:
    if not view.metrics:
        return message("This run has no training steps yet.")
    last = view.metrics[-1]
    base = view.summary.get("base") or view.summary.get("0") or {}
    prior = base.get("heldout/tool_call_prob") if isinstance(base, dict) else None
    bound = last.get("kl_bound", view.config.get("grpo", {}).get("kl_bound", 0.12))
    return stat_cards(last, prior, bound, f"{view.path.name}: step {last['step']} of {view.config.get('train', {}).get('steps', '?')}")  # fmt: skip


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
    out = [f"<div class='lab-prompt'><b>{html.escape(task_id)}</b>: {html.escape(str(left[task_id].get('prompt', '')))}"
           f" (expected {html.escape(str(left[task_id].get('answer', '')))})</div><div class='lab-pair'>"]  # fmt: skip
    for name, r in ((f"{first} model" if first == "base" else f"step {first}", left[task_id]),
                    (f"step {label}", right[task_id])):  # fmt: skip
        ok = (r.get("components") or {}).get("completion") == 1.0
        verdict = "<span class='lab-good'>verified</span>" if ok else "<span class='lab-bad'>not verified</span>"
        out.append(f"<div class='lab-traj'><b>{html.escape(name)}</b> {verdict} <code>{html.escape(str(r.get('breakdown', '')))}"
                   f"</code><pre>{highlight(str(r.get('text', '')))}</pre></div>")  # fmt: skip
    return "".join(out) + "</div>"


def task_ids(view: RunView) -> list[str]:
    labels = view.eval_labels()
    return [str(r.get("task_id")) for r in view.evals.get(labels[0], [])] if labels else []


def preflight_panel(report: dict[str, Any]) -> str:
    if not report.get("probes"):
        return message("No probe results.")
    lines = "".join(f"<div class='lab-bad'>{html.escape(g)}</div>" for g in report.get("gameable", []))
    verdict = lines or "<div class='lab-good'>No probe matches or beats honest work under these weights.</div>"
    return verdict + probe_table(report)


def run_summary(view: RunView) -> str:
    if not view.ok:
        return message("; ".join(view.problems) or "not a run directory", "error")
    cfg = view.config
    status = (f"env <b>{html.escape(str(cfg.get('env')))}</b>, model <b>{html.escape(str(cfg.get('model')))}</b>, "
              f"{len(view.metrics)} of {html.escape(str(cfg.get('train', {}).get('steps', '?')))} steps recorded")  # fmt: skip
    problems = "".join(message(p, "warn") for p in view.problems)
    cols = [c for c, v in view.summary.items() if isinstance(v, dict)]
    if cols:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        body = "".join(
            f"<tr><td>{k}</td>" + "".join(f"<td>{_num(view.summary[c].get(f'heldout/{k}'), '.2f')}</td>" for c in cols)
            + "</tr>" for k in ("success", "tool_call_prob", "schema")
        )  # fmt: skip
        table = f"<table class='lab-table'><tr><th>held-out</th>{head}</tr>{body}</table>"
    else:
        table = message("No held-out evaluation yet.")
    alarms = [f"step {r['step']}: {k}: {v}" for r in view.metrics if isinstance(r.get("alarms"), dict)
              for k, v in r["alarms"].items()]  # fmt: skip
    alarm_html = "".join(message(a, "error") for a in alarms)
    return f"<p>{status}</p>{problems}{alarm_html}{table}"
