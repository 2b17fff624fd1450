"""Output paths the user names (-o, --save, --html, --out): a symlink, a device or a FIFO is written through, never
replaced; a folder the user did not ask for is never created (docs/security.md, "Files the user names").

These tests run as root: no test names a real /dev node as an output (a bug would replace it for the whole machine).
/dev/null is only reached through a symlink made in tmp_path, and afterwards it must still be a character device.
"""

import os
import stat
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_reliability import one_line, run_cli

COMPANIONS = ("accelerate_zero2.yaml", "accelerate_zero3.yaml", "accelerate_fsdp.yaml", "accelerate_cpu2.yaml")


def read_fifo(path: Path) -> tuple[threading.Thread, list[bytes]]:
    """A reader on `path` in a thread (a writer's open blocks until one exists); what it read lands in the list."""
    got: list[bytes] = []

    def read() -> None:
        with open(path, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read, daemon=True)  # stuck forever if nothing ever writes: daemon
    reader.start()
    return reader, got


def test_export_through_a_symlink_writes_its_target_and_keeps_the_link(cli, tmp_path):
    real = tmp_path / "real.py"
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "link.py"
    link.symlink_to(real)
    code, out, err = cli("export-trl", "-o", str(link))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert "GRPOTrainer" in real.read_text()
    assert stat.S_IMODE(real.stat().st_mode) == 0o750  # its own mode kept, made executable where readable
    for name in COMPANIONS:  # beside the path the user named, and printed
        assert (tmp_path / name).is_file() and f"wrote {tmp_path / name}" in out
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) & 0o044  # not private to root (umask applies)


def test_export_into_a_fifo_writes_through_and_no_companions(cli, tmp_path):
    fifo = tmp_path / "script.fifo"
    os.mkfifo(fifo)
    reader, got = read_fifo(fifo)
    code, out, err = cli("export-trl", "-o", str(fifo))
    reader.join(timeout=60)
    assert code == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced"
    assert got and b"GRPOTrainer" in got[0]
    assert not any((tmp_path / name).exists() for name in COMPANIONS)
    assert "accelerate configs not written" in " ".join(err.split()) and "--accelerate-dir" in err
    assert "GRPOTrainer" not in out  # the status lines go to stderr when the script goes to a stream


def test_export_into_a_fifo_with_an_accelerate_dir(cli, tmp_path):
    fifo, folder = tmp_path / "script.fifo", tmp_path / "accelerate"
    os.mkfifo(fifo)
    reader, got = read_fifo(fifo)
    code, _, err = cli("export-trl", "-o", str(fifo), "--accelerate-dir", str(folder))
    reader.join(timeout=60)
    assert code == 0 and got, err
    assert sorted(p.name for p in folder.iterdir()) == sorted(COMPANIONS)
    assert f"wrote {folder / COMPANIONS[0]}" in err


def test_a_symlink_to_dev_null_is_written_through(cli, tmp_path):
    link = tmp_path / "null.py"
    link.symlink_to("/dev/null")
    code, _, err = cli("export-trl", "-o", str(link))
    assert code == 0, err
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null.py"]  # no companions beside a stream


def test_a_missing_parent_folder_is_not_created(cli, tmp_path):
    target = tmp_path / "missing" / "deeper" / "x.py"
    code, _, err = cli("export-trl", "-o", str(target))
    line = " ".join(err.split())
    assert code == 2 and f"cannot write {target}" in line and "does not exist" in line, err
    assert f"mkdir -p {target.parent}" in line and "-o" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_directory_or_a_socket_is_refused_with_exit_2(cli, tmp_path):
    import socket

    sock_path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        for target, kind in ((tmp_path, "a directory"), (sock_path, "a socket")):
            code, _, err = cli("export-trl", "-o", str(target))
            assert code == 2 and f"cannot write {target}" in one_line(err) and kind in err, err
    finally:
        sock.close()
    assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.sock"]


