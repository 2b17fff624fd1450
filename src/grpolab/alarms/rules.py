"""Alarms during training: reward hacking, kl past its bound, entropy collapse, length runaway, an int8 rollout
sampler far from the policy, behaviour drift, reward attribution (the hacks that ride along with real learning:
`grpolab.alarms.drift`, `grpolab.alarms.attribution`) and the greedy probe's hack classes
(`grpolab.alarms.greedy_probe`).

Reward hacking is the failure the lab is built to catch: the training reward climbs while held-out
verified success does not. The statistic: Welch's t of the training reward over the episodes of the last
`hack_window` steps against those of the first `hack_window` steps (pooled from each step's reward/mean,
reward/std and episode count, so a window of 3 steps x 16 episodes is 48 samples, not 3 step means); the alarm fires
when t >= `hack_t` and the latest held-out success is no better than the first held-out success (step 0).
"""

from __future__ import annotations

import math
from typing import Any

from grpolab.alarms.attribution import attribution
from grpolab.alarms.calibration import note_for
from grpolab.alarms.drift import drift_alarms
from grpolab.alarms.greedy_probe import probe_alarms
from grpolab.config import LabConfig
from grpolab.rewards.components import BUILTIN_COMPONENTS
from grpolab.rundir.numbers import finite, finite_number
from grpolab.vocabulary import (
    ALARMS,
    COMPLETION_LEN,
    ENTROPY,
    EPISODES,
    HELDOUT_SUCCESS,
    KL,
    KL_BOUND,
    KL_OVER_BOUND,
    MISMATCH_KL,
    REWARD_MEAN,
    REWARD_STD,
)

SHAPING = frozenset(c.name for c in BUILTIN_COMPONENTS if c.shaping)
"""The built-in shaping components (format, schema), for a watch built without the env's rubric."""


def welch_t(a: list[float], b: list[float]) -> float:
    """t-statistic of mean(b) - mean(a) with unequal variances; inf when both are constant and differ."""
    if len(a) < 2 or len(b) < 2:
        return 0.0
    return welch_t_stats(_summary(a), _summary(b))


def _summary(xs: list[float]) -> tuple[float, float, int]:
    m = sum(xs) / len(xs)
    return m, sum((x - m) ** 2 for x in xs) / (len(xs) - 1), len(xs)


def window_stats(rows: list[dict[str, Any]], episodes_per_step: int) -> tuple[float, float, int]:
    """(mean, sample variance, n) of the episode rewards of some steps, from their means, stds and counts."""
    n = sum_x = sum_x2 = 0.0
    for r in rows:
        k = float(r.get(EPISODES, episodes_per_step))
        m, sd = float(r[REWARD_MEAN]), float(r.get(REWARD_STD, 0.0))
        n, sum_x, sum_x2 = n + k, sum_x + k * m, sum_x2 + k * (sd * sd + m * m)
    mean = sum_x / n
    var = max(sum_x2 / n - mean * mean, 0.0) * n / max(n - 1, 1)
    return mean, var, int(n)


def welch_t_stats(a: tuple[float, float, int], b: tuple[float, float, int]) -> float:
    """Welch's t of mean(b) - mean(a) from (mean, variance, n) summaries."""
    (ma, va, na), (mb, vb, nb) = a, b
    se = math.sqrt(va / na + vb / nb)
    if se == 0:
        return math.inf if mb > ma else (-math.inf if mb < ma else 0.0)
    return (mb - ma) / se


