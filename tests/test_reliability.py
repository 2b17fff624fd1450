"""Reliability against hostile or broken input (see docs/security.md): run directories that cannot be corrupted,
exit 2 for every bad input, and a fuzz test of config and tool-argument parsing that sees only exit 0 or 2."""

import contextlib
import io
import json
import math
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from grpolab.config import load_config
from grpolab.errors import UserError
from grpolab.rundir import RunDir

SMALL = {
    "model": "tiny",
    "rollout.group_size": 2,
    "rollout.max_new_tokens": 8,
    "train.prompts_per_step": 1,
    "train.eval_limit": 2,
    "train.eval_every": 0,
}


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# ---- run directories: one trainer, never a foreign folder, intact checkpoints -------------------------------------


def test_a_second_trainer_on_a_claimed_run_dir_exits_2_naming_the_holder(tmp_path, grpolab_process, small_config):
    out = tmp_path / "run"
    held = RunDir.create(out, load_config(None, SMALL))  # this test process is the first trainer
    try:
        config = str(small_config(tmp_path))
        second = grpolab_process("train", "--model", "tiny", "--steps", "1", "--out", str(out), "--config", config)
        assert second.wait(timeout=120) == 2
        err = second.stderr.read()
        assert f"is in use by pid {os.getpid()}" in err and "pick another --out" in err, err
        resumer = grpolab_process("train", "--resume", str(out), "--quiet")
        assert resumer.wait(timeout=120) == 2 and f"pid {os.getpid()}" in resumer.stderr.read()
        assert not (out / "metrics.jsonl").exists()
    finally:
        held.release()


def test_two_trainers_started_together_do_not_interleave(tmp_path, grpolab_process, small_config):
    out, config = tmp_path / "run", str(small_config(tmp_path))
    argv = ["train", "--model", "tiny", "--steps", "3", "--out", str(out), "--quiet", "--config", config]
    procs = [grpolab_process(*argv), grpolab_process(*argv)]
    codes = [p.wait(timeout=300) for p in procs]
    errors = [p.stderr.read() for p in procs]
    assert sorted(codes) == [0, 2], errors
    loser = errors[codes.index(2)]
    assert "is in use by pid" in loser or "already has a run" in loser, loser  # (the latter: started after)
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


@pytest.mark.parametrize(
    "name, text",
    [("config.json", '{"mine": true}\n'), ("claim.json", '{"claimant": "me"}\n')],  # one run marker alone is not a run
)
def test_a_folder_that_is_not_a_run_is_never_written_into(cli, tmp_path, small_config, name, text):
    config = str(small_config(tmp_path))
    mine = tmp_path / "my-project"
    mine.mkdir()
    (mine / name).write_text(text)
    (mine / "notes.txt").write_text("keep\n")
    code, _, err = cli("train", "--model", "tiny", "--steps", "1", "--out", str(mine), "--config", config, "--quiet")
    assert code == 2 and f"{mine} is not empty and is not a grpolab run" in one_line(err), err
    assert sorted(p.name for p in mine.iterdir()) == sorted([name, "notes.txt"])
    assert (mine / name).read_text() == text


def test_out_on_a_file_or_an_unwritable_place_exits_2(cli, tmp_path, small_config):
    config = str(small_config(tmp_path))
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [
        (afile, "is an existing file"),
        (afile / "run", "cannot create run directory"),
        (Path("/proc/self/grpolab-run"), "cannot create run directory"),
    ]
    if Path("/sys").is_dir():
        cases.append((Path("/sys/grpolab-run"), "cannot create run directory"))  # a read-only mount here
    for out, problem in cases:
        code, _, err = cli("train", "--model", "tiny", "--steps", "1", "--out", str(out), "--config", config)
        assert code == 2 and problem in one_line(err) and "--out" in err, (out, err)
    assert afile.read_text() == "x"


