"""Where a run's wall time went (`grpolab.run.timing`), read back from what the run recorded."""

from grpolab.config import load_config
from grpolab.run.timing import phase_seconds, time_lines
from grpolab.rundir import RunDir


def test_the_demo_splits_its_wall_time_into_steps_evaluations_probes_sft_and_the_rest(tmp_path):
    run = RunDir.create(tmp_path / "run", load_config(None, {"model": "tiny"}))
    for step in (1, 2):
        run.append_metrics(
            {"step": step, "perf/step_s": 60.0, "perf/decode_s": 20.0, "perf/prefill_s": 2.0,
             "perf/forward_backward_s": 30.0, "perf/reference_s": 5.0}
        )  # fmt: skip
    run.record_eval("base", [], {"heldout/n": 4.0, "heldout/seconds": 30.0})
    run.record_eval("0", [], {"heldout/n": 4.0, "heldout/seconds": 40.0, "probe/seconds": 9.0})
    run.record_eval("2", [], {"heldout/n": 4.0, "heldout/seconds": 50.0, "probe/seconds": 11.0})
    run.write_sft({"loss": [1.0], "seconds": 25.0})
    t = phase_seconds(run, 300.0)
    assert (t["steps"], t["generation"], t["update"], t["reference"]) == (120.0, 44.0, 60.0, 10.0)
    assert t["rest"] == 15.0  # 300 - 120 - 120 - 20 - 25
    assert (t["evaluations"], t["evaluation_count"], t["probes"], t["probe_count"], t["sft"]) == (120, 3, 20, 2, 25)
    lines = time_lines(run, 300.0)
    assert lines[0] == "where the 5.0 min went:"
    assert "2 GRPO steps" in lines[1] and "60.0 s a step: generation 22.0 s, reference 5.0 s, update 30.0 s" in lines[1]
    assert "other 3.0 s" in lines[1] and "3 held-out evaluations" in lines[2] and "2 greedy probes" in lines[3]
    assert lines[-1].split()[:4] == ["the", "rest", "0.2", "min"]  # 300 - 120 - 120 - 20 - 25 = 15 s


def test_a_run_that_recorded_no_times_still_says_its_wall_time(tmp_path):
    run = RunDir.create(tmp_path / "run", load_config(None, {"model": "tiny"}))
    assert time_lines(run, 90.0) == [
        "where the 1.5 min went:",
        "  the rest                  1.5 min  (model loads, preflight probes, checkpoints)",
    ]