def test_every_output_option_refuses_a_missing_parent_before_any_work(cli, tmp_path):
    missing = tmp_path / "missing"
    cases = [
        ("train", "--model", "tiny", "--steps", "1", "--out", str(missing / "run")),
        ("check", "--model", "tiny", "--save", str(missing / "c.json")),
        ("compare", "--run", str(tmp_path / "no-run"), "--html", str(missing / "c.html")),
        ("export-model", "--run", str(tmp_path / "no-run"), "--out", str(missing / "agent")),
        ("export-trl", "-o", str(tmp_path / "s.py"), "--accelerate-dir", str(missing / "acc")),
    ]
    for argv in cases:
        code, _, err = cli(*argv)
        line = " ".join(err.split())
        assert code == 2 and "does not exist" in line and f"mkdir -p {missing}" in line, (argv, err)
        assert not missing.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_check_save_through_a_symlink_keeps_the_link(cli, tmp_path):
    real = tmp_path / "report.json"
    real.write_text("{}\n")
    link = tmp_path / "link.json"
    link.symlink_to(real.name)  # relative, as `ln -s` makes it
    code, _, err = cli("check", "--model", "tiny", "--prompts", "1", "--group-size", "2", "--save", str(link))
    assert code in (0, 1), err
    assert link.is_symlink() and '"probes"' in real.read_text()


# ---- fuzz: any output target -> exit 0 or 2, no link or node replaced, no folder created -------------------------

TARGETS = st.sampled_from(
    [
        "new",  # a new file in an existing folder
        "file",  # an existing file
        "link-file",  # a symlink to an existing file
        "link-missing",  # a dangling symlink (its target's folder exists)
        "link-missing-folder",  # a dangling symlink whose target's folder does not exist
        "link-null",  # a symlink to /dev/null
        "link-dir",  # a symlink to a folder
        "loop",  # a symlink to itself
        "dir",  # an existing folder
        "missing-parent",
        "file-parent",  # a regular file where the folder should be
        "socket",
    ]
)


def make_target(folder: Path, kind: str) -> Path:
    import socket

    target = folder / "out.py"
    if kind == "file":
        target.write_text("old\n")
    elif kind == "link-file":
        (folder / "real.py").write_text("old\n")
        target.symlink_to("real.py")
    elif kind == "link-missing":
        target.symlink_to(folder / "real.py")
    elif kind == "link-missing-folder":
        target.symlink_to(folder / "nowhere" / "real.py")
    elif kind == "link-null":
        target.symlink_to("/dev/null")
    elif kind == "link-dir":
        (folder / "sub").mkdir()
        target.symlink_to("sub")
    elif kind == "loop":
        target.symlink_to("out.py")
    elif kind == "dir":
        target.mkdir()
    elif kind == "missing-parent":
        target = folder / "nowhere" / "out.py"
    elif kind == "file-parent":
        (folder / "plain").write_text("x")
        target = folder / "plain" / "out.py"
    elif kind == "socket":
        socket.socket(socket.AF_UNIX).bind(str(target))  # closed at once; the socket file stays
    return target


def tree(folder: Path) -> dict[str, tuple[int, str | None]]:
    """Every entry under `folder`: its kind (lstat mode) and, for a link, where it points."""
    return {
        str(p.relative_to(folder)): (stat.S_IFMT(p.lstat().st_mode), os.readlink(p) if p.is_symlink() else None)
        for p in folder.rglob("*")
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=TARGETS, standalone=st.booleans())
def test_fuzz_output_targets_exit_0_or_2_and_replace_nothing(tmp_path, kind, standalone):
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    target = make_target(folder, kind)
    before = tree(folder)
    code, _ = run_cli("export-trl", "-o", str(target), *(["--standalone"] if standalone else []))
    assert code in (0, 2), kind
    after = tree(folder)
    for name, (mode, link) in before.items():  # nothing that was there changed kind, no link re-pointed
        assert after.get(name) == (mode, link), (kind, name)
    new = set(after) - set(before)
    assert not any(after[n][0] == stat.S_IFDIR for n in new), (kind, new)  # no folder created
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    if code == 0:
        assert "GRPOTrainer" in Path(os.path.realpath(target)).read_text() or kind == "link-null"
    if kind in ("dir", "link-dir", "missing-parent", "file-parent", "socket", "loop", "link-missing-folder"):
        assert code == 2, kind


def test_the_labs_own_runs_folder_is_made_one_level_and_nothing_else(tmp_path, monkeypatch):
    """`--out runs/NAME` (the README's form) works in a fresh clone; any other missing folder is the user's to make."""
    from grpolab.cli.train import _run_out
    from grpolab.errors import UserError

    monkeypatch.chdir(tmp_path)
    _run_out(Path("runs/first"))
    assert (tmp_path / "runs").is_dir() and not (tmp_path / "runs" / "first").exists()
    for other in ("other/first", "deep/runs/first"):
        with pytest.raises(UserError, match="mkdir -p"):
            _run_out(Path(other))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