def test_outputs_to_unwritable_paths_exit_2(cli, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for target in (afile / "train_grpo.py", Path("/sys/train_grpo.py")):
        code, _, err = cli("export-trl", "-o", str(target))
        assert code == 2 and f"cannot write {target}" in one_line(err) and "-o" in err, err


def test_out_on_a_read_only_mount_exits_2(tmp_path, small_config):
    """A read-only tmpfs mounted in a private mount namespace (skipped where unshare is not allowed)."""
    import shutil
    import subprocess
    import sys

    mnt, config = tmp_path / "ro", str(small_config(tmp_path))
    mnt.mkdir()
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no mount namespaces here")
    train = f"{sys.executable} -m grpolab.cli train --model tiny --steps 1 --config {config} --out"
    script = f"mount -t tmpfs -o ro none {mnt} && {{ {train} {mnt}; echo rc=$?; {train} {mnt}/run; echo rc=$?; }}"
    done = subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    if "rc=" not in done.stdout:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()[:200]}")
    assert done.stdout.split() == ["rc=2", "rc=2"], done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and all("Read-only file system" in line and "--out" in line for line in lines), lines
    assert "cannot lock run directory" in lines[0] and "cannot create run directory" in lines[1]


def test_resume_falls_back_to_the_newest_intact_checkpoint(tmp_path, capsys):
    from grpolab.run.loop import train

    out = tmp_path / "run"
    train(load_config(None, {**SMALL, "train.steps": 3, "train.checkpoint_every": 1}), out, quiet=True)
    assert [s for s, _ in RunDir(out).checkpoints()] == [2, 3]
    manifest = json.loads((out / "checkpoints" / "step-3" / "manifest.json").read_text())
    assert len(manifest["files"]["trainable.pt"]["sha256"]) == 64
    latest = out / "checkpoints" / "step-3" / "trainable.pt"
    latest.write_bytes(latest.read_bytes()[:100])  # cut short, as by a full disk
    capsys.readouterr()
    train(RunDir(out).read_config(), out, resume=True)
    err = " ".join(capsys.readouterr().err.split())  # rich wraps lines
    assert "step-3 is damaged" in err and "resumed" in err and "from step 2" in err, err
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    assert [p.name.startswith("damaged-step-3") for p in (out / "checkpoints").iterdir()].count(True) == 1


def test_a_changed_byte_of_the_same_size_fails_the_checksum(tmp_path):
    from grpolab.files.atomic import sha256_file
    from grpolab.rundir import checkpoint_problem

    folder = tmp_path / "step-1"
    folder.mkdir()
    (folder / "trainable.pt").write_bytes(b"weights")

    digest = sha256_file(folder / "trainable.pt")
    (folder / "manifest.json").write_text(json.dumps({"files": {"trainable.pt": {"bytes": 7, "sha256": digest}}}))
    assert checkpoint_problem(folder) is None
    (folder / "trainable.pt").write_bytes(b"weighTs")
    assert "checksum" in checkpoint_problem(folder)
    (folder / "trainable.pt").unlink()
    assert "missing" in checkpoint_problem(folder)


# ---- exit 2 for every bad input --------------------------------------------------------------------------------


def _toml_file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return str(path)


def test_deep_nesting_is_refused_quickly_with_exit_2(cli, tmp_path):
    cases = [
        ("config", "--config", _toml_file(tmp_path, "arrays", "a = " + "[" * 100_000 + "]" * 100_000 + "\n")),
        ("config", "--config", _toml_file(tmp_path, "keys", "x" + ".x" * 100_000 + " = 1\n")),  # quadratic in tomllib
        ("config", "--config", _toml_file(tmp_path, "tables", "a = " + "{b = " * 100 + "1" + "}" * 100 + "\n")),
        ("tools", "run", "--env", "finance", "calculator", "[" * 60_000),
        ("tools", "run", "--env", "finance", "calculator", '{"expression": ' + "[" * 100 + "]" * 100 + "}"),
    ]
    for argv in cases:
        t0 = time.perf_counter()
        code, _, err = cli(*argv)
        assert code == 2 and "levels deep, over the limit of 64" in one_line(err), err[-300:]
        assert time.perf_counter() - t0 < 5


