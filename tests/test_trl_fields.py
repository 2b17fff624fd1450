"""Every config field is honoured by the trl backend, declared not applicable to it, or refused / noted."""

import re

import pytest
from pydantic import BaseModel

from grpolab.cli import main
from grpolab.config import LabConfig, load_config
from grpolab.errors import UserError
from grpolab.run.sources import backend_notes
from grpolab.trl.settings import (
    MAPPED,
    NOT_APPLICABLE,
    UNSUPPORTED,
    grpo_settings,
    lora_settings,
    trl_section_notes,
    unsupported,
)


def config_fields(model: type[BaseModel] = LabConfig, prefix: str = "") -> list[str]:
    """Dotted names of every leaf field of the config, walking its sections."""
    names = []
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            names += config_fields(kind, f"{prefix}{name}.")
        else:
            names.append(prefix + name)
    return names


def test_every_config_field_is_classified_for_trl_exactly_once():
    fields = config_fields()
    assert "grpo.dynamic_filter" in fields and "alarms.stop_on_alarm" in fields and "seed" in fields
    tables = {"MAPPED": MAPPED, "NOT_APPLICABLE": NOT_APPLICABLE, "UNSUPPORTED": UNSUPPORTED}
    for name in fields:
        homes = [t for t, table in tables.items() if name in table]
        assert len(homes) == 1, f"{name} is in {homes or 'none'} of {list(tables)} (trl/settings.py)"
    stale = {n for table in tables.values() for n in table} - set(fields)
    assert not stale, f"classified but not config fields: {stale}"
    assert all(why.strip() for why in [*MAPPED.values(), *NOT_APPLICABLE.values()])


def test_fields_that_trl_settings_cite_are_mapped():
    cfg = LabConfig()
    sources = " ".join(s.source for s in [*grpo_settings(cfg, "o"), *(lora_settings(cfg) or [])])
    cited = set(re.findall(r"\b[a-z]+\.[a-z_]+\b", sources)) & set(config_fields())
    assert cited and cited <= set(MAPPED), cited - set(MAPPED)


@pytest.mark.parametrize(("field", "value"), [("grpo.dynamic_filter", "skip"), ("rollout.engine", "int8")])
def test_trl_refuses_a_setting_that_changes_the_result(field, value, tmp_path, capsys):
    cfg = load_config(None, {"model": "tiny", "train.backend": "trl", field: value})
    with pytest.raises(UserError, match=re.escape(field)) as info:
        backend_notes(cfg)
    assert "--backend native" in info.value.fix
    section, leaf = field.split(".")
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text(f'model = "tiny"\n[{section}]\n{leaf} = "{value}"\n')
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--config", str(cfg_file), "--backend", "trl", "--out", str(out)])
    assert exit_.value.code == 2
    assert field in capsys.readouterr().err and not out.exists()  # refused before the run directory is made


def test_trl_notes_a_setting_that_does_not_change_the_result():
    cfg = load_config(None, {"model": "tiny", "train.backend": "trl", "grpo.is_cap": 3.0, "grpo.beta": 0.0})
    notes = backend_notes(cfg)
    assert any(n.startswith("trl backend: grpo.is_cap = 3.0") for n in notes)
    assert any("grpo.kl_metric = True" in n for n in notes)
    assert not any("is_cap" in n for n in backend_notes(load_config(None, {"model": "tiny", "grpo.is_cap": 3.0})))
    assert not any("is_cap" in n or "kl_metric" in n for n in unsupported(LabConfig()))
    assert any("rollout.engine = 'int8'" in n for n in unsupported(load_config(None, {"rollout.engine": "int8"})))


def _settings(cfg: LabConfig) -> dict:
    return {s.name: s.value for s in grpo_settings(cfg, "o")}


