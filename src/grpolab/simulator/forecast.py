"""What GRPO will do, forecast from the user's own model: a pilot of its episodes, re-scored, then GRPO on them.

The pilot is a set of scored episodes sampled from the policy GRPO starts from (a run's first step, or the smoke
test's), kept with their unweighted reward components. Rewards are functions of transcripts, so any other weights
re-score the same pilot exactly: "what if completion paid 0" needs no new sampling. Episodes are grouped into the
behaviour classes a real run's "What GRPO changed" uses (`grpolab.behaviour`).

Shortcuts nobody sampled yet are reached from the pilot's own transcripts (`reach_shortcuts`): each pilot episode
with a thought and a valid call is edited one step (thought dropped, thought emptied) and re-scored; a class reached
only this way starts at `REACH_FLOOR` of an episode's share (half an episode of the pilot), so the forecast shows
whether the weights pay for it, not how soon a real policy stumbles on it. The env's reference solution of each pilot
task joins the same way (`env_references`): honest work the pilot may not have sampled yet.

Dynamics: R seeded runs of GRPO on a class-level policy. Each step samples P groups of G classes, gives each
sampled episode the reward of a pilot episode of its class (drawn with replacement: a class's reward keeps its
spread, which group normalisation turns into advantages), takes group-relative advantages as the trainer does
(`scale_rewards`, `normalize_then_sum`), sums them by class and takes the clipped, KL-regularised step on the class
logits with step size `speed`, in the geometry the benchmark chose (`natural` in the accuracy file: a class's logit
moves by its own mean advantage, not by its share times it). `speed` and the KL scale are fitted on real runs
(`benchmarks/forecast_scoring.py`, leaving each config out when scored); how often the forecast was right there is
shipped beside it (`forecast_accuracy.json`) and shown wherever the forecast is.

What it cannot know is said, not drawn: a class with no pilot episode and no edit that reaches it is listed as
unknown, and a pilot too small to trust is named.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grpolab.behaviour import CALL_CLASSES, CLASSES, HACK_CLASSES, classify_episode
from grpolab.config import LabConfig
from grpolab.errors import UserError
from grpolab.protocol import THOUGHT_TAG, parse_transcript, render_thought
from grpolab.simulator.simulate import MAX_CLASS_REWARD, policy_step, warnings
from grpolab.vocabulary import (
    ADV_MEAN_ABS,
    HACK_MASS,
    KL,
    POLICY_LOSS,
    REWARD_MEAN,
    SIM_BANDS,
    SUCCESS,
    TOOL_CALL_PROB,
    TOOL_TOKEN_MASS,
    band_key,
    class_key,
    reward_key,
)

ACCURACY_FILE = Path(__file__).with_name("forecast_accuracy.json")
"""Written by `benchmarks/forecast_scoring.py`: the fitted speed and KL scale, and how often the forecast was right."""
DEMO_PILOT_FILE = Path(__file__).with_name("demo_pilot.json")
"""Written by `benchmarks/forecast_scoring.py`: the first-step episodes of the benchmark's runs (SmolLM2 after the
demo's SFT seeding), with their shortcut edits: the pilot the lab forecasts the demo's config from."""
DEMO_PILOT_FOR = {"env": "finance", "model": "smollm2", "task_kinds": ["pct_change"], "sft_steps": 10}
"""The config fields a run must share with the demo for the shipped pilot to sample its starting policy."""
REACH_FLOOR = 0.5
"""A class reached only by editing pilot transcripts starts at this many episodes' share of the pilot."""
MIN_PILOT = 8
"""A pilot with fewer episodes is named as too small to forecast from (its class shares move by 1/N an episode)."""
DECISION_CLASSES = ("dropped_thought",)
"""Classes one token decision away from the rest: the episode's first tag (a tool call where a thought was asked
for). A real policy flips such a decision much faster than it reshapes a whole episode (`forced_branch.py`: with
the thought banned the starting policy solves more, and 4 of 6 benchmark runs took the class from 3% to 19-78%),
so its logit moves at `decision_speed`, fitted on the benchmark beside `speed`."""
DEFAULT_SPEED = 1.0
DEFAULT_KL_SCALE = 1.0
"""Used only where forecast_accuracy.json is missing (a checkout without the benchmark's fit)."""