def test_oversized_inputs_are_refused_with_the_limit_named(cli, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("x" * (1024 * 1024 + 1))
    t0 = time.perf_counter()
    code, _, err = cli("reward", "score", "--task", "pct_change-ACME-Q3", "--completion", str(big))
    assert code == 2 and "over the 1 MiB limit" in one_line(err) and time.perf_counter() - t0 < 5
    config = tmp_path / "big.toml"
    config.write_text("# padding\n" * 30_000)
    code, _, err = cli("config", "--config", str(config))
    assert code == 2 and "over the 256 KiB limit" in one_line(err)
    code, _, err = cli("tools", "run", "calculator", json.dumps({"expression": "1" * 70_000}))
    assert code == 2 and "over the 64 KiB limit" in one_line(err)


def test_a_completion_must_be_a_regular_file(cli, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in [("/proc/self/mem", "/proc"), (str(fifo), "a FIFO"), ("/dev/zero", "a device"), ("/", "dir")]:
        code, _, err = cli("reward", "score", "--task", "pct_change-ACME-Q3", "--completion", path)
        assert code == 2 and "is not a regular file" in one_line(err) and kind in err, err


BAD = [
    (["tasks", "--env", "os:getcwd"], "not an environment"),
    (["tasks", "--env", "os:system"], "could not be built"),
    (["tasks", "--env", "os:sep"], "not a class or factory"),
    (["simulate", "--runs", "0"], "--runs"),
    (["simulate", "--steps", "0"], "--steps"),
    (["simulate", "--lr", "nan"], "--lr"),
    (["simulate", "--beta", "inf"], "--beta"),
    (["config", "--weights", "nan,1.5,3,-0.05"], "not finite"),
    (["config", "--weights", "1,inf,3,-0.05"], "not finite"),
    (["eval", "--env", "bfcl", "--data", "/dev/null", "--model", "tiny"], "not a regular file"),
    (["eval", "--env", "finance", "--model", "tiny", "--limit", "-1"], "--limit"),
    (["tasks", "--limit", "-5"], "--limit"),
    (["check", "--prompts", "0"], "--prompts"),
    (["simulate", "--calibrate", "/proc/self/mem"], "not a regular file"),
]


@pytest.mark.parametrize("argv,problem", BAD)
def test_bad_input_exits_2(cli, argv, problem):
    code, _, err = cli(*argv)
    assert code == 2 and problem in err, err


def test_simulate_calibrates_only_from_well_formed_rows(cli, tmp_path):
    (tmp_path / "eval").mkdir()
    (tmp_path / "config.json").write_text('{"env": "finance"}')
    (tmp_path / "eval" / "0.jsonl").write_text('{"task_id": 1, "components": "x"}\n{"tokens": "many"}\n')
    code, _, err = cli("simulate", "--calibrate", str(tmp_path), "--steps", "5")
    assert code == 2 and "skipped 2 malformed episode row(s)" in err and "no scored episodes" in err, err


@pytest.mark.parametrize(
    "toml,field",
    [
        ("[grpo]\nbeta = inf\n", "grpo.beta"),
        ("[grpo]\nlearning_rate = nan\n", "grpo.learning_rate"),
        ("[reward.weights]\nformat = -inf\n", "reward.weights.format"),
        ("[train]\nsft_learning_rate = inf\n", "train.sft_learning_rate"),
    ],
)
def test_config_floats_must_be_finite(cli, tmp_path, toml, field):
    path = tmp_path / "c.toml"
    path.write_text(toml)
    code, _, err = cli("config", "--config", str(path), "--json")
    assert code == 2 and f"field '{field}'" in one_line(err) and "finite" in err, err


def test_resume_with_a_bad_step_count_exits_2(cli, tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(load_config(None, SMALL).model_dump_json())
    code, _, err = cli("train", "--resume", str(tmp_path / "run"), "--steps", "-1")
    assert code == 2 and "--steps -1: Input should be greater than or equal to 0" in one_line(err)


def test_an_override_into_something_that_is_not_a_section_is_a_user_error(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('env = "finance"\n')
    with pytest.raises(UserError, match="'env' is not a section"):
        load_config(path, {"env.name": 1})


def test_json_output_is_strict_json(capsys):
    from grpolab.cli.options import print_json

    print_json({"reward": float("nan"), "rows": [float("inf"), 1.5]})
    out = capsys.readouterr().out
    assert json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in --json output")) == {
        "reward": None,
        "rows": [None, 1.5],
    }


def test_report_renders_a_malformed_run_dir_and_names_what_it_skipped(cli, tmp_path):
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"env": "finance", "model": "tiny", "reward": [1, 2]}))
    rows = [
        {"step": 1, "reward/mean": 0.5, "kl": float("inf"), "alarms": {}},
        {"step": 2, "reward/mean": "high", "alarms": ["not", "a", "mapping"]},
        {"step": 10**400},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "garbage\n" + "[" * 5000 + "\n")
    (run / "eval" / "summary.json").write_text(json.dumps({"0": {"heldout/success": "x"}, "1": 7}))
    (run / "preflight.json").write_text(json.dumps({"probes": [{"probe": 1}, "x"], "learnability": "nope"}))
    (run / "eval" / "base.jsonl").write_text(json.dumps({"task_id": "t", "components": [1], "text": "a"}) + "\n")
    (run / "eval" / "1.jsonl").write_text(json.dumps({"task_id": ["t"], "reasons": "r"}) + "\n")
    code, out, err = cli("report", "--run", str(run))
    assert code == 0 and "wrote" in out, err
    for named in ("metrics.jsonl", "preflight.json", "eval/summary.json", "eval/base.jsonl", "eval/1.jsonl"):
        assert named in err, (named, err)
    page = (run / "report.html").read_text()
    assert "<h2>Skipped</h2>" in page and "2 malformed probe row(s)" in page


