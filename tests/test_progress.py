"""What a person watching a run sees: a bar on a terminal, one plain line per step anywhere else."""

from __future__ import annotations

from grpolab.config import LabConfig
from grpolab.run.progress import Progress
from grpolab.vocabulary import ALARMS, HELDOUT_SUCCESS, KL, PERF_STEP_S, REWARD_MEAN, TOOL_CALL_PROB


def _row(step: int) -> dict:
    return {"step": step, PERF_STEP_S: 48.25, REWARD_MEAN: 2.41, KL: 0.0123, TOOL_CALL_PROB: 0.94}


def test_piped_output_gets_one_plain_line_per_step(capsys):
    progress = Progress(LabConfig())  # pytest captures stdout: not a terminal
    assert progress.plain
    progress.start(total=3, done=0)
    progress.update(_row(1))
    progress.update({**_row(2), HELDOUT_SUCCESS: 0.6, ALARMS: {"kl": "KL 0.9 above its bound"}})
    progress.stop()
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert lines == [
        "step 1/3  48.2 s  reward +2.41  kl 0.012  P(tool) 94%",
        "step 2/3  48.2 s  reward +2.41  kl 0.012  P(tool) 94%  held-out 60%",
    ]
    assert "\x1b" not in out.out + out.err  # no control codes in a log
    assert "ALARM kl at step 2" in out.err


def test_quiet_prints_nothing(capsys):
    progress = Progress(LabConfig(), quiet=True)
    progress.start(total=2, done=0)
    progress.update(_row(1))
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_terminal_keeps_the_bar(capsys):
    progress = Progress(LabConfig(), plain=False)
    progress.start(total=2, done=0)
    progress.update(_row(1))
    progress.stop()
    assert "step 1/2" not in capsys.readouterr().out
