"""Layering: a module low in the stack imports nothing heavy, so a user's tool that reads a config (or a test that
builds one) does not pay for every environment, transformers and torch."""

import subprocess
import sys

HEAVY = "[m for m in sys.modules if m in ('transformers', 'torch') or m.startswith('grpolab.envs')]"


def test_config_is_a_leaf():
    # a fresh interpreter: this one has imported everything already
    code = f"import sys, grpolab.config; print({HEAVY})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", f"import grpolab.config loads {out.stdout.strip()}"
