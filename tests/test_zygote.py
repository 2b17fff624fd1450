"""The tests' forked commands (tests/zygote.py) are what `python -m grpolab.cli` is: same output, exit codes, path,
environment and process group."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests import zygote
from tests.conftest import start_grpolab

ENV = zygote.command_env()


def fresh(argv: list[str], cwd, env=ENV) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "grpolab.cli", *argv]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("argv", [["--help"], ["config", "--env", "no_such_env"], ["config", "--model", "tiny"]])
def test_a_forked_command_prints_and_exits_as_a_fresh_one(tmp_path, argv):
    forked, new = zygote.run(argv, tmp_path, ENV, timeout=300), fresh(argv, tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (new.returncode, new.stdout, new.stderr)
    assert forked.returncode == (2 if "no_such_env" in argv else 0)


def test_a_forked_command_sees_its_own_folder_environment_and_a_fresh_grpolab(tmp_path):
    record = tmp_path / "seen.txt"
    plugin = tmp_path / "seen.py"
    plugin.write_text(
        "import os, sys\n"
        "mods = sorted(m for m in sys.modules if m.startswith('grpolab.'))\n"
        f"open({str(record)!r}, 'w').write(repr((sys.path[0], os.getcwd(), os.environ.get('SEEN'), sys.argv[1:],"
        " 'grpolab.engine.trainer' in mods)))\n"
    )
    env = {**ENV, "SEEN": "yes"}
    argv = ["config", "--plugin", str(plugin)]
    assert zygote.run(argv, tmp_path, env, timeout=300).returncode == 0
    forked = record.read_text()
    assert fresh(argv, tmp_path, env).returncode == 0
    assert forked == record.read_text()
    assert eval(forked) == (str(tmp_path), str(tmp_path), "yes", argv, False)


def test_an_environment_read_at_import_time_runs_fresh():
    assert zygote.ZYGOTE.fits(ENV)
    assert not zygote.ZYGOTE.fits({**ENV, "OMP_NUM_THREADS": "7"})
    assert not zygote.ZYGOTE.fits({k: v for k, v in ENV.items() if k != "PYTHONPATH"})


def test_a_started_command_is_its_own_process_group_and_reports_the_signal_that_killed_it(tmp_path):
    ready = tmp_path / "ready"
    plugin = tmp_path / "waits.py"
    plugin.write_text(f"import time\nopen({str(ready)!r}, 'w').close()\ntime.sleep(120)\n")
    proc = start_grpolab("config", "--plugin", str(plugin))
    assert isinstance(proc, zygote.Command)
    deadline = time.monotonic() + 120
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None and os.getpgid(proc.pid) == proc.pid
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL


def test_a_server_that_ended_is_started_again(tmp_path):
    assert zygote.run(["--help"], tmp_path, ENV, timeout=300).returncode == 0
    zygote.ZYGOTE.server.kill()
    zygote.ZYGOTE.server.wait(timeout=30)
    deadline = time.monotonic() + 30
    while not zygote.ZYGOTE.dead and time.monotonic() < deadline:
        time.sleep(0.05)
    assert zygote.ZYGOTE.dead
    done = zygote.run(["config", "--env", "no_such_env"], tmp_path, ENV, timeout=300)
    assert done.returncode == 2 and "no_such_env" in done.stderr and not zygote.ZYGOTE.dead
