"""The config's renamed section: `[alarms]` was `[watch]`, and configs, overrides and run directories that say `watch`
still load, into `cfg.alarms`; a config that gives both is refused, naming both."""

import json

import pytest
from pydantic import ValidationError

from grpolab.config import LabConfig, as_recorded, config_to_dict, load_config
from grpolab.errors import UserError


def test_an_old_watch_section_loads_into_alarms(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text("[watch]\nhack_t = 4.5\nstop_on_alarm = true\n")
    cfg = load_config(path)
    assert cfg.alarms.hack_t == 4.5 and cfg.alarms.stop_on_alarm
    assert "alarms" in config_to_dict(cfg) and "watch" not in config_to_dict(cfg)  # written under its name now


def test_watch_and_alarms_together_are_an_error_naming_both(tmp_path):
    path = tmp_path / "both.toml"
    path.write_text("[alarms]\nhack_t = 4.0\n\n[watch]\nhack_t = 5.0\n")
    with pytest.raises(UserError, match=r"both \[alarms\] and \[watch\]") as info:
        load_config(path)
    assert str(path) in str(info.value)
    with pytest.raises(ValidationError, match=r"both \[alarms\] and \[watch\]"):
        LabConfig.model_validate({"alarms": {}, "watch": {}})


@pytest.mark.parametrize("section", ["alarms", "watch"])
def test_an_override_by_either_name_sets_alarms(tmp_path, section):
    path = tmp_path / "c.toml"
    path.write_text(f"[{section}]\ndrift_z = 2.0\n")
    for dotted in ("watch.hack_t", "alarms.hack_t"):
        cfg = load_config(path, {dotted: 7.0})
        assert cfg.alarms.hack_t == 7.0 and cfg.alarms.drift_z == 2.0
    assert load_config(None, {"watch.probe_tasks": 0}).alarms.probe_tasks == 0
    assert load_config(None, {"alarms.probe_tasks": 3}, base=LabConfig()).alarms.probe_tasks == 3


def test_a_run_recorded_with_watch_reads_back():
    recorded = json.loads(json.dumps(config_to_dict(LabConfig())))
    recorded["watch"] = {**recorded.pop("alarms"), "drift_z": 1.25}  # a config.json written before the rename
    cfg = LabConfig.model_validate(as_recorded(recorded))
    assert cfg.alarms.drift_z == 1.25
