"""Every config field is honoured by the trl backend, declared not applicable to it, or refused / noted."""

import re

import pytest
from pydantic import BaseModel

from grpolab.cli import main
from grpolab.config import LabConfig, load_config
from grpolab.errors import UserError
from grpolab.run.sources import backend_notes
from grpolab.trl.settings import MAPPED, NOT_APPLICABLE, UNSUPPORTED, grpo_settings, lora_settings, unsupported


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
    assert "grpo.dynamic_filter" in fields and "watch.stop_on_alarm" in fields and "seed" in fields
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
