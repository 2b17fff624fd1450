"""A shared run folder is data: reading it (the lab, report) imports none of its code; running it (resume, eval,
chat...) imports its recorded plugins and says so. Jobs the lab starts import nothing from the lab's folder; user
files never take a real module's name; τ²-bench reads no `.env` file."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from grpolab.config import load_config
from grpolab.lab import handlers, jobs
from grpolab.rundir import RunDir

EVIL = """
from pathlib import Path
Path({marker!r}).write_text("imported")
from grpolab.envs.finance import FinanceEnv as Env
"""


def shared_run(tmp_path: Path, write_run) -> tuple[Path, Path]:
    """A run folder as someone might share it: two evaluations, and a config naming a plugin and an env of its
    own (`evil.py`, which leaves a marker when imported). Returns (run, marker)."""
    marker = tmp_path / "imported.txt"
    evil = tmp_path / "evil.py"
    evil.write_text(EVIL.format(marker=str(marker)))
    run = write_run(tmp_path / "runs" / "shared")
    config = json.loads((run / "config.json").read_text())
    config.update(plugins=[str(evil)], env="evil:Env")
    (run / "config.json").write_text(json.dumps(config))
    return run, marker


def test_the_lab_and_the_report_read_a_shared_run_without_importing_its_code(tmp_path, run_with, cli):
    run, marker = shared_run(tmp_path, run_with)
    summary, cards, chart, _, _, _, changes = handlers.run_view(run.parent, run.name)
    assert "What GRPO changed" in changes or "step 0" in changes, changes
    assert "lab-error" not in summary
    assert not marker.exists()
    code, out, err = cli("report", "--run", str(run))
    assert code == 0, err
    assert (run / "report.html").is_file() and not marker.exists()
    cfg = RunDir(run).read_config()  # validated as data
    assert cfg.plugins and not marker.exists()


def test_running_a_run_imports_its_recorded_plugins_and_says_so(tmp_path, run_with):
    run, marker = shared_run(tmp_path, run_with)
    notes: list[str] = []
    cfg = RunDir(run).config_to_run(notes)
    assert marker.exists()
    assert len(notes) == 1 and "imports the plugins it records" in notes[0] and cfg.plugins[0] in notes[0]


def test_a_plugin_named_like_a_module_keeps_to_a_private_name(tmp_path, cli):
    import datasets

    plugin = tmp_path / "plug" / "datasets.py"
    plugin.parent.mkdir()
    plugin.write_text("MARK = 'the user file'\n")
    code, _, err = cli("config", "--plugin", str(plugin), "--json")
    assert code == 0, err
    assert sys.modules["datasets"] is datasets  # the real package kept its name
    assert sys.modules["grpolab_user.datasets"].MARK == "the user file"


def test_a_lab_job_imports_nothing_from_the_labs_folder(tmp_path, monkeypatch):
    folder = tmp_path / "lab-folder"
    folder.mkdir()
    marker = tmp_path / "shadowed.txt"
    (folder / "random.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\nraise SystemExit(3)\n")
    (folder / ".env").write_text("GRPOLAB_CACHE=/nonexistent\n")
    monkeypatch.chdir(folder)
    cfg = load_config(None, {"model": "tiny", "env": "arithmetic", "rollout.group_size": 2})
    cfg = load_config(None, {"rollout.max_new_tokens": 4, "train.steps": 1, "train.eval_limit": 1}, base=cfg)
    cfg.train.eval_every = 0
    out = jobs.start(cfg, tmp_path / "runs", "job")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and jobs.running(tmp_path / "runs", "job"):
        time.sleep(0.5)
    log = (tmp_path / "runs" / ".job.log").read_text()
    assert not marker.exists(), log
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1, log


def test_tau2_is_imported_without_reading_a_dotenv_file(tmp_path):
    (tmp_path / ".env").write_text("GRPOLAB_DOTENV_MARK=read\nGRPOLAB_CACHE=/somewhere/else\n")
    probe = (
        "import os\nfrom grpolab.envs.tau2.package import tau2\ntau2()\n"
        "print(os.environ.get('GRPOLAB_DOTENV_MARK'), os.environ.get('GRPOLAB_CACHE'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "GRPOLAB_CACHE"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "None"]