def test_report_on_an_unreadable_config_exits_2(cli, tmp_path):
    (tmp_path / "config.json").write_text("[" * 100_000)
    code, _, err = cli("report", "--run", str(tmp_path))
    assert code == 2 and "config.json" in one_line(err)


# ---- fuzz: config and tool-argument parsing see only exit 0 or 2 ------------------------------------------------


def run_cli(*argv: str) -> tuple[int, str]:
    """`grpolab ARGV...` in this process: (exit code, stdout); an uncaught exception fails the test."""
    from grpolab.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as exc:
            return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


FIELDS = ["env", "model", "seed", "task_kinds", "data", "reward", "rollout", "grpo", "lora", "train", "alarms", "watch"]
SUBFIELDS = ["weights", "format", "beta", "learning_rate", "group_size", "steps", "epsilon", "rank", "hack_t", "x"]
SCALARS = st.one_of(
    st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=12), st.booleans(), st.just(float("nan"))
)


def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(v) if isinstance(v, str) else str(v)


VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(SUBFIELDS), inner, max_size=3),
    max_leaves=8,
)
STRUCTURED = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), VALUES, max_size=5).map(
    lambda d: "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in d.items())
)
SECTIONS = st.tuples(st.sampled_from(FIELDS[5:]), st.dictionaries(st.sampled_from(SUBFIELDS), VALUES, max_size=3)).map(
    lambda s: f"[{s[0]}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in s[1].items())
)
TOML_SOUP = st.text(alphabet="[]{}=\"'.#\n =,-+0123456789abcinfe_\\tx", max_size=120)
DEEP = st.integers(1, 3000).map(lambda n: "a = " + "[" * n + "]" * n + "\n") | st.integers(1, 3000).map(
    lambda n: "k" + ".k" * n + " = 1\n"
)
TOML_TEXT = STRUCTURED | SECTIONS | TOML_SOUP | DEEP
FLAG_TEXT = st.text(alphabet="0123456789.,-+eEnaifx :", max_size=24)
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(text=TOML_TEXT, weights=st.none() | FLAG_TEXT, seed=st.none() | FLAG_TEXT, model=st.none() | st.text(max_size=8))
def test_fuzz_config_parsing_exits_0_or_2(tmp_path, text, weights, seed, model):
    path = tmp_path / "fuzz.toml"
    path.write_text(text, errors="surrogatepass")
    flags = [f"--{k}={v}" for k, v in (("weights", weights), ("seed", seed), ("model", model)) if v is not None]
    code, out = run_cli("config", "--config", str(path), "--json", *flags)
    assert code in (0, 2)
    if code == 0:
        json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))


