"""Where BFCL data comes from: the `bfcl-eval` package's own files, or question files the user names.

The package is installed with `--no-deps` (`make setup`), so it is found with `importlib.util.find_spec`, which
locates a top-level package without running its `__init__` (that one imports dependencies we do not install).
Nothing outside the installed packages is read, unless the user passes a file.

Categories are BFCL's names, which are also the ids' prefixes ("live_simple_3-1-0" is in live_simple). "simple"
means simple_python: simple_java and simple_javascript answer in Java/JavaScript source strings, which a Python
AST check does not cover. Live categories (real user queries) are the out-of-distribution test: all their tasks
are held out, never trained on. The other categories hold out 20% of ids with a fixed seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from grpolab.errors import UserError
from grpolab.files.limits import MAX_DATA_BYTES
from grpolab.files.user_input import read_user_jsonl

PACKAGE = "bfcl-eval"
PINNED_VERSION = "2026.3.23"
"""The release the checker was compared against (benchmarks/bfcl_parity.py) and `make setup` installs."""
DATA_VERSION = "BFCL_v4"
CATEGORIES: tuple[str, ...] = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
    "live_relevance",
)
"""BFCL's single-turn categories scored by AST or by relevance (no Java/JavaScript, no multi-turn or agentic)."""
HELDOUT_FRACTION = 0.2
SPLIT_SEED = 1234


def category_of(task_id: str) -> str:
    """BFCL's extract_test_category_from_id: everything before the last underscore."""
    return task_id.split(":")[0].rsplit("_", 1)[0]


def is_live(category: str) -> bool:
    return category.startswith("live_")


def needs_answers(category: str) -> bool:
    """Irrelevance and relevance tasks are scored on whether a call is made: they have no possible_answer."""
    return "relevance" not in category


@dataclass(frozen=True)
class Source:
    """One question file and its possible_answer file (None where the category has none)."""

    questions: Path
    answers: Path | None


def package_data_dir() -> Path:
    """bfcl_eval/data of the installed package (located, not imported)."""
    try:
        spec = find_spec("bfcl_eval")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    data = next((Path(loc) / "data" for loc in locations if (Path(loc) / "data").is_dir()), None)
    if data is None:
        raise UserError(
            f"no BFCL data: the {PACKAGE} package is not installed",
            f"run `make setup` (it installs {PACKAGE}=={PINNED_VERSION} with --no-deps) or pass --data FILE",
        )
    return data


def package_version() -> str | None:
    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return None


def package_sources() -> dict[str, Source]:
    """Every category in CATEGORIES, from the installed package."""
    data = package_data_dir()
    out = {}
    for category in CATEGORIES:
        questions = data / f"{DATA_VERSION}_{category}.json"
        answers = data / "possible_answer" / questions.name if needs_answers(category) else None
        if not questions.is_file() or (answers is not None and not answers.is_file()):
            raise UserError(
                f"{PACKAGE} {package_version()} has no {category} data at {questions.parent}",
                f"reinstall it: pip install --no-deps {PACKAGE}=={PINNED_VERSION}",
            )
        out[category] = Source(questions, answers)
    return out


def user_source(path: Path) -> Source:
    """A question file the user named, with its possible_answer file beside it (X.possible_answer.json) or in a
    possible_answer/ folder beside it (BFCL's own layout). Files of (ir)relevance tasks need none."""
    rows = read_jsonl(path)  # a missing, special, oversized, too deeply nested or non-finite file stops here
    candidates = [
        path.with_name(path.name.replace(".json", ".possible_answer.json")),
        path.parent / "possible_answer" / path.name,
    ]
    answers = next((c for c in candidates if c.is_file()), None)
    if answers is None and any(needs_answers(category_of(str(r.get("id", "")))) for r in rows):
        raise UserError(
            f"no possible_answer file for {path}",
            f"put {candidates[0].name} next to it, or {path.name} in a possible_answer/ folder beside it",
        )
    return Source(path, answers)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """A BFCL JSON Lines file (one object per line), read within `grpolab.files.limits` for data files (a regular
    file of at most MAX_DATA_BYTES, lines nested at most MAX_NESTING deep, finite numbers only)."""
    fix = "pass a BFCL JSON Lines file (check the path given to --data)"
    rows = read_user_jsonl(path, "BFCL data file", MAX_DATA_BYTES, fix)
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise UserError(
                f"BFCL file {path} has a line that is not an object with a string 'id'",
                'each line must be a BFCL entry: {"id": ..., "question": [...], "function": [...]}',
            )
    return rows


def heldout_ids(ids: list[str]) -> set[str]:
    """Live ids all; otherwise 20% of the ids of each category, chosen with a fixed seed."""
    out = {i for i in ids if is_live(category_of(i))}
    by_category: dict[str, list[str]] = {}
    for i in ids:
        if not is_live(category_of(i)):
            by_category.setdefault(category_of(i), []).append(i)
    for group in by_category.values():
        shuffled = sorted(group)
        random.Random(SPLIT_SEED).shuffle(shuffled)
        out |= set(shuffled[: max(1, int(len(shuffled) * HELDOUT_FRACTION))])
    return out
