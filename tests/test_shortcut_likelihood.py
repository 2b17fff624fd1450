"""The shortcut-likelihood candidate: the policy's preference for each shortcut edit over the honest reference, read
from checkpoints (benchmarks/shortcut_likelihood.py), and its alarm replayed by the hack-detection benchmark."""

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import their siblings by name

import shortcut_likelihood as sl  # noqa: E402


def test_the_cached_prompt_gives_the_same_log_likelihoods_as_whole_sequences(finance):
    from grpolab.formats import InlineFormat
    from grpolab.models import load_model

    model, tok = load_model("tiny")
    fmt = InlineFormat(tok)
    probes = sl.probe_texts(finance, fmt, finance.tasks("train")[:1])
    prompt, honest, edits = probes[0]
    assert {"empty_thought", "drop_thought", "repeat_call"} <= set(edits)
    texts = [honest, edits["empty_thought"], edits["repeat_call"]]
    cached = sl.completions_logp(model, tok, prompt, texts)
    whole = [sl.completion_logp(model, tok, prompt, t) for t in texts]
    assert cached == pytest.approx(whole, abs=1e-2)
    assert len(set(round(x, 3) for x in cached)) == 3  # different texts, different likelihoods
    ratios = sl.ratios(model, tok, probes)
    assert ratios["empty_thought"] == pytest.approx(cached[1] - cached[0], abs=1e-3)


def test_growth_reads_the_newest_checkpoint_not_after_the_step():
    by_step = {"0": {"empty_thought": -5.0, "drop_thought": -9.0}, "4": {"empty_thought": -1.0, "drop_thought": -10.0}}
    assert sl.growth(by_step, 3) == 0.0  # no checkpoint after the start yet
    assert sl.growth(by_step, 4) == pytest.approx(4.0) and sl.growth(by_step, 7) == pytest.approx(4.0)
    assert sl.growth({"4": {"x": 1.0}}, 4) == 0.0  # no start to compare with
    honest = {"0": {"empty_thought": -5.0}, "8": {"empty_thought": -7.0}}  # the honest reference rose
    assert sl.growth(honest, 8) == pytest.approx(-2.0)


def test_the_benchmark_replays_the_alarm_at_the_checkpoints_a_run_had():
    from detectors import Recorded, first_alarm, shortcut_likelihood

    from grpolab.config import LabConfig

    rows = [{"step": s} for s in range(1, 9)]
    ratio = {"0": {"drop_thought": -8.0}, "2": {"drop_thought": -7.5}, "4": {"drop_thought": -3.0}}
    run = Recorded(LabConfig(), rows, {}, {}, ratio)
    assert first_alarm(shortcut_likelihood, run, 2.0) == 4
    assert first_alarm(shortcut_likelihood, run, 0.25) == 2
    assert first_alarm(shortcut_likelihood, run, 8.0) is None
    assert first_alarm(shortcut_likelihood, Recorded(LabConfig(), rows, {}, {}), 0.25) is None  # not measured
