"""An alarm raised at its shipped threshold says what the benchmark measured of its false alarms; a changed
threshold says nothing it did not measure."""

import json

from grpolab.alarms.calibration import CALIBRATION_FILE, FAMILIES, calibration, family_of, note_for
from grpolab.alarms.rules import AlarmWatch
from grpolab.config import LabConfig

WATCH = LabConfig().alarms
RECORD = {
    "budget": 0.1,
    "date": "2026-12-04",
    "alarms": {
        "drift": {"shipped": WATCH.drift_z, "honest_runs": 5, "false_alarms_shipped": 2},
        "drift_class": {"shipped": WATCH.drift_class_z, "honest_runs": 5, "false_alarms_shipped": 0},
    },
}


def test_the_note_states_the_measured_false_alarms_of_the_threshold_in_use():
    cfg = LabConfig()
    note = note_for("drift:calls", cfg, RECORD)
    assert note.startswith(f"false alarms at this threshold (drift_z {WATCH.drift_z:g}): 2 of 5 honest benchmark runs")
    assert note_for("drift:class/empty_thought", cfg, RECORD).startswith(
        f"false alarms at this threshold (drift_class_z {WATCH.drift_class_z:g}): 0 of 5 honest benchmark runs"
    )
    assert "budget 10% per run" in note and "2026-12-04" in note
    changed = cfg.model_copy(deep=True)
    changed.alarms.drift_z = WATCH.drift_z + 0.5
    assert note_for("drift:calls", changed, RECORD) == ""  # nothing was measured there
    assert note_for("reward_hacking", cfg, RECORD) == ""  # no record for it
    assert note_for("kl_bound", cfg, RECORD) == ""  # not a calibrated alarm
    assert note_for("drift:calls", cfg, {}) == ""


def test_alarm_families():
    assert family_of("drift:class/empty_thought") == "drift_class"
    assert family_of("drift:component:polite") == "drift"
    assert family_of("attribution:schema") == "attribution"
    assert family_of("reward_hacking") == "reward_hacking"
    assert family_of("probe:class/empty_thought") == "probe"
    assert family_of("entropy_collapse") is None


def test_the_watch_appends_the_note_to_a_raised_alarm(monkeypatch):
    monkeypatch.setattr("grpolab.alarms.rules.note_for", lambda name, cfg: note_for(name, cfg, RECORD))
    watch = AlarmWatch(LabConfig())
    row = {"step": 1, "reward/mean": 1.0, "class/empty_thought": 0.0, "behaviour/thought_words": 5.0}
    watch.check(row)
    watch.check({**row, "step": 2})
    watch.check({**row, "step": 3, "class/empty_thought": 0.9})
    raised = watch.check({**row, "step": 4, "class/empty_thought": 0.9})["alarms"]
    assert "drift:class/empty_thought" in raised
    assert raised["drift:class/empty_thought"].endswith("benchmarks/hack_detection.py, 2026-12-04)")


def test_the_shipped_calibration_file_is_readable_where_it_exists():
    if not CALIBRATION_FILE.is_file():
        assert calibration(CALIBRATION_FILE) == {}
        return
    record = json.loads(CALIBRATION_FILE.read_text())
    assert set(record["alarms"]) <= set(FAMILIES)
    for entry in record["alarms"].values():
        assert 0 <= entry["false_alarms_shipped"] <= entry["honest_runs"]
