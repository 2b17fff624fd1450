"""Tests of this environment: `pytest` in this folder (grpolab installed). Add your own beside them."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def _tools():
    spec = importlib.util.spec_from_file_location("env_tools", HERE / "tools.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tool_converts_and_refuses_other_dimensions():
    tools = _tools()
    assert tools.convert(10, "mi", "km") == {"value": 16.09, "unit": "km"}
    assert tools.convert(100, "C", "F") == {"value": 212.0, "unit": "F"}
    try:
        tools.convert(1, "kg", "km")
    except ValueError:
        pass
    else:
        raise AssertionError("kg -> km must be refused")


def test_every_row_has_a_prompt_and_an_answer():
    rows = [json.loads(line) for line in (HERE / "tasks.jsonl").read_text().splitlines() if line.strip()]
    assert rows and all(row.get("prompt") and row.get("answer") is not None for row in rows)


def test_grpolab_check_passes_on_the_tiny_model():
    """The reward's probes (dummy tags, fabricated tool output, hedged answers...) score below honest work."""
    command = [sys.executable, "-m", "grpolab.cli", "check", "--config", str(HERE / "config.toml"), "--model", "tiny"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
