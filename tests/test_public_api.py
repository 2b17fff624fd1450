"""The public API: `import grpolab` gives the names a user writes against, lazily, and the user docs and the
`new-env` templates import nothing else."""

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import grpolab

ROOT = Path(__file__).resolve().parents[1]
SCAFFOLD = ROOT / "src" / "grpolab" / "scaffold"

PUBLIC = {
    "load_config": "grpolab.config",
    "LabConfig": "grpolab.config",
    "Environment": "grpolab.envs.base",
    "Task": "grpolab.envs.base",
    "EpisodeState": "grpolab.envs.base",
    "Evidence": "grpolab.envs.base",
    "Verdict": "grpolab.envs.base",
    "Tool": "grpolab.tools",
    "env_for": "grpolab.envs",
    "register_reward": "grpolab.rewards.components",
    "Rubric": "grpolab.envs.rubric",
    "RewardComponent": "grpolab.envs.rubric",
    "score_transcript": "grpolab.rewards.score",
}
"""Each public name and its defining module: a name added to or dropped from `grpolab.__all__` is a decision, made
here too."""

NOT_USER_DOCS = {
    "design.md": "the design and the code module by module, for contributors: it names internals on purpose",
    "data-path.md": "how a transcript becomes a reward inside grpolab, for contributors",
}
"""Docs left out of the import scan, each with why."""

INTERNAL_IMPORT = re.compile(r"^[ \t]*(from\s+grpolab\.[\w.]+\s+import\b.*|import\s+grpolab\.[\w.]+.*)$", re.M)


def test_all_is_the_public_names():
    assert sorted(grpolab.__all__) == sorted(PUBLIC) and grpolab.__all__ == list(grpolab._PUBLIC)
    assert len(grpolab.__all__) == len(set(grpolab.__all__))
    assert set(grpolab.__all__) <= set(dir(grpolab)) and "__version__" in dir(grpolab)
    assert isinstance(grpolab.__version__, str)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_name_is_the_object_of_its_defining_module(name):
    module = importlib.import_module(PUBLIC[name])
    value = getattr(grpolab, name)
    assert value is getattr(module, name)
    assert value.__module__ == PUBLIC[name]  # where it is defined, not a module that re-exports it
    namespace: dict = {}
    exec(f"from grpolab import {name}", namespace)
    assert namespace[name] is value


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        grpolab.no_such_name  # noqa: B018
    assert not hasattr(grpolab, "get_env")  # a real function, but not public
    with pytest.raises(ImportError):
        exec("from grpolab import no_such_name", {})


def test_submodules_still_import_by_name():
    namespace: dict = {}
    exec("from grpolab import seccomp", namespace)
    assert namespace["seccomp"] is importlib.import_module("grpolab.seccomp")


def test_import_grpolab_loads_nothing_heavy():
    # a fresh interpreter: this one has imported everything already
    heavy = "[m for m in sys.modules if m in ('transformers', 'torch') or m.startswith('grpolab.')]"
    code = f"import sys, grpolab; grpolab.__version__; dir(grpolab); print({heavy})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", f"import grpolab loads {out.stdout.strip()}"


def test_a_config_name_loads_no_environment():
    heavy = "[m for m in sys.modules if m in ('transformers', 'torch') or m.startswith('grpolab.envs')]"
    code = f"import sys, grpolab; grpolab.load_config; grpolab.LabConfig; print({heavy})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", f"grpolab.load_config loads {out.stdout.strip()}"


def _user_files() -> list[Path]:
    docs = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in NOT_USER_DOCS]
    templates = [p for p in sorted(SCAFFOLD.rglob("*")) if p.is_file() and p.suffix in {".py", ".md", ".toml"}]
    templates = [p for p in templates if p.parent != SCAFFOLD]  # scaffold/__init__.py writes them: it is grpolab's
    return docs + templates


def test_the_left_out_docs_exist():
    assert all((ROOT / "docs" / name).is_file() for name in NOT_USER_DOCS)


def test_user_docs_and_templates_import_only_from_grpolab():
    files = _user_files()
    assert any(p.name == "shop.py" for p in files) and any(p.name == "plugins.md" for p in files)
    found = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0).strip()}"
        for path in files
        for text in [path.read_text()]
        for m in INTERNAL_IMPORT.finditer(text)
    ]
    assert not found, "import these from `grpolab` (add the name to grpolab.__all__ if it is public):\n" + "\n".join(
        found
    )