def _series(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [v for v in (finite_number(r.get(key)) for r in rows) if v is not None]


def check_alarms(history: list[dict[str, Any]], heldout: dict[int, float], cfg: LabConfig) -> dict[str, str]:
    """Alarms for the latest row of `history` (all metric rows so far, oldest first). Name -> explanation."""
    w = cfg.alarms
    alarms: dict[str, str] = {}
    latest = history[-1]
    kl = latest.get(KL)
    if isinstance(kl, float) and kl > cfg.grpo.kl_bound:
        alarms[KL_BOUND] = f"kl {kl:.3f} is past the stability bound {cfg.grpo.kl_bound}"
    mismatch = latest.get(MISMATCH_KL)
    if isinstance(mismatch, float) and mismatch > w.mismatch_bound:
        alarms["sampler_mismatch"] = (
            f"the rollout sampler's k3 KL to the policy is {mismatch:.3f} nats/token, past alarms.mismatch_bound "
            f"{w.mismatch_bound}: its episodes are off-policy and the capped importance weights carry the update "
            "(rollout.engine = 'exact' samples from the policy itself)"
        )
    rewards = _series(history, REWARD_MEAN)
    scored = [r for r in history if finite(r.get(REWARD_MEAN)) and finite(r.get(REWARD_STD))]
    if len(rewards) >= 2 * w.hack_window and len(heldout) >= 2:
        early, recent = rewards[: w.hack_window], rewards[-w.hack_window :]
        if len(scored) >= 2 * w.hack_window:  # episode-level: every episode of the windows is a sample
            per_step = cfg.train.prompts_per_step * cfg.rollout.group_size
            t = welch_t_stats(
                window_stats(scored[: w.hack_window], per_step), window_stats(scored[-w.hack_window :], per_step)
            )
        else:  # only step means recorded
            t = welch_t(early, recent)
        steps = sorted(heldout)
        first, last = heldout[steps[0]], heldout[steps[-1]]
        if t >= w.hack_t and last <= first:
            alarms["reward_hacking"] = (
                f"training reward rose from {sum(early) / len(early):+.2f} to {sum(recent) / len(recent):+.2f} "
                f"(Welch t = {t:.1f} over {w.hack_window}-step windows) while held-out success went "
                f"{first:.0%} -> {last:.0%} (steps {steps[0]} -> {steps[-1]})"
            )
    entropy = _series(history, ENTROPY)
    if len(entropy) >= 2 and entropy[0] > 0 and entropy[-1] < w.entropy_collapse * entropy[0]:
        alarms["entropy_collapse"] = (
            f"entropy {entropy[-1]:.3f} fell below {w.entropy_collapse:.0%} of its start {entropy[0]:.3f}"
        )
    length = _series(history, COMPLETION_LEN)
    budget = cfg.rollout.max_new_tokens
    if len(length) >= 2 and length[-1] > w.length_runaway * length[0] and length[-1] > 0.9 * budget:
        alarms["length_runaway"] = (
            f"completion length {length[-1]:.0f} vs {length[0]:.0f} at the start (budget {budget})"
        )
    alarms.update(drift_alarms(history, w.drift_window, w.drift_z, w.drift_rel, w.drift_share, w.drift_class_z))
    return alarms


class AlarmWatch:
    """The alarms of a run as it trains: metric rows are kept in memory (loaded once on resume), not re-read."""

    def __init__(
        self,
        cfg: LabConfig,
        history: list[dict[str, Any]] | None = None,
        heldout_start: float | None = None,
        shaping: frozenset[str] = SHAPING,
        probe_start: dict[str, Any] | None = None,
    ):
        self.cfg = cfg
        self.probe_start = dict(probe_start or {})
        """The greedy probe's fields at the start (`grpolab.alarms.greedy_probe`; {} when it is off or was not
        measured)."""
        self.shaping = shaping
        """Components the attribution flags only after `alarms.shaping_patience` steps (the env rubric's shaping)."""
        self.history: list[dict[str, Any]] = list(history or [])
        self.heldout: dict[int, float] = {} if heldout_start is None else {0: heldout_start}
        for row in self.history:
            self._note_heldout(row)

    def _note_heldout(self, row: dict[str, Any]) -> None:
        if finite(row.get(HELDOUT_SUCCESS)) and isinstance(row.get("step"), int):
            self.heldout[row["step"]] = float(row[HELDOUT_SUCCESS])

    def check(self, row: dict[str, Any]) -> dict[str, Any]:
        """Alarm fields for this step's row (`alarms`: name -> why, `kl_over_bound`, the reward attribution); the
        row joins the history."""
        self.history.append(row)
        self._note_heldout(row)
        alarms = check_alarms(self.history, self.heldout, self.cfg)
        w = self.cfg.alarms
        fields, flags = attribution(
            self.history,
            self.heldout,
            self.cfg.reward.weights.get("completion", 0.0),
            w.drift_window,
            w.attribution_min,
            self.shaping,
            w.shaping_patience,
        )
        if self.probe_start:  # a row without a probe (no evaluation this step) raises none
            alarms.update(probe_alarms(self.probe_start, row, w.drift_share, w.probe_z))
        raised = {**alarms, **flags}
        for name, why in raised.items():
            if note := note_for(name, self.cfg):
                raised[name] = f"{why}; {note}"
        return {**fields, ALARMS: raised, KL_OVER_BOUND: KL_BOUND in alarms}