@FUZZ
@given(
    base=STRUCTURED | SECTIONS,
    dotted=st.sampled_from([f"{a}.{b}" for a in FIELDS for b in SUBFIELDS] + FIELDS),
    value=VALUES,
)
def test_fuzz_dotted_overrides_raise_only_user_errors(tmp_path, base, dotted, value):
    path = tmp_path / "base.toml"
    path.write_text(base, errors="surrogatepass")
    try:
        cfg = load_config(path, {dotted: value})
    except UserError:
        return
    json.dumps(cfg.model_dump(mode="json"), allow_nan=False)  # every float finite


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
# functions included: round/abs/min/max/sqrt bound their own work (round(5, -20000000) used to hang the trainer)
EXPRESSIONS = st.text(alphabet="0123456789+-*/%.(), ", max_size=40) | st.builds(
    lambda f, a, b: f"{f}({a}, {b})",
    st.sampled_from(["round", "abs", "min", "max", "sqrt", "pow"]),
    st.integers(-(10**9), 10**9),
    st.integers(-(10**9), 10**9),
)
TOOL_ARGS = (
    JSON_VALUES.map(json.dumps)
    | EXPRESSIONS.map(lambda e: json.dumps({"expression": e}))
    | st.text(max_size=60)
    | st.integers(1, 3000).map(lambda n: '{"expression": ' + "[" * n + "]" * n + "}")
)


@settings(max_examples=80, deadline=None)
@given(args=TOOL_ARGS)
def test_fuzz_tool_arguments_exit_0_or_2(args):
    code, _ = run_cli("tools", "run", "--env", "finance", "calculator", args)
    assert code in (0, 2)


# ---- fuzz: markup, extreme numbers and deep nesting in what commands read and print: exit 0 or 2, text as written -


@contextlib.contextmanager
def wide_consoles():
    """The CLI's consoles 1,000 columns wide, so a table cell is found on one line."""
    from grpolab.cli.options import console, err_console

    widths = [(c, c.width) for c in (console, err_console)]
    for c, _ in widths:
        c.width = 1000
    try:
        yield
    finally:
        for c, width in widths:
            c.width = width


MARKUP_TEXT = st.sampled_from(["[/x]", "[bold]x", "[/]", "[red]", "\\[x]", "[link=file:///x]y[/link]", "[bold"]) | (
    st.text(alphabet="[]/\\=#@ boldredx:", min_size=1, max_size=24).filter(lambda t: t.strip() == t and t)
)
"""Text rich would read as markup (or as an escape of it)."""
NUMBER_TOKENS = (
    st.sampled_from(["1" + "0" * 400, "-" + "9" * 400, "1.7e308", "-1.7e308", "1e400", "-1e400", "1e-400", "-0.0"])
    | st.sampled_from(["NaN", "Infinity", "-Infinity", "4.9e-324", "9007199254740993", "0"])
    | st.integers(-(10**30), 10**30).map(str)
    | st.floats(allow_nan=False, allow_infinity=False).map(repr)
)
"""Raw JSON numbers: huge integers, the largest floats, overflowing and underflowing exponents, NaN and Infinity."""
DEEP_JSON = st.sampled_from([65, 900, 100_000]).map(lambda n: "[" * n + "]" * n) | st.integers(60, 400).map(
    lambda n: '{"a": ' * n + "1" + "}" * n
)
DEEPEST = "[" * 100_000 + "]" * 100_000
RAW_VALUES = NUMBER_TOKENS | DEEP_JSON
ARTIFACTS = st.lists(st.sampled_from(["metrics", "summary", "probes", "episodes", "config"]), min_size=1, unique=True)
SLOW_FUZZ = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(text=MARKUP_TEXT)
def test_fuzz_markup_in_user_text_prints_as_written(text):
    code, out = run_cli("config", "--model", text)
    assert code == 0 and f"model = {text!r}" in out


