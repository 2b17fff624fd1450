"""The files of a run directory other than weights: the config, JSON artifacts, step rows, evaluations, STOP.

Whole-file writes are atomic (`grpolab.files.atomic`); metric and episode rows are appended. Resume rewinds both to the
last intact checkpoint's step, so no step is recorded twice or lost; the rows it cuts are kept beside the
checkpoints (`rewind`), never deleted. Callers name files through the accessors
here (`write_preflight`, `eval_rows`, ...), never by a file name.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpolab.errors import UserError
from grpolab.files.atomic import atomic_write, atomic_write_dir, atomic_write_text, unused_name
from grpolab.files.json_files import append_jsonl, read_json, read_jsonl, write_jsonl
from grpolab.plugins import is_imported
from grpolab.rewards.functions import import_config_code
from grpolab.rundir.base import RunPath
from grpolab.rundir.layout import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    CUT_ROWS_PREFIX,
    ENV_FILE,
    EPISODES_FILE,
    EVAL_DIR,
    METRICS_FILE,
    PREFLIGHT_FILE,
    REPORT_FILE,
    SFT_FILE,
    STOP_FILE,
    SUMMARY_FILE,
    TRL_DIR,
    eval_file,
    probe_file,
)
from grpolab.rundir.numbers import finite_number
from grpolab.vocabulary import HELDOUT_SUCCESS, PROBE_PREFIX

if TYPE_CHECKING:
    from grpolab.config import LabConfig


class Artifacts(RunPath):
    # ---- paths ----

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def episodes_path(self) -> Path:
        return self.path / EPISODES_FILE

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY_FILE

    @property
    def report_path(self) -> Path:
        return self.path / REPORT_FILE

    @property
    def trl_dir(self) -> Path:
        """TRL's own output folder (the trl backend)."""
        return self.path / TRL_DIR

    @property
    def stop_path(self) -> Path:
        """A file whose presence asks a running training to checkpoint and stop after its current step."""
        return self.path / STOP_FILE

    def eval_path(self, label: str) -> Path:
        return self.path / eval_file(label)

    # ---- config and JSON artifacts ----

    def write_config(self, cfg: LabConfig) -> None:
        self.write_json(CONFIG_FILE, cfg.model_dump(mode="json"))

    def read_config(self) -> LabConfig:
        """config.json, validated, as data: nothing it names is imported (a run folder someone shares is data; its
        recorded plugins are code, imported only by `config_to_run`)."""
        # the config brings in the env registry and transformers: reading a run's other files needs neither
        from grpolab.config import LabConfig, as_recorded

        data = self.config_data()
        try:
            return LabConfig.model_validate(as_recorded(data))
        except Exception as exc:
            first = str(exc).splitlines()[0]
            raise UserError(f"{self.config_path} is not a valid config ({first})", "fix or remove it")

    def config_to_run(self, notes: list[str] | None = None) -> LabConfig:
        """config.json, validated, with the plugins it records imported: for the commands that run the run (resume,
        eval, compare, chat, export-model, simulate --real), which the user asked to run. Each plugin it imports is
        named in `notes`, as code of the run's that now runs here; one that no longer imports is a UserError."""
        cfg = self.read_config()
        modules = dict.fromkeys([*cfg.plugins, *(r.rpartition(":")[0] for r in cfg.rewards)])
        new = [p for p in modules if not is_imported(p)]
        if new and notes is not None:
            shown = ", ".join(new)
            notes.append(f"running {self.path} imports the plugins it records (their code runs here): {shown}")
        import_config_code(cfg)  # its plugins and TRL reward functions, from the files it records
        return cfg

    def write_env_facts(self, thought_required: bool, letters: dict[str, str]) -> None:
        """What the run's views need of its environment, recorded so that they never build it: building an
        environment named `module:Class`, or env data's tools and verifier, imports code (a run is data)."""
        self.write_json(ENV_FILE, {"thought_required": thought_required, "letters": letters})

    def env_facts(self) -> dict[str, Any]:
        """env.json read defensively ({} when missing or unreadable: runs made before it existed)."""
        facts = self.artifact(ENV_FILE)
        return facts if isinstance(facts, dict) else {}

    def config_data(self) -> Any:
        """config.json as JSON, which must be there and readable (UserError otherwise); not validated."""
        return self.read_json(CONFIG_FILE)

    def is_run(self) -> bool:
        return self.config_path.is_file()

    def has_steps(self) -> bool:
        """Whether a training has recorded steps here (metrics.jsonl exists)."""
        return self.metrics_path.exists()

    def write_json(self, name: str, data: Any) -> None:
        atomic_write_text(self.path / name, json.dumps(data, indent=2, default=str) + "\n")

    def read_json(self, name: str) -> Any:
        """A JSON artifact that must be there and valid (UserError otherwise)."""
        path = self.path / name
        if not path.is_file():
            raise UserError(f"{path} not found", "is this a grpolab run directory? (it needs config.json)")
        problems: list[str] = []
        data = read_json(path, problems)
        if problems:
            raise UserError(f"{path}: {problems[0]}", "restore it or start a new run")
        return data

    def artifact(self, name: str, problems: list[str] | None = None) -> Any:
        """A JSON artifact read defensively: None when missing or unreadable (the reason goes to `problems`)."""
        return read_json(self.path / name, problems)

    def write_preflight(self, report: dict[str, Any]) -> None:
        """The probes (and learnability) of the run's preflight check."""
        self.write_json(PREFLIGHT_FILE, report)

    def preflight(self, problems: list[str] | None = None) -> Any:
        """preflight.json read defensively (None when missing or unreadable)."""
        return self.artifact(PREFLIGHT_FILE, problems)

    def write_sft(self, record: dict[str, Any]) -> None:
        """The SFT warm start's losses and time."""
        self.write_json(SFT_FILE, record)

    def sft(self, problems: list[str] | None = None) -> Any:
        """sft.json read defensively (None when the run had no SFT or it is unreadable)."""
        return self.artifact(SFT_FILE, problems)

    # ---- step rows ----

    def append_metrics(self, row: dict[str, Any]) -> None:
        append_jsonl(self.metrics_path, [row])

    def append_episodes(self, rows: list[dict[str, Any]]) -> None:
        append_jsonl(self.episodes_path, rows)

    def metrics(self) -> list[dict[str, Any]]:
        """Metric rows with an integer step (unreadable lines skipped)."""
        return [r for r in read_jsonl(self.metrics_path) if isinstance(r.get("step"), int)]

    def episodes(self) -> list[dict[str, Any]]:
        return read_jsonl(self.episodes_path)

    def rewind(self, step: int) -> list[str]:
        """Cut the metric and episode rows after `step` (they are redone after a resume), keeping them: every line
        cut (rows of later steps, and lines a kill cut short) goes verbatim to checkpoints/rows-after-step-N-T/
        first. Returns a note naming that folder (none when nothing was cut)."""
        kept: dict[Path, str] = {}
        cut: dict[str, str] = {}
        steps: set[int] = set()
        broken = 0
        for path in (self.metrics_path, self.episodes_path):
            if not path.is_file():
                continue
            keep, drop = [], []
            for line in _lines(path.read_text(errors="surrogateescape")):
                row_step = 0 if not line.strip() else _row_step(line)
                (keep if row_step is not None and row_step <= step else drop).append(line)
                if row_step is None:
                    broken += 1
                elif row_step > step:
                    steps.add(row_step)
            if drop:
                kept[path], cut[path.name] = "".join(keep), "".join(drop)
        if not cut:
            return []
        folder = unused_name(self.path / CHECKPOINTS_DIR / f"{CUT_ROWS_PREFIX}{step}-{int(time.time())}")
        atomic_write_dir(folder, lambda tmp: _write_files(tmp, cut))  # kept first: a kill between keeps both
        for path, text in kept.items():
            atomic_write(path, lambda tmp, text=text: tmp.write_bytes(text.encode(errors="surrogateescape")))
        what = [f"rows of steps {min(steps)}-{max(steps)}"] if steps else []
        what += [f"{broken} unreadable line(s)"] if broken else []
        return [
            f"{', '.join(cut)}: {' and '.join(what)} past step {step}, where the run goes on, cut and kept in {folder}"
        ]

    # ---- evaluations ----

    def record_eval(self, label: str, rows: list[dict[str, Any]], summary: dict[str, float]) -> None:
        """The episodes of one held-out evaluation and its summary (under `label`: base, 0, or a step)."""
        write_jsonl(self.eval_path(label), rows)
        data = self.eval_summary()
        data[str(label)] = summary
        self.write_json(SUMMARY_FILE, data)

    def eval_summary(self, problems: list[str] | None = None) -> dict[str, Any]:
        """Held-out metrics by evaluation label ({} when none was recorded)."""
        data = read_json(self.summary_path, problems)
        return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}

    def eval_rows(self, label: str) -> list[dict[str, Any]]:
        return read_jsonl(self.eval_path(label))

    def eval_labels(self) -> list[str]:
        """Evaluation labels in order: base, then steps."""
        folder = self.path / EVAL_DIR
        stems = {p.stem for p in folder.glob("*.jsonl")} if folder.is_dir() else set()
        steps = sorted((s for s in stems if s.isdigit()), key=int)
        return (["base"] if "base" in stems else []) + steps

    def heldout_at_start(self) -> float | None:
        """Held-out success before GRPO (eval label "0"), if it was measured."""
        return finite_number(self.eval_summary().get("0", {}).get(HELDOUT_SUCCESS))

    def record_probe(self, label: str, rows: list[dict[str, Any]]) -> None:
        """The greedy probe's episodes at one evaluation (its fields go in that evaluation's summary)."""
        write_jsonl(self.path / probe_file(label), rows)

    def probe_at_start(self) -> dict[str, float]:
        """The greedy probe's fields before GRPO (eval label "0"; {} when it was not measured)."""
        start = self.eval_summary().get("0", {})
        return {k: v for k, v in start.items() if k.startswith(PROBE_PREFIX) and finite_number(v) is not None}

    # ---- stop requests ----

    def request_stop(self) -> None:
        atomic_write_text(self.stop_path, "stop requested\n")

    def stop_requested(self) -> bool:
        return self.stop_path.is_file()

    def clear_stop(self) -> None:
        self.stop_path.unlink(missing_ok=True)


def _row_step(line: str) -> int | None:
    """The step of a JSON Lines row (0 for a row without one, as episodes before GRPO), None for a broken line."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(row, dict):
        return None
    value = row.get("step", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _lines(text: str) -> list[str]:
    """The lines of a JSON Lines file, each with its newline (the last may have none); only "\\n" ends a line."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _write_files(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).write_bytes(text.encode(errors="surrogateescape"))
