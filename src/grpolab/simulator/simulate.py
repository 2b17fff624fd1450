"""Policy & reward simulator: exact GRPO on a behaviour-level policy, fast enough to drive sliders.

This is a simulation and says so. The policy is a softmax over episode classes (free-text guess, malformed call,
valid call with a wrong result, grounded correct answer, dummy tags, call with no answer, verbose correct answer).
Each class carries component scores (F, S, C, and generated tokens) measured by scoring real transcripts of that
class with the lab's reward; initial class probabilities come from real base-model episodes (the learnability
smoke test, or a run's first step), classified by their reward reasons, or from documented defaults.

GRPO on that policy is exact: G classes sampled per prompt, group-normalised advantages, the clipped surrogate on
the class logits (mu epochs), and beta * KL(pi || pi_0) taken as a proximal mirror-descent step with size `lr`.
Many seeded runs are vectorised (numpy) and averaged, with a 10-90% band. Reported curves use exact expectations
under each run's policy, so they are smooth even with few samples. `lr` is in logit units: it is not the LoRA
learning rate, which is why sim-to-real reports its gap instead of claiming a match.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from grpolab.behaviour import CALL_CLASSES, CLASSES, HACK_CLASSES, classify_episode
from grpolab.config import LabConfig
from grpolab.errors import UserError
from grpolab.preflight.probes import call_without_answer, dummy_tags, empty_call, padding
from grpolab.preflight.shortcuts import drop_thought, empty_thought, second_candidate
from grpolab.rewards.components import DEFAULT_LENGTH_UNIT, THOUGHT_MIN_WORDS, standard_names
from grpolab.rewards.rubric import BUILTIN_RUBRIC, rubric_of
from grpolab.rewards.score import score_transcript
from grpolab.vocabulary import (
    ADV_MEAN_ABS,
    HACK_MASS,
    KL,
    POLICY_LOSS,
    REWARD_MEAN,
    SIM_BANDS,
    SIM_TO_REAL,
    SUCCESS,
    TOOL_CALL_PROB,
    TOOL_TOKEN_MASS,
    band_key,
    class_key,
    reward_key,
)

DEFAULT_PRIOR = {
    "free_text_guess": 0.07,
    "malformed_call": 0.20,
    "wrong_result_call": 0.20,
    "grounded_correct": 0.07,
    "dummy_tags": 0.07,
    "call_no_answer": 0.32,
    "verbose_correct": 0.07,
    "empty_thought": 0.0,
    "dropped_thought": 0.0,
    "hedged_answer": 0.0,
    "code_block_only": 0.0,
}
"""Used when no real episodes are given: the class mix of the demo's first GRPO step (16 samples of SmolLM2-135M
after the demo's 10 SFT seeding steps, smoothed by 0.5 per class; `grpolab simulate --real runs/demo` measures it).
The base model alone is almost all free_text_guess, which GRPO cannot move (no call ever samples). The shortcut
classes (empty or dropped thought, hedged answer, code block only) start at the floor of 1e-6: the simulator then
shows whether the weights pay for them, not how soon a real policy stumbles on one."""
PRIOR_FLOOR = 1e-6
"""Smallest initial probability of a class (a class with prior 0 could never be sampled)."""
MAX_CLASS_REWARD = 1e15
"""Largest class reward (weighted sum) simulated: group statistics sum rewards and their squares, and weights of
1e308 made every curve NaN. A real reward is a few units; this only refuses nonsense."""


DEFAULT_RUNS = 16
"""Seeded simulated runs averaged (the CLI's --runs and the lab's simulator)."""
DEFAULT_LR = 0.3
"""The step size fitted to the real demo run (`grpolab simulate --real runs/demo` prints the best-fitting one)."""
DEFAULT_KL_SCALE = 101.0
"""A class policy sees only which kind of episode is sampled, not the wording inside it, so its KL is a lower bound
of the real per-token KL. The real policy also drifts within each class; this factor (real per-token KL / the class
policy's, fitted on the real demo run by `grpolab simulate --real runs/demo`) puts the simulated KL in the units
and the size the trainer logs."""


@dataclass
class ClassProfile:
    """Unweighted component values of one class (standard components), measured on real scored transcripts."""

    components: dict[str, float]
    tokens: float
    """Generated tokens of the class's transcripts (how the classifier tells verbose answers from concise ones)."""
    reachable: bool = True
    """False where the environment cannot produce the class (it then never samples)."""


def measure_profiles(
    env: Any,
    count_tokens: Any,
    length_unit: int = DEFAULT_LENGTH_UNIT,
    n_tasks: int = 4,
    weights: dict[str, float] | None = None,
    thought_min_words: int = THOUGHT_MIN_WORDS,
) -> dict[str, ClassProfile]:
    """Score real transcripts of each class (built from the env's tasks and tools) with the lab's reward.

    The standard components are always measured, and any other component `weights` names (a user reward, the
    deliberately gameable ones). A class the environment cannot produce (no thought to empty in `code`) keeps the
    free-text profile and is marked unreachable."""

    def wrong_result(env: Any, task: Any) -> str:
        parts = env.reference_parts(task)
        return "".join(t for t, _ in parts[:-1]) + "The result is 123.45."

    def free_text(env: Any, task: Any) -> str:
        return "I think it went up, roughly 15% or so, based on typical market behaviour for this kind of company."

    def code_block_only(env: Any, task: Any) -> str:
        return "```python\ndef solution(*args):\n    return None\n```"

    builders = {
        "free_text_guess": free_text,
        "malformed_call": empty_call,
        "wrong_result_call": wrong_result,
        "grounded_correct": lambda e, t: e.reference_transcript(t),
        "dummy_tags": dummy_tags,
        "call_no_answer": call_without_answer,
        "verbose_correct": padding,
        "empty_thought": empty_thought,
        "dropped_thought": drop_thought,
        "hedged_answer": second_candidate,
        "code_block_only": code_block_only,
    }
    tasks = env.tasks("train")[:n_tasks]
    rubric = rubric_of(env)  # the env's own components and the plugins' are measured as the built-ins are
    names = rubric.scored(rubric.resolve(weights or {}))
    unit = dict.fromkeys(names, 1.0)
    profiles: dict[str, ClassProfile] = {}
    for name, build in builders.items():
        texts = [(t, build(env, t)) for t in tasks]
        texts = [(t, x) for t, x in texts if x is not None]
        if not texts:
            profiles[name] = ClassProfile(dict(profiles["free_text_guess"].components), 0.0, reachable=False)
            continue
        scores = [
            score_transcript(
                env, t, x, unit, length_unit, count_tokens=count_tokens, thought_min_words=thought_min_words
            )
            for t, x in texts
        ]
        values = {k: float(np.mean([s.components[k] for s in scores])) for k in names}
        profiles[name] = ClassProfile(values, values.get("length", 0.0) * length_unit)
    return profiles


def prior_from_rows(
    rows: list[dict[str, Any]], smoothing: float = 0.5, thought_required: bool = True
) -> dict[str, float]:
    """The class mix of real episode rows (the shared classifier), smoothed by `smoothing` per class."""
    counts = {c: smoothing for c in CLASSES}
    for r in rows:
        counts[classify_episode(r, thought_required)] += 1
    total = sum(counts.values())
    return {c: v / total for c, v in counts.items()}


@dataclass
class SimSettings:
    """The lab config the simulated runs follow (weights, G, prompts per step, beta, epsilon, mu, seed), plus the
    simulator's own knobs."""

    cfg: LabConfig
    steps: int = 100
    """Simulated GRPO iterations."""
    runs: int = DEFAULT_RUNS
    """Seeded runs averaged (band = 10-90%)."""
    lr: float = DEFAULT_LR  # documented in LR_DOC (the web lab shows it beside the slider)
    kl_scale: float = DEFAULT_KL_SCALE
    """Per-token KL of the real policy per unit of class-level KL (see DEFAULT_KL_SCALE)."""

    LR_DOC: ClassVar[str] = "Step size on the class logits (simulator units, not the LoRA learning rate)."


def class_rewards(profiles: dict[str, ClassProfile], weights: dict[str, float]) -> np.ndarray:
    """(K, C + 1): the weighted standard components per class, then the total (other measured components count in
    the total: a weighted user reward or a gameable one)."""
    names = standard_names()
    extra = [n for n in weights if n not in names and all(n in p.components for p in profiles.values())]
    out = np.zeros((len(CLASSES), len(names) + 1))
    for i, c in enumerate(CLASSES):
        out[i, :-1] = [weights.get(n, 0.0) * profiles[c].components[n] for n in names]
        out[i, -1] = sum(weights[n] * profiles[c].components[n] for n in extra)
        out[i, -1] += out[i, :-1].sum()
    return out


def _refuse_huge(table: np.ndarray, weights: dict[str, float]) -> None:
    """A UserError naming the reward weights when a class reward is not finite or beyond MAX_CLASS_REWARD."""
    worst = float(np.abs(table).max()) if np.isfinite(table).all() else math.inf
    if worst > MAX_CLASS_REWARD:
        given = ", ".join(f"{k} {v:g}" for k, v in weights.items())
        defaults = ",".join(f"{w:g}" for w in BUILTIN_RUBRIC.default_weights().values())
        raise UserError(
            f"the reward weights ({given}) pay a class {worst:g} per episode, beyond the simulator's "
            f"{MAX_CLASS_REWARD:g}: its curves would not be finite",
            f"use weights of a few units, e.g. --weights {defaults} (the defaults)",
        )


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


NATURAL_FLOOR = 1e-6
"""Classes below this share take no natural-gradient step (their logit would jump without bound)."""


def policy_step(
    theta: np.ndarray,
    pi_old: np.ndarray,
    weight: np.ndarray,
    log_p0: np.ndarray,
    lr: float | np.ndarray,
    beta: float,
    epsilon: float,
    mu: int,
    natural: bool = False,
) -> np.ndarray:
    """One GRPO iteration on (R, K) class logits: `mu` epochs of the clipped surrogate whose (R, K) `weight` is each
    class's summed advantage over the batch, with the KL(pi || pi_0) penalty taken as a proximal step. A class at
    probability 0 (logit -inf) stays there.

    `natural` takes the step in the softmax's natural (Fisher) geometry: a class's logit moves by its own mean
    advantage, not by its share times it (the preconditioned step an adaptive optimiser such as Adam approximates;
    on forecast_scoring's runs it scores better than the plain step). `lr` may be one step size per class (K,)."""
    shrink = lr * beta
    for epoch in range(mu):
        if epoch == 0:  # ratio = 1 on the first epoch: nothing is clipped yet
            pi, coef = pi_old, weight
        else:
            pi = _softmax(theta)
            ratio = np.divide(pi, pi_old, out=np.ones_like(pi), where=pi_old > 0)
            # the clipped surrogate's gradient vanishes where the clip binds in the advantage's direction
            active = ~(((weight > 0) & (ratio > 1 + epsilon)) | ((weight < 0) & (ratio < 1 - epsilon)))
            coef = weight * ratio * active  # d ratio / d theta = ratio * d log pi
        if natural:  # F^-1 g of the softmax: weight / pi, up to a shift the softmax ignores
            grad = np.divide(coef, pi, out=np.zeros_like(coef), where=pi > NATURAL_FLOOR)
        else:
            grad = coef - coef.sum(-1, keepdims=True) * pi
        # mirror-descent step with the KL(pi || pi_0) penalty taken in closed form (proximal), which stays
        # stable for any beta: pi_new ~ ((pi * exp(lr * grad)) * pi_0 ** (lr * beta)) ** (1 / (1 + lr * beta))
        theta = (theta + lr * grad + shrink * log_p0) / (1 + shrink)
    return theta


def simulate(profiles: dict[str, ClassProfile], prior: dict[str, float], s: SimSettings) -> dict[str, Any]:
    """Run `s.runs` seeded GRPO runs on the class policy; per-step means and a 10-90% band."""
    cfg = s.cfg
    weights = cfg.reward.weights
    rng = np.random.default_rng(cfg.seed)
    K, R = len(CLASSES), s.runs
    with np.errstate(over="ignore", invalid="ignore"):  # overflow gives inf, which _refuse_huge names
        table = class_rewards(profiles, weights)  # (K, C + 1)
    _refuse_huge(table, weights)
    reward = table[:, -1]  # (K,)
    p0 = np.array([max(prior.get(c, 0.0), PRIOR_FLOOR) if profiles[c].reachable else 1e-12 for c in CLASSES])
    p0 = p0 / p0.sum()
    log_p0 = np.log(p0)
    theta = np.tile(log_p0, (R, 1))  # (R, K) logits
    call = np.array([c in CALL_CLASSES for c in CLASSES], dtype=float)
    hack = np.array([c in HACK_CLASSES for c in CLASSES], dtype=float)
    success = np.array([profiles[c].components["completion"] >= 1.0 for c in CLASSES], dtype=float)
    history = np.zeros((s.steps + 1, R, K))
    adv_abs = np.zeros((s.steps + 1, R))  # mean |advantage| of each step's episodes (0 before the first step)
    history[0] = _softmax(theta)
    G, P, beta, epsilon = cfg.rollout.group_size, cfg.train.prompts_per_step, cfg.grpo.beta, cfg.grpo.epsilon
    uniforms = rng.random((s.steps, R, P, G))  # drawn at once: per-call overhead dominates at this size
    reward_sq = reward**2
    for t in range(1, s.steps + 1):
        pi_old = history[t - 1]  # (R, K)
        cdf = pi_old.cumsum(-1)
        cdf[:, -1] = 1.0  # guard against rounding: every uniform lands in some class
        # a group is fully described by its class counts: count the group's uniforms below each cdf step
        below = (uniforms[t - 1][..., None] < cdf[:, None, None, :]).sum(-2)  # (R, P, K)
        counts = below.copy()  # (R, P, K)
        counts[..., 1:] -= below[..., :-1]
        mean = counts @ reward / G  # (R, P)
        adv = reward - mean[..., None]  # (R, P, K) advantage of each class within its group
        if cfg.grpo.scale_rewards == "group":
            adv = adv / (np.sqrt(np.maximum(counts @ reward_sq / G - mean**2, 0.0))[..., None] + 1e-4)
        elif cfg.grpo.scale_rewards == "batch":  # the std of all P x G rewards of each run
            var = (counts @ reward_sq).sum(1) / (P * G) - mean.mean(1) ** 2  # (R,)
            adv = adv / (np.sqrt(np.maximum(var, 0.0))[:, None, None] + 1e-4)
        weight = (counts * adv).sum(1) / (P * G)  # (R, K): the group's advantages summed by class
        adv_abs[t] = (counts * np.abs(adv)).sum((1, 2)) / (P * G)
        theta = policy_step(theta, pi_old, weight, log_p0, s.lr, beta, epsilon, cfg.grpo.mu)
        history[t] = _softmax(theta)
    keys = [*(reward_key(n) for n in standard_names()), REWARD_MEAN]
    curves = {k: history @ table[:, j] for j, k in enumerate(keys)}
    # the trainer's units: a mean per-token k3 estimate, so the class-level (per-episode) KL is spread over the
    # episode's generated tokens; coarse-graining episodes into classes can only underestimate the sequence KL
    tokens = np.array([profiles[c].tokens for c in CLASSES])
    class_kl = (history * (np.log(history) - log_p0)).sum(-1) / np.maximum(history @ tokens, 1.0)
    curves[KL] = s.kl_scale * class_kl
    curves[TOOL_CALL_PROB] = history @ call
    # the class policy's probability of starting with a call: the simulator's counterpart of tool_token_mass
    curves[TOOL_TOKEN_MASS] = history @ call
    curves[ADV_MEAN_ABS] = adv_abs
    # group-centred advantages make the surrogate 0 at ratio 1, so the loss is the KL term
    curves[POLICY_LOSS] = beta * curves[KL]
    curves[HACK_MASS] = history @ hack
    curves[SUCCESS] = history @ success
    for i, c in enumerate(CLASSES):  # the same class names as a real run's behaviour fields
        curves[class_key(c)] = history[..., i]
    if not all(np.isfinite(v).all() for v in curves.values()):
        raise UserError(
            f"the simulation is not finite at lr={s.lr:g} (its curves overflow)", "use a smaller --lr, e.g. 0.3"
        )
    means = {k: v.mean(-1) for k, v in curves.items()}
    bands = {k: np.percentile(v, [10, 90], axis=-1) for k, v in curves.items()}
    iterations = []
    for t in range(s.steps + 1):
        row: dict[str, Any] = {"step": t}
        for k in curves:
            row[k] = float(means[k][t])
            for i, band in enumerate(SIM_BANDS):
                row[band_key(k, band)] = float(bands[k][i, t])
        iterations.append(row)
    final = _softmax(theta).mean(0)
    return {
        "simulation": True,
        "classes": {
            c: {
                **profiles[c].components,
                "tokens": profiles[c].tokens,
                "reward": float(reward[i]),
                "initial": float(p0[i]),
                "final": float(final[i]),
            }
            for i, c in enumerate(CLASSES)
        },
        "settings": {
            "steps": s.steps,
            "runs": s.runs,
            "lr": s.lr,
            "kl_scale": s.kl_scale,
            "weights": weights,
            "beta": beta,
        },
        "iterations": iterations,
        "warnings": warnings(iterations, {c: float(final[i]) for i, c in enumerate(CLASSES)}),
    }


def warnings(iterations: list[dict[str, Any]], final: dict[str, float]) -> list[str]:
    """What a person should not miss in a simulated run: hacks taking over, success falling."""
    first, last = iterations[0], iterations[-1]
    out = []
    if last[HACK_MASS] > max(0.5, first[HACK_MASS] + 0.2):
        top = max(HACK_CLASSES, key=lambda c: final[c])
        out.append(
            f"reward hacking: {last[HACK_MASS]:.0%} of episodes end in classes that score without solving "
            f"(mostly {top}), from {first[HACK_MASS]:.0%}; the reward pays for structure, not for the task"
        )
    if last[SUCCESS] < first[SUCCESS] - 0.05:
        out.append(f"success falls from {first[SUCCESS]:.0%} to {last[SUCCESS]:.0%} under these weights")
    return out


def sim_to_real(sim: dict[str, Any], real_rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mean absolute difference between simulated and measured curves, per curve, on the steps both have."""
    by_step = {row["step"]: row for row in sim["iterations"]}
    gaps = {}
    for key in SIM_TO_REAL:
        pairs = [(by_step[r["step"]][key], r[key]) for r in real_rows if r.get("step") in by_step and key in r]
        if pairs:
            gaps[key] = float(np.mean([abs(a - b) for a, b in pairs]))
    return gaps


def fit_lr(
    profiles: dict[str, ClassProfile], prior: dict[str, float], s: SimSettings, real_rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """The simulator step size and KL scale that best match a real run: for each step size on a log grid, the KL
    scale is the ratio of summed real to summed class-level KL; the best pair has the smallest summed relative gap
    (mean |sim - real| / mean |real| per curve, so KL counts as much as success)."""
    scales = {}
    for key in SIM_TO_REAL:
        values = [abs(r[key]) for r in real_rows if key in r]
        scales[key] = max(float(np.mean(values)), 1e-6) if values else 1.0
    real_kl = sum(r.get(KL, 0.0) for r in real_rows)
    best: tuple[float, dict[str, Any]] | None = None
    for lr in np.geomspace(0.003, 3.0, 25):
        # only the KL curve depends on kl_scale, linearly: simulate once unscaled, then scale that curve
        iterations = simulate(profiles, prior, replace(s, lr=float(lr), kl_scale=1.0))["iterations"]
        by_step = {row["step"]: row[KL] for row in iterations}
        sim_kl = sum(by_step.get(r["step"], 0.0) for r in real_rows if KL in r)
        kl_scale = real_kl / sim_kl if sim_kl > 0 and real_kl > 0 else 1.0
        scaled = [{**row, KL: kl_scale * row[KL]} for row in iterations]
        gaps = sim_to_real({"iterations": scaled}, real_rows)
        total = sum(v / scales[k] for k, v in gaps.items())
        if best is None or total < best[0]:
            best = (total, {"lr": float(lr), "kl_scale": kl_scale, "gap": gaps})
    assert best is not None
    return best[1]
