"""The rows of env `data`: their format (a pydantic model) and where they are read from.

A source is a JSON Lines file (`.jsonl`, `.json`: one object per line), a directory written by `datasets`'
`save_to_disk`, or a `.parquet`, `.csv` or `.arrow` file read by `datasets`' own local builders; nothing is
fetched from the Hub. Every row keeps where it came from ("tasks.jsonl line 3"), so that an error names it.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator

from grpolab.errors import UserError
from grpolab.files.limits import MAX_DATA_BYTES, size_text
from grpolab.files.user_input import read_user_file, read_user_jsonl_lines

JSONL_SUFFIXES = (".jsonl", ".json")
DATASETS_SUFFIXES = (".parquet", ".csv", ".arrow")
HELDOUT_SPLITS = ("heldout", "test", "validation", "valid", "eval")
"""Split names of a saved DatasetDict whose rows are held out (its "train" split is trained on)."""
ROW_FIX = "fix that row (the row format is in docs/data-env.md)"


class ReferenceCall(BaseModel):
    """One tool call of a reference solution."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    arguments: dict[str, JsonValue] = Field(default_factory=dict)


class TaskRow(BaseModel):
    """One task as a data file writes it; fields left out (or null) take their defaults."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)
    prompt: str = Field(min_length=1)
    """What the user asks."""
    answer: JsonValue
    """The ground truth the verifier checks against (a string, a number, or JSON for verifier json)."""
    id: str | None = Field(None, min_length=1)
    """A unique task id (default: the file's name and the row's line)."""
    kind: str = Field("data", min_length=1)
    """The task's kind, for `task_kinds` and `train.sft_mix`."""
    split: Literal["train", "heldout"] | None = None
    """train or heldout (default: chosen by a stable hash of the prompt)."""
    needs_tools: bool | None = None
    """Whether an honest solution calls a tool (default: whether reference_calls are given)."""
    reference_calls: list[ReferenceCall] = Field(default_factory=list)
    """The tool calls of a reference solution, in order: [{"name": ..., "arguments": {...}}]."""
    reference_answer: str | None = None
    """The final answer of the reference solution (default: the answer as written)."""
    reference_thought: str | None = None
    """The opening thought of the reference solution (default: a sentence naming the tools it calls)."""
    meta: dict[str, JsonValue] = Field(default_factory=dict)
    """Anything else about the task, kept with it and never read by grpolab."""

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("answer")
    @classmethod
    def _some_answer(cls, value: JsonValue) -> JsonValue:
        if value is None or value == "":
            raise ValueError("the answer is empty")
        return value


@dataclass(frozen=True)
class Row:
    """A row as read, with where it came from and the split its source gave it (a saved DatasetDict's)."""

    where: str
    """"tasks.jsonl line 3" or "my_dataset row 3": what an error names."""
    values: Any
    default_id: str
    source_split: Literal["train", "heldout"] | None = None


def read_rows(path: Path) -> list[Row]:
    """Every row of one source, unvalidated (`parse_row` checks each); a source that cannot be read is a
    UserError naming it and the fix."""
    fix = "name a JSONL file or a saved `datasets` dataset in `data` (or --data); see docs/data-env.md"
    if path.is_dir():
        return _dataset_rows(path, _load_saved(path, fix), fix)
    if path.suffix in DATASETS_SUFFIXES:
        return _dataset_rows(path, _load_file(path, fix), fix)
    if path.suffix not in JSONL_SUFFIXES and path.exists():
        raise UserError(f"task file {path} is not JSON Lines or a dataset ({path.suffix or 'no suffix'})", fix)
    lines = read_user_jsonl_lines(path, "task file", MAX_DATA_BYTES, fix)
    return [Row(f"{path} line {n}", value, f"{path.stem}-{n}") for n, value in lines]


def parse_row(row: Row) -> TaskRow | str:
    """The row as a TaskRow, or what is wrong with it ("tasks.jsonl line 3: field 'answer': ...")."""
    if not isinstance(row.values, dict):
        return f"{row.where}: not an object with 'prompt' and 'answer'"
    given = {k: v for k, v in row.values.items() if v is not None or k == "answer"}  # null: left out
    try:
        return TaskRow.model_validate(given)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(row)"
        if err["type"] == "extra_forbidden":
            return f"{row.where}: unknown field '{field}' (put extra data under 'meta')"
        return f"{row.where}: field '{field}': {err['msg']}"


def _load_saved(path: Path, fix: str) -> Any:
    _check_size(path, fix)
    datasets = _datasets(fix)
    try:
        return datasets.load_from_disk(str(path))
    except Exception as exc:  # FileNotFoundError for a folder save_to_disk did not write, and datasets' own
        raise UserError(f"cannot read dataset {path} ({type(exc).__name__}: {exc})", fix) from None


def _load_file(path: Path, fix: str) -> Any:
    read_user_file(path, "task file", MAX_DATA_BYTES, fix, errors="replace")  # a regular file within the limit
    datasets = _datasets(fix)
    builder = path.suffix.lstrip(".")
    bars_were_off = datasets.utils.are_progress_bars_disabled()
    datasets.utils.disable_progress_bars()  # a bar per file would interleave with the command's own output
    try:
        with tempfile.TemporaryDirectory(prefix="grpolab-dataset-") as cache:  # nothing left in the user's cache
            data = datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=cache)
            return data.to_list()
    except Exception as exc:  # a malformed file raises whatever its reader raises
        raise UserError(f"cannot read task file {path} ({type(exc).__name__}: {exc})", fix) from None
    finally:
        if not bars_were_off:
            datasets.utils.enable_progress_bars()


def _datasets(fix: str) -> Any:
    try:
        import datasets  # here: an optional dependency (the trl extra), needed only for dataset sources
    except ImportError:
        raise UserError("reading a dataset needs the `datasets` package", f"pip install datasets, or {fix}") from None
    return datasets


def _dataset_rows(path: Path, data: Any, fix: str) -> list[Row]:
    """Rows of a Dataset, or of each split of a DatasetDict (its train split trained on, HELDOUT_SPLITS held out)."""
    parts = data.items() if hasattr(data, "keys") else [(None, data)]
    rows = []
    for split_name, part in parts:
        source_split: Literal["train", "heldout"] | None = None
        if split_name is not None:
            if split_name == "train":
                source_split = "train"
            elif split_name in HELDOUT_SPLITS:
                source_split = "heldout"
            else:
                raise UserError(
                    f"dataset {path} has a split {split_name!r}",
                    f"name its splits train or one of {', '.join(HELDOUT_SPLITS)} (held out)",
                )
        label = f"{path} split {split_name}" if split_name else str(path)
        for n, values in enumerate(part, 1):
            default_id = f"{path.stem}-{split_name}-{n}" if split_name else f"{path.stem}-{n}"
            rows.append(Row(f"{label} row {n}", values, default_id, source_split))
    return rows


def _check_size(folder: Path, fix: str) -> None:
    total = 0
    for root, _, names in os.walk(folder):
        total += sum(os.path.getsize(os.path.join(root, n)) for n in names)
    if total > MAX_DATA_BYTES:
        raise UserError(f"dataset {folder} is {total} bytes, over the {size_text(MAX_DATA_BYTES)} limit", fix)