@SLOW_FUZZ
@given(raw=RAW_VALUES, text=MARKUP_TEXT)
@example(raw=DEEPEST, text="[/x]")  # RecursionError before
def test_fuzz_bfcl_data_exits_0_or_2_and_prints_as_written(tmp_path, raw, text):
    row = {
        "id": "live_irrelevance_0-0-0",
        "question": [[{"role": "user", "content": f"q {text}"}]],
        "function": [{"name": "f", "parameters": {"type": "dict", "properties": {"a": {"default": "__RAW__"}}}}],
    }
    path = tmp_path / "fuzz.json"
    path.write_text(json.dumps(row).replace('"__RAW__"', raw) + "\n")
    config = tmp_path / "fuzz.toml"
    config.write_text(f'env = "bfcl"\ndata = [{json.dumps(str(path))}]\n')
    with wide_consoles():
        code, out = run_cli("tasks", "--config", str(config), "--split", "heldout")
    assert code in (0, 2)
    if code == 0:
        assert f"q {text}" in out


@SLOW_FUZZ
@given(raw=RAW_VALUES, where=ARTIFACTS)
@example(raw="1" + "0" * 400, where=["metrics"])  # OverflowError before
@example(raw="-1.7e308", where=["summary", "probes"])  # matplotlib's ValueError before
def test_fuzz_run_artifacts_exit_0_or_2_for_report_and_simulate(tmp_path, run_with, raw, where):
    import shutil

    run = tmp_path / "run"
    shutil.rmtree(run, ignore_errors=True)
    run_with(run, raw, tuple(where))
    code, _ = run_cli("report", "--run", str(run))
    assert code in (0, 2)
    code, out = run_cli("simulate", "--real", str(run), "--steps", "2", "--runs", "1", "--json")
    assert code in (0, 2)
    if code == 0:  # every gap a number: --json writes a non-finite one as null
        result = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))
        assert result["sim_to_real"] and None not in result["sim_to_real"].values()


@SLOW_FUZZ
@given(weights=st.lists(NUMBER_TOKENS, min_size=4, max_size=4).map(",".join))
@example(weights="1e308,1e308,1e308,1e308")  # NaN curves and exit 0 before
def test_fuzz_simulate_weights_exit_0_or_2(weights):
    code, out = run_cli("simulate", "--weights", weights, "--steps", "3", "--runs", "2", "--json")
    assert code in (0, 2)
    if code == 0:  # every curve a number: --json writes a non-finite one as null
        result = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))
        assert None not in result["iterations"][-1].values()


def test_a_resumed_run_reads_values_no_float_holds(tmp_path, run_with):
    """The alarms' history and the held-out start are read back from metrics.jsonl and summary.json on resume: a
    400-digit integer raised OverflowError there."""
    from grpolab.alarms.rules import AlarmWatch

    huge = 10**400
    run = RunDir(run_with(tmp_path / "run", str(huge), where=("metrics", "summary")))
    history = run.metrics()
    assert history[0]["reward/mean"] == huge and run.heldout_at_start() is None
    history += [{"step": 3, "heldout/success": huge, "entropy": huge, "completion_len": huge, "reward/std": huge}]
    watch = AlarmWatch(load_config(None, SMALL), history, run.heldout_at_start())
    assert isinstance(watch.check({"step": 4, "reward/mean": 0.5, "kl": 0.01}), dict)


@pytest.mark.parametrize("text", ["[" * 100_000, '{"config": ' + "[" * 900 + "]" * 900 + "}", '{"config": 1e400}'])
def test_an_export_manifest_beyond_the_limits_exits_2(cli, tmp_path, text):
    """`chat --model DIR` reads DIR/grpolab.json: nested 100k deep it raised RecursionError."""
    (tmp_path / "grpolab.json").write_text(text)
    code, _, err = cli("chat", "--model", str(tmp_path), "-q", "hi")
    assert code == 2 and "grpolab.json" in one_line(err) and "re-export the run" in err, err