def test_objective_options_reach_their_grpo_config_fields():
    assert _settings(LabConfig())["scale_rewards"] == "group"
    cfg = load_config(
        None,
        {
            "grpo.loss_type": "cispo",
            "grpo.epsilon_high": 5.0,
            "grpo.scale_rewards": "batch",
            "grpo.importance_sampling_level": "sequence",
            "grpo.mask_truncated_completions": True,
            "grpo.multi_objective_aggregation": "normalize_then_sum",
            "grpo.top_entropy_quantile": 0.2,
        },
    )
    s = _settings(cfg)
    assert (s["loss_type"], s["epsilon_high"], s["scale_rewards"]) == ("cispo", 5.0, "batch")
    assert s["importance_sampling_level"] == "sequence" and s["mask_truncated_completions"] is True
    assert s["multi_objective_aggregation"] == "normalize_then_sum" and s["top_entropy_quantile"] == 0.2
    assert load_config(None, {"grpo.scale_rewards": False}).grpo.scale_rewards == "none"  # the old bools still read


def test_cispo_needs_a_ratio_cap_above_one():
    with pytest.raises(UserError, match="epsilon_high"):
        load_config(None, {"grpo.loss_type": "cispo"})


def test_report_to_and_the_trackio_project_reach_trl():
    assert _settings(LabConfig())["report_to"] == "none" and _settings(LabConfig())["project"] == "grpolab"
    assert _settings(load_config(None, {"train.trackio": True}))["report_to"] == ["trackio"]
    cfg = load_config(None, {"train.report_to": ["wandb", "tensorboard"], "train.trackio_project": "mine"})
    assert _settings(cfg)["report_to"] == ["wandb", "tensorboard"] and _settings(cfg)["project"] == "mine"
    assert any("report_to" in n for n in backend_notes(cfg))  # natively, only trackio is reported to


def test_trl_section_is_passed_as_written_over_the_mapped_settings():
    pytest.importorskip("trl")
    cfg = load_config(None, {"trl": {"loss_type": "sapo", "sapo_temperature_neg": 1.1}})
    settings = {s.name: s for s in grpo_settings(cfg, "o")}
    assert settings["loss_type"].value == "sapo" and settings["loss_type"].from_section
    assert "grpo.loss_type" in settings["loss_type"].source  # the mapped value it replaces is said
    assert settings["sapo_temperature_neg"].value == 1.1
    notes = trl_section_notes(cfg)
    assert any(n.startswith("[trl] loss_type = 'sapo' overrides 'grpo' from grpo.loss_type") for n in notes)
    assert any("sapo_temperature_neg = 1.1 (not set by the lab config)" in n for n in notes)
    assert any("[trl] section is not used" in n for n in backend_notes(cfg))  # the native backend says so


def test_trl_section_with_an_unknown_key_exits_2_naming_it(tmp_path, capsys):
    pytest.importorskip("trl")
    cfg = load_config(None, {"trl": {"lose_type": "sapo", "use_vllm": False}})
    with pytest.raises(UserError, match="lose_type") as info:
        grpo_settings(cfg, "o")
    assert "loss_type" in info.value.fix and "use_vllm" not in str(info.value)  # near matches listed
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('model = "tiny"\n[trl]\nlose_type = "sapo"\n')
    with pytest.raises(SystemExit) as exit_:
        main(["export-trl", "--config", str(cfg_file), "-o", str(tmp_path / "s.py")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "lose_type" in err and "loss_type" in err and not (tmp_path / "s.py").exists()


def test_use_vllm_is_said_to_generate_nothing_and_the_script_says_why():
    pytest.importorskip("trl")
    assert not any("vLLM" in n for n in trl_section_notes(load_config(None, {"trl": {"use_vllm": False}})))
    notes = trl_section_notes(load_config(None, {"trl": {"use_vllm": True}}))
    assert any("nothing is generated in vLLM" in n for n in notes)
    from grpolab.trl.export import render_script

    text = render_script(load_config(None, {"model": "tiny"}))
    assert "vLLM is not used, on purpose" in text and "splices its output" in text