@dataclass
class PilotEpisode:
    """One scored episode of the pilot: its group (prompt), class, unweighted components and policy tokens."""

    group: str
    cls: str
    components: dict[str, float]
    tokens: float
    reached: bool = False
    """True where the episode is not a free sample of the policy: an edit of one (a shortcut one step away), or a
    sample on a branch the policy was forced onto (`benchmarks/forced_branch.py`: the thought banned). Such a class
    starts at REACH_FLOOR, not at its count."""


@dataclass
class Pilot:
    """Samples of the starting policy, with where they came from and what they cost to draw."""

    episodes: list[PilotEpisode]
    source: str
    seconds: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def sampled(self) -> list[PilotEpisode]:
        return [e for e in self.episodes if not e.reached]

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "seconds": self.seconds,
            "notes": self.notes,
            "episodes": [
                {"group": e.group, "class": e.cls, "components": e.components, "tokens": e.tokens, "reached": e.reached}
                for e in self.episodes
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Pilot:
        episodes = [
            PilotEpisode(str(e["group"]), e["class"], dict(e["components"]), float(e["tokens"]), bool(e["reached"]))
            for e in data["episodes"]
        ]
        return cls(episodes, str(data["source"]), data.get("seconds"), list(data.get("notes", [])))


def _finite(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if np.isfinite(v) else None


def pilot_from_rows(rows: Sequence[dict[str, Any]], source: str, thought_required: bool = True) -> Pilot:
    """A pilot from scored episode rows (episodes.jsonl, `check --save`'s base episodes, a benchmark's short rows
    that carry their "class"). Rows without finite components are left out and counted in the notes."""
    episodes, dropped = [], 0
    for i, row in enumerate(rows):
        comps = row.get("components")
        values = {k: _finite(v) for k, v in comps.items()} if isinstance(comps, dict) else {}
        if not values or any(v is None for v in values.values()):
            dropped += 1
            continue
        cls = row.get("class") if row.get("class") in CLASSES else classify_episode(row, thought_required)
        group = f"{row.get('step', '')}:{row.get('group', i)}"
        tokens = _finite(row.get("tokens")) or 0.0
        episodes.append(PilotEpisode(group, cls, values, tokens))  # type: ignore[arg-type]
    pilot = Pilot(episodes, source)
    if dropped:
        pilot.notes.append(f"{dropped} pilot episode(s) had no finite reward components and were left out")
    return pilot


def without_thought(text: str, tag: str = THOUGHT_TAG, replacement: str | None = None) -> str | None:
    """The transcript with its opening thought dropped (or replaced by `replacement`); None without one."""
    m = re.match(rf"\s*<{re.escape(tag)}>.*?</{re.escape(tag)}>\s*", text, re.S)
    if m is None:
        return None
    return ("" if replacement is None else render_thought(replacement, tag)) + text[m.end() :]


SHORTCUT_EDITS: dict[str, Callable[[str, str], str | None]] = {
    "dropped_thought": lambda text, tag: without_thought(text, tag),
    "empty_thought": lambda text, tag: without_thought(text, tag, "..."),
}
"""Class -> the one-step edit of a sampled transcript that reaches it."""


def reach_shortcuts(
    pilot: Pilot,
    rows: Sequence[dict[str, Any]],
    rescore: Callable[[dict[str, Any], str], dict[str, float] | None],
    thought_tag: str = THOUGHT_TAG,
    thought_required: bool = True,
    reference: Callable[[dict[str, Any]], tuple[str, float] | None] | None = None,
) -> Pilot:
    """Add the shortcut edits (`SHORTCUT_EDITS`) of the pilot rows that have a thought and a valid call, and, where
    `reference(row)` gives the task's reference solution (text, policy tokens), that solution once per task (the
    honest work the lab's probes score: a class the pilot may not have sampled yet, as a policy seeded on references
    can reach it).

    `rescore(row, text)` gives the unweighted components of `text` on `row`'s task (None where it cannot). Each
    edit's components are the row's recorded ones plus what the edit changed (edit rescored minus the original
    rescored), so the recorded token count stays the length's reference."""
    added = list(_references(rows, rescore, reference, thought_required)) if reference else []
    if not thought_required:
        return Pilot([*pilot.episodes, *added], pilot.source, pilot.seconds, list(pilot.notes)) if added else pilot
    for i, row in enumerate(rows):
        text = str(row.get("text") or "")
        if not text or not row.get("valid_calls") or not isinstance(row.get("components"), dict):
            continue
        base = rescore(row, text)
        if base is None:
            continue
        for cls, edit in SHORTCUT_EDITS.items():
            edited = edit(text, thought_tag)
            after = rescore(row, edited) if edited else None
            if after is None:
                continue
            comps = {k: float(row["components"].get(k, 0.0)) + after.get(k, 0.0) - base.get(k, 0.0) for k in base}
            tokens = float(row.get("tokens") or 0.0) * (len(edited or "") / max(len(text), 1))
            added.append(PilotEpisode(f"edit:{i}", cls, comps, tokens, reached=True))
    return Pilot([*pilot.episodes, *added], pilot.source, pilot.seconds, list(pilot.notes))


BRANCH_CLASSES = ("dropped_thought",)
"""Classes the no-thought branch samples (`grpolab.engine.branches`): its episodes of these classes replace the edits
that reach them."""


def with_branch(pilot: Pilot, rows: Sequence[dict[str, Any]], thought_required: bool = True) -> Pilot:
    """The pilot with the policy's own episodes on the no-thought branch (`rows`, scored) standing for the classes it
    samples (`BRANCH_CLASSES`, as reached: the branch was forced), in place of the edits that reach them. An edit keeps
    the edited transcript's outcome; the branch is what the policy does without a thought."""
    branch = [e for e in pilot_from_rows(rows, "branch", thought_required).episodes if e.cls in BRANCH_CLASSES]
    if not branch:
        return pilot
    kept = [e for e in pilot.episodes if not (e.reached and e.cls in BRANCH_CLASSES)]
    for e in branch:
        e.group, e.reached = f"branch:{e.group}", True
    note = f"{len(branch)} episode(s) of {', '.join(BRANCH_CLASSES)} sampled on the no-thought branch"
    return Pilot([*kept, *branch], pilot.source, pilot.seconds, [*pilot.notes, note])


def _references(
    rows: Sequence[dict[str, Any]],
    rescore: Callable[[dict[str, Any], str], dict[str, float] | None],
    reference: Callable[[dict[str, Any]], tuple[str, float] | None],
    thought_required: bool,
) -> Iterator[PilotEpisode]:
    """One reached episode per task of `rows`: its reference solution, scored and classified like a sampled one."""
    seen: set[str] = set()
    for row in rows:
        task_id = str(row.get("task_id"))
        if task_id in seen:
            continue
        seen.add(task_id)
        solution = reference(row)
        comps = rescore(row, solution[0]) if solution else None
        if solution is None or comps is None:
            continue
        text, tokens = solution
        scored = {"text": text, "components": comps, "valid_calls": len(parse_transcript(text).calls), "tokens": tokens}
        yield PilotEpisode(f"reference:{task_id}", classify_episode(scored, thought_required), comps, tokens, True)


def demo_pilot(cfg: LabConfig) -> Pilot | None:
    """The shipped pilot where `cfg` starts from the policy it sampled (the demo's model, env, tasks and seeding) and
    every reward it weighs was recorded on the pilot's episodes (so it can be re-scored), else None."""
    mine = {"env": cfg.env, "model": cfg.model, "task_kinds": list(cfg.task_kinds), "sft_steps": cfg.train.sft_steps}
    if mine != DEMO_PILOT_FOR or not DEMO_PILOT_FILE.is_file():
        return None
    try:
        pilot = Pilot.from_json(json.loads(DEMO_PILOT_FILE.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    recorded = pilot.episodes[0].components if pilot.episodes else {}
    return pilot if all(k in recorded for k, w in cfg.reward.weights.items() if w) else None


def load_accuracy() -> dict[str, Any]:
    """The benchmark's fit and scores (empty where the file is missing or unreadable)."""
    try:
        return json.loads(ACCURACY_FILE.read_text())
    except (OSError, ValueError):
        return {}


def accuracy_line(acc: dict[str, Any] | None = None) -> str:
    """How often the forecast was right on real runs, in one line (what every place showing it prints)."""
    acc = load_accuracy() if acc is None else acc
    s = acc.get("scores") or {}
    if not s:
        return "forecast accuracy: not measured in this checkout (benchmarks/forecast_scoring.py measures it)"
    ceiling = acc.get("ceiling") or {}
    return (
        f"forecast accuracy on {acc.get('runs', '?')} real runs (each config left out of the fit): direction "
        f"{s['direction']:.0%} of moved classes, winner {s['winner']:.0%}, share error {s['share_error']:.2f}; "
        f"seed-to-seed ceiling: direction {ceiling.get('direction', float('nan')):.0%}, "
        f"winner {ceiling.get('winner', float('nan')):.0%}"
    )


@dataclass
class Pools:
    """The pilot's episodes by class: unweighted component vectors (n, C), solved flags and tokens."""

    names: list[str]
    components: list[np.ndarray]
    solved: np.ndarray
    """(K,) share of each class's episodes that the verifier passed."""
    tokens: np.ndarray
    counts: np.ndarray
    """(K,) sampled pilot episodes per class."""
    reached: np.ndarray
    """(K,) bool: the class has pool episodes (sampled or reached by an edit)."""


def pools_of(pilot: Pilot, weights: dict[str, float]) -> Pools:
    names = sorted({k for e in pilot.episodes for k in e.components})
    missing = [n for n, w in weights.items() if w and n not in names]
    if missing:
        raise UserError(
            f"the pilot's episodes were not scored with {', '.join(missing)}: the forecast cannot re-score them",
            "take the pilot again with these components in the rubric (grpolab check, or a run's first step)",
        )
    comps, solved, tokens, counts, reached = [], [], [], [], []
    for c in CLASSES:
        eps = [e for e in pilot.episodes if e.cls == c]
        comps.append(np.array([[e.components.get(n, 0.0) for n in names] for e in eps]).reshape(len(eps), len(names)))
        solved.append(np.mean([e.components.get("completion", 0.0) >= 1.0 for e in eps]) if eps else 0.0)
        tokens.append(np.mean([e.tokens for e in eps]) if eps else 0.0)
        counts.append(sum(not e.reached for e in eps))
        reached.append(bool(eps))
    return Pools(names, comps, np.array(solved), np.array(tokens), np.array(counts), np.array(reached))


def _group_advantages(rewards: np.ndarray, scale: str, eps: float = 1e-4) -> np.ndarray:
    """(..., P, G) rewards -> advantages, as `grpolab.engine.grpo.group_advantages` (population std)."""
    centred = rewards - rewards.mean(-1, keepdims=True)
    if scale == "none":
        return centred
    if scale == "batch":
        return centred / (rewards.std(axis=(-2, -1), keepdims=True) + eps)
    return centred / (rewards.std(-1, keepdims=True) + eps)


def _decoupled_advantages(comps: np.ndarray, w: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    """(..., P, G, C) components -> advantages, as `grpolab.engine.grpo.decoupled_advantages` (GDPO)."""
    mean, std = comps.mean(-2, keepdims=True), comps.std(-2, keepdims=True)
    summed = ((comps - mean) / (std + eps) * w).sum(-1)
    return (summed - summed.mean((-2, -1), keepdims=True)) / (summed.std(axis=(-2, -1), keepdims=True) + eps)


def initial_policy(pools: Pools) -> np.ndarray:
    """(K,) the pilot's class shares; a class reached only by edits at REACH_FLOOR episodes; others 0."""
    n = max(pools.counts.sum(), 1)
    shares = np.where(pools.counts > 0, pools.counts, np.where(pools.reached, REACH_FLOOR, 0.0)) / n
    return shares / shares.sum()


def forecast(
    pilot: Pilot,
    cfg: LabConfig,
    steps: int = 20,
    runs: int = 16,
    speed: float | None = None,
    kl_scale: float | None = None,
    weights: dict[str, float] | None = None,
    natural: bool | None = None,
    decision_speed: float | None = None,
    within_speed: float | None = None,
) -> dict[str, Any]:
    """`runs` seeded GRPO runs on the pilot's classes under `cfg`'s reward and GRPO settings: per-step means and a
    10-90% band, in the simulator's result shape (`grpolab.simulator.simulate.simulate`), plus what it cannot know.
    `weights` replace the config's reward weights (a pilot recorded only with totals is forecast with {"total": 1}).
    `decision_speed` is the step size of `DECISION_CLASSES` (default: the accuracy file's, else `speed`). `within_speed`
    is the step size of each class's own episodes (a class's better episodes grow inside it: `within_class_step`;
    default: the accuracy file's, else 0: a class's reward stays its pilot mean)."""
    if not pilot.sampled:
        raise UserError(f"the pilot ({pilot.source}) has no scored episodes", "sample the model first (grpolab check)")
    acc = load_accuracy()
    speed = float(acc.get("speed", DEFAULT_SPEED)) if speed is None else speed
    kl_scale = float(acc.get("kl_scale", DEFAULT_KL_SCALE)) if kl_scale is None else kl_scale
    natural = bool(acc.get("natural", False)) if natural is None else natural
    if decision_speed is None:
        decision_speed = float(acc.get("decision_speed", speed))
    within_speed = float(acc.get("within_speed", 0.0)) if within_speed is None else within_speed
    within = within_speed > 0
    weights = dict(cfg.reward.weights if weights is None else weights)
    pools = pools_of(pilot, weights)
    w = np.array([weights.get(n, 0.0) for n in pools.names])
    with np.errstate(over="ignore", invalid="ignore"):
        rewards = [c @ w for c in pools.components]
        worst = max((float(np.abs(r).max()) for r in rewards if r.size), default=0.0)
    if not np.isfinite(worst) or worst > MAX_CLASS_REWARD:
        raise UserError(
            f"the reward weights pay an episode {worst:g}: the forecast would not be finite",
            "use weights of a few units",
        )
    K, R = len(CLASSES), runs
    G, P = cfg.rollout.group_size, cfg.train.prompts_per_step
    g = cfg.grpo
    rng = np.random.default_rng(cfg.seed)
    p0 = initial_policy(pools)
    live = p0 > 0
    log_p0 = np.log(np.where(live, p0, 1.0))
    theta = np.tile(np.where(live, log_p0, -np.inf), (R, 1))
    # every class's pool as one flat array, so one draw serves all runs: offset + floor(u * size)
    sizes = np.array([len(r) for r in rewards])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat_comps = np.concatenate([c for c in pools.components if len(c)])  # (N, C)
    flat_reward = flat_comps @ w
    seg = np.repeat(np.arange(K), sizes)  # (N,) the class of each pool episode
    flat_solved = (flat_comps[:, pools.names.index("completion")] >= 1.0) if "completion" in pools.names else None
    phi = np.zeros((R, len(flat_reward)))  # within-class logits of the pool's episodes (uniform at the start)
    history = np.zeros((steps + 1, R, K))
    inner = np.zeros((steps + 1, R, K, flat_comps.shape[1]))  # each class's mean components under its weights
    solved = np.zeros((steps + 1, R, K))
    adv_abs = np.zeros((steps + 1, R))
    history[0] = np.exp(theta - np.logaddexp.reduce(theta, -1, keepdims=True))
    onehot = np.eye(K)
    step_size = np.where(np.isin(CLASSES, DECISION_CLASSES), decision_speed, speed)  # (K,)
    for t in range(0, steps + 1):
        if within or t == 0:  # without the within-class step a class's episodes keep their pilot weights
            inside = _within_probs(phi, seg, K)  # (R, N)
            inner[t] = _by_class(inside[..., None] * flat_comps, seg, K)
            solved[t] = _by_class(inside * flat_solved, seg, K) if flat_solved is not None else 0.0
        else:
            inner[t], solved[t] = inner[0], solved[0]
        if t == steps:
            break
        pi_old = history[t]
        cdf = pi_old.cumsum(-1)
        cdf[:, -1] = 1.0
        u = rng.random((R, P, G))
        cls = (u[..., None] >= cdf[:, None, None, :]).sum(-1)  # (R, P, G) class index
        cls = np.minimum(cls, K - 1)
        if within:
            pick = _pick_within(inside, seg, K, cls, rng.random((R, P, G)))
        else:
            pick = offsets[cls] + np.floor(rng.random((R, P, G)) * sizes[cls]).astype(int)
        if g.multi_objective_aggregation == "normalize_then_sum":
            adv = _decoupled_advantages(flat_comps[pick], w)
        else:
            adv = _group_advantages(flat_reward[pick], g.scale_rewards)
        hot = onehot[cls]  # (R, P, G, K)
        weight = (adv[..., None] * hot).sum((1, 2)) / (P * G)  # (R, K)
        adv_abs[t + 1] = np.abs(adv).mean((1, 2))
        theta = policy_step(theta, pi_old, weight, log_p0, step_size, g.beta, g.epsilon, g.mu, natural)
        history[t + 1] = np.exp(theta - np.logaddexp.reduce(theta, -1, keepdims=True))
        if within:
            phi = within_class_step(phi, inside, seg, K, flat_reward, flat_reward[pick], within_speed, g.scale_rewards)
    result = _result(pilot, pools, history, adv_abs, inner @ w, inner, solved, p0, cfg, weights, speed, kl_scale, acc)
    result["settings"]["decision_speed"] = decision_speed
    result["settings"]["within_speed"] = within_speed
    return result


def _by_class(values: np.ndarray, seg: np.ndarray, K: int) -> np.ndarray:
    """(R, N, ...) per pool episode -> (R, K, ...) summed by class (0 where a class has no episode)."""
    out = np.zeros((values.shape[0], K, *values.shape[2:]))
    np.add.at(out, (slice(None), seg), values)
    return out


def _within_probs(phi: np.ndarray, seg: np.ndarray, K: int) -> np.ndarray:
    """(R, N) within-class logits -> each episode's probability within its class (summing to 1 per class)."""
    e = np.exp(phi - phi.max(-1, keepdims=True))
    return e / np.maximum(_by_class(e, seg, K)[:, seg], 1e-300)


def _pick_within(inside: np.ndarray, seg: np.ndarray, K: int, cls: np.ndarray, u: np.ndarray) -> np.ndarray:
    """(R, P, G) pool episodes drawn by their within-class probabilities, given each draw's class `cls` and
    uniforms `u`: one search over every run's classes laid end to end (run r, class c spans [r*K + c, r*K + c + 1))."""
    R, N = inside.shape
    cum = inside.cumsum(-1)
    first = np.searchsorted(seg, np.arange(K))  # each class's first pool episode
    before = np.where(first > 0, cum[:, np.maximum(first - 1, 0)], 0.0)  # (R, K) mass of the classes before it
    within_cdf = np.minimum(cum - before[:, seg], 1.0 - 1e-9)
    keys = (np.arange(R)[:, None] * K + seg[None, :] + within_cdf).ravel()
    want = (np.arange(R)[:, None, None] * K + cls + u * (1.0 - 1e-9)).ravel()
    flat = np.searchsorted(keys, want).reshape(cls.shape) - np.arange(R)[:, None, None] * N
    return np.clip(flat, 0, N - 1)


def within_class_step(
    phi: np.ndarray,
    inside: np.ndarray,
    seg: np.ndarray,
    K: int,
    reward: np.ndarray,
    sampled: np.ndarray,
    speed: float,
    scale: str,
    eps: float = 1e-4,
) -> np.ndarray:
    """One natural step of each class's own episodes: an episode's logit moves by its expected advantage in this
    step's groups (its reward against each group's mean and spread, `sampled` (R, P, G)) less its class's mean, so a
    class's better episodes grow inside it, sampled or not (a real policy's update reaches
    episodes like the sampled ones)."""
    mean = sampled.mean(-1)  # (R, P)
    spread = sampled.std(-1) + eps if scale == "group" else np.ones_like(mean)
    if scale == "batch":
        spread = np.broadcast_to(sampled.std(axis=(-2, -1))[:, None] + eps, mean.shape)
    adv = ((reward[None, None, :] - mean[..., None]) / spread[..., None]).mean(1)  # (R, N)
    class_mean = _by_class(inside * adv, seg, K)[:, seg]
    return phi + speed * (adv - class_mean)


GROWS = 0.05
"""A class whose forecast share rises by at least this much is named as growing."""


def growing(p0: np.ndarray, final: np.ndarray) -> dict[str, list[float]]:
    """Classes the forecast grows by GROWS or more: name -> [start share, end share], largest rise first."""
    rise = final - p0
    order = [i for i in np.argsort(-rise) if rise[i] >= GROWS]
    return {CLASSES[i]: [round(float(p0[i]), 3), round(float(final[i]), 3)] for i in order}


def winners(final_runs: np.ndarray) -> dict[str, float]:
    """(R, K) end shares of the seeded runs -> the share of runs each class ends largest in, largest first: a
    decision that flips in some runs and not in others (the thought dropped) shows as a split, not as a mean."""
    wins = np.bincount(final_runs.argmax(-1), minlength=len(CLASSES)) / max(final_runs.shape[0], 1)
    return {CLASSES[i]: round(float(wins[i]), 3) for i in np.argsort(-wins) if wins[i] > 0}


def winners_line(wins: dict[str, float], runs: int) -> str:
    """The winner split in one line, as the CLI prints it."""
    return f"largest class at the end, share of the {runs} seeded runs: " + ", ".join(
        f"{c} {share:.0%}" for c, share in wins.items()
    )


def _result(
    pilot: Pilot,
    pools: Pools,
    history: np.ndarray,
    adv_abs: np.ndarray,
    mean_reward: np.ndarray,
    mean_comps: np.ndarray,
    solved: np.ndarray,
    p0: np.ndarray,
    cfg: LabConfig,
    weights: dict[str, float],
    speed: float,
    kl_scale: float,
    acc: dict[str, Any],
) -> dict[str, Any]:
    curves: dict[str, np.ndarray] = {}
    for j, n in enumerate(pools.names):
        curves[reward_key(n)] = (history * mean_comps[..., j]).sum(-1) * weights.get(n, 0.0)
    curves[REWARD_MEAN] = (history * mean_reward).sum(-1)
    live = p0 > 0
    ratio = np.where(live, history / np.where(live, p0, 1.0), 1.0)
    class_kl = (history * np.log(np.maximum(ratio, 1e-300))).sum(-1) / np.maximum(history @ pools.tokens, 1.0)
    curves[KL] = kl_scale * class_kl
    call = np.array([c in CALL_CLASSES for c in CLASSES], dtype=float)
    hack = np.array([c in HACK_CLASSES for c in CLASSES], dtype=float)
    curves[TOOL_CALL_PROB] = history @ call
    curves[TOOL_TOKEN_MASS] = history @ call
    curves[ADV_MEAN_ABS] = adv_abs
    curves[POLICY_LOSS] = cfg.grpo.beta * curves[KL]
    curves[HACK_MASS] = history @ hack
    curves[SUCCESS] = (history * solved).sum(-1)
    for i, c in enumerate(CLASSES):
        curves[class_key(c)] = history[..., i]
    means = {k: v.mean(-1) for k, v in curves.items()}
    bands = {k: np.percentile(v, [10, 90], axis=-1) for k, v in curves.items()}
    iterations = []
    for t in range(history.shape[0]):
        row: dict[str, Any] = {"step": t}
        for k in curves:
            row[k] = float(means[k][t])
            for i, band in enumerate(SIM_BANDS):
                row[band_key(k, band)] = float(bands[k][i, t])
        iterations.append(row)
    final = history[-1].mean(0)
    n = int(pools.counts.sum())
    unknown = [c for i, c in enumerate(CLASSES) if not pools.reached[i]]
    notes = list(pilot.notes)
    if n < MIN_PILOT:
        notes.append(f"the pilot has {n} episodes (fewer than {MIN_PILOT}): one episode moves a class by {1 / n:.0%}")
    return {
        "simulation": True,
        "forecast": True,
        "pilot": {"source": pilot.source, "episodes": n, "seconds": pilot.seconds},
        "classes": {
            c: {
                "reward": float(mean_reward[0, 0, i]),
                "pilot_episodes": int(pools.counts[i]),
                "reached_by_edit": bool(pools.reached[i] and not pools.counts[i]),  # or by a reference
                "solved": float(pools.solved[i]),
                "tokens": float(pools.tokens[i]),
                "initial": float(p0[i]),
                "final": float(final[i]),
            }
            for i, c in enumerate(CLASSES)
            if pools.reached[i]
        },
        "unknown": unknown,
        "growing": growing(p0, final),
        "winners": winners(history[-1]),
        "notes": notes,
        "settings": {
            "steps": history.shape[0] - 1,
            "runs": history.shape[1],
            "speed": speed,
            "kl_scale": kl_scale,
            "weights": weights,
            "beta": cfg.grpo.beta,
        },
        "accuracy": acc.get("scores", {}),
        "accuracy_line": accuracy_line(acc),
        "iterations": iterations,
        "warnings": warnings(iterations, {c: float(final[i]) for i, c in enumerate(CLASSES)}),
    }


def tasks_by_id(env: Any) -> dict[str, Any]:
    """The env's train and held-out tasks by id: how a pilot row (which keeps its `task_id`) finds its task."""
    return {t.id: t for split in ("train", "heldout") for t in env.tasks(split)}


def env_rescorer(
    env: Any, cfg: LabConfig, count_tokens: Callable[[str], int]
) -> Callable[[dict[str, Any], str], dict[str, float] | None]:
    """`rescore(row, text)` for `reach_shortcuts`: the unweighted components of `text` on the row's task (found by
    its task_id among the env's tasks), scored by the lab's reward under `cfg`; None where the task is unknown."""
    from grpolab.rewards.rubric import rubric_of
    from grpolab.rewards.score import score_transcript

    tasks = tasks_by_id(env)
    rubric = rubric_of(env)
    unit = dict.fromkeys(rubric.scored(rubric.resolve(dict(cfg.reward.weights))), 1.0)
    r = cfg.reward

    def rescore(row: dict[str, Any], text: str) -> dict[str, float] | None:
        task = tasks.get(str(row.get("task_id")))
        if task is None:
            return None
        s = score_transcript(
            env, task, text, unit, r.length_unit, count_tokens=count_tokens, thought_min_words=r.thought_min_words
        )
        return {k: float(v) for k, v in s.components.items() if np.isfinite(v)}

    return rescore


def env_references(
    env: Any, count_tokens: Callable[[str], int]
) -> Callable[[dict[str, Any]], tuple[str, float] | None]:
    """`reference(row)` for `reach_shortcuts`: the env's reference solution of the row's task and its policy tokens
    (tool responses are the environment's); None where the task is unknown."""
    tasks = tasks_by_id(env)

    def reference(row: dict[str, Any]) -> tuple[str, float] | None:
        task = tasks.get(str(row.get("task_id")))
        if task is None or not (task.reference_answer or task.reference_calls):
            return None
        try:
            parts = env.reference_parts(task)
        except Exception:  # a user env's tools may fail on its own reference: the forecast goes on without it
            return None
        return "".join(t for t, _ in parts), float(sum(count_tokens(t) for t, mine in parts if mine))

    return reference


def forecast_summary(
    rows: list[dict[str, Any]],
    env: Any,
    cfg: LabConfig,
    count_tokens: Any,
    seconds: float,
    branch: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The forecast from the smoke test's episodes (the pilot) and its no-thought `branch` episodes that `grpolab
    check` shows: what grows under these weights over the config's steps, what it cannot know, and how often it was
    right on real runs (`grpolab.preflight.check.Forecaster`)."""
    pilot = pilot_from_rows(rows, "the smoke test's episodes", env.thought_required)
    pilot.seconds = seconds
    rescore, reference = env_rescorer(env, cfg, count_tokens), env_references(env, count_tokens)
    try:
        reached = reach_shortcuts(pilot, rows, rescore, env.thought_tag, env.thought_required, reference)
        reached = with_branch(reached, branch, env.thought_required)
        result = forecast(reached, cfg, cfg.train.steps)
    except UserError as exc:
        return {"error": str(exc)}
    notes = list(result["notes"])
    if cfg.train.sft_steps:
        notes.append(
            f"the pilot samples the model before its {cfg.train.sft_steps} SFT steps; GRPO starts after them: "
            "forecast from the run's first step with `grpolab simulate --pilot RUN`"
        )
    keep = ("pilot", "growing", "winners", "unknown", "accuracy_line", "warnings")
    runs = result["settings"]["runs"]
    return {**{k: result[k] for k in keep}, "notes": notes, "steps": cfg.train.steps, "runs": runs}
