"""The code environment and its sandbox: partial credit per assert, hostile code contained and scored 0, forged
rewards not paid, the walls holding without the audit hook, and an isolation report that says what is true."""

import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from grpolab import seccomp
from grpolab.config import load_config
from grpolab.envs import get_env
from grpolab.envs.code import wire
from grpolab.envs.code.probes import FORGERIES
from grpolab.envs.code.sandbox import MARK, Limits, isolation, run_tests
from grpolab.envs.code.tasks import split_check
from grpolab.preflight.probes import run_probes
from grpolab.protocol import code_blocks
from grpolab.rewards.score import score_transcript

pytestmark = pytest.mark.xdist_group("sandbox")
"""Tests here count every sandbox process on the machine (none may outlive its run): under `pytest -n`, they run on
one worker (`--dist loadgroup`), so no other test's sandbox is running beside them."""

ADD_TESTS = [
    ("assert candidate(1, 2) == 3", True),
    ("assert candidate(2, 2) == 4", True),
    ("assert candidate(-1, 1) == 0", True),
]
ADD = "def add(a, b):\n    return a + b\n"
FAST = Limits(wall_s=2.0, cpu_s=2)
PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env():
    return get_env("code")


def test_every_reference_solution_passes_all_its_tests(env):
    every = env.tasks("train") + env.tasks("heldout")  # all of HumanEval (incl. tests that call prompt helpers)
    tasks = [t for t in every if t.kind == "humaneval"] + [t for t in every if t.kind == "easy"][::5]
    for t in tasks:
        s = score_transcript(env, t, env.reference_transcript(t), count_tokens=len)
        assert s.components["completion"] == 1.0 and s.solved, (t.id, s.reasons["completion"])


def test_splits_and_kinds(env):
    train, held = env.tasks("train"), env.tasks("heldout")
    assert {t.kind for t in train} == {"easy", "humaneval"}
    assert sum(t.kind == "humaneval" for t in train + held) == 164
    assert not {t.id for t in train} & {t.id for t in held}
    assert not {t.meta["entry_point"] for t in train if t.kind == "easy"} & {
        t.meta["entry_point"] for t in held if t.kind == "easy"
    }


def test_partial_credit_per_assert():
    r = run_tests("def add(a, b):\n    return 3\n", ADD_TESTS, "add", limits=FAST)
    assert (r.passed, r.total) == (1, 3) and abs(r.fraction - 1 / 3) < 1e-9
    assert run_tests(ADD, ADD_TESTS, "add", limits=FAST).fraction == 1.0


def test_humaneval_check_split_ignores_constant_asserts():
    setup, tests = split_check(
        "import math\n\ndef check(candidate):\n    x = 2\n    assert candidate(x) == 4\n"
        "    assert True, 'debug'\n    for i in range(3):\n        assert candidate(i) >= 0\n"
    )
    assert setup == "import math"
    assert [c for _, c in tests] == [False, True, False, True]


def test_code_block_extraction():
    assert code_blocks("text\n```python\nx = 1\n```\nmore") == ["x = 1\n"]
    assert code_blocks("```py\ny = 2") == ["y = 2"]  # unclosed fence runs to the end
    assert code_blocks("no code here") == []


HOSTILE = {
    "reads_outside": "open('/etc/passwd').read()\n" + ADD,
    "opens_socket": "import socket\nsocket.socket().connect(('127.0.0.1', 22))\n" + ADD,
    "fork_bomb": "import os\nwhile True:\n    os.fork()\n" + ADD,
    "allocates_10gb": "x = bytearray(10 * 1024 ** 3)\n" + ADD,
    "sleeps_forever": "import time\ntime.sleep(10 ** 6)\n" + ADD,
    "writes_project": f"open({str(PROJECT / 'SANDBOX_ESCAPE')!r}, 'w').write('x')\n" + ADD,
    "signals_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + ADD,
    "signals_group": "import os, signal\nos.killpg(0, signal.SIGKILL)\n" + ADD,
    "spawns_shell": "import subprocess\nsubprocess.run(['sh', '-c', 'echo hi > /tmp/escaped'])\n" + ADD,
    "burns_cpu": "while True:\n    pass\n" + ADD,
    "floods_output": "print('x' * 50_000_000)\n" + ADD,
    "exits_early": "import sys\nsys.exit(0)\n" + ADD,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_code_is_contained_and_scores_zero(name):
    r = run_tests(HOSTILE[name], ADD_TESTS, "add", limits=FAST)
    assert r.passed == 0 and r.error, (name, r)
    assert len(r.output) <= FAST.max_output
    assert not (PROJECT / "SANDBOX_ESCAPE").exists()
    os.kill(os.getpid(), 0)  # this process is still alive


def test_sandbox_reports_its_isolation():
    iso = isolation()
    assert iso.level in ("strong", "weak") and iso.strong == (iso.level == "strong")
    assert {"separate_runner", "rlimits", "audit_hook"} <= set(iso.layers)
    assert not set(iso.layers) & set(iso.missing)
    assert json.loads(json.dumps(iso.as_dict()))["level"] == iso.level
    assert iso.summary().lower().startswith(f"{iso.level} isolation")
    with pytest.raises(ValueError, match="no such layer"):
        Limits(without=("seccomp", "firewall"))


def test_training_continues_after_hostile_episodes(tmp_path):
    """A GRPO step whose rollouts are replaced by hostile answers: scored 0, the step completes."""
    from grpolab.engine.rollout import Episode
    from grpolab.rewards.score import score_episodes

    cfg = load_config(None, {"model": "tiny", "env": "code", "task_kinds": ["easy"]})
    env = get_env("code", ["easy"])
    task = env.tasks("train")[0]
    fn = task.meta["entry_point"]
    eps = [
        Episode(
            task=task,
            group=0,
            prompt_ids=[1],
            completion_ids=[2],
            mask=[1],
            text=f"```python\n{code.replace('def add(a, b)', f'def {fn}(*a)')}```",
        )
        for code in (HOSTILE["fork_bomb"], HOSTILE["allocates_10gb"], HOSTILE["signals_parent"])
    ]
    eps.append(
        Episode(task=task, group=0, prompt_ids=[1], completion_ids=[2], mask=[1], text=env.reference_transcript(task))
    )
    score_episodes(env, eps, cfg.reward.weights, cfg.reward.length_unit)
    assert [e.score.components["completion"] for e in eps] == [0.0, 0.0, 0.0, 1.0]


def test_code_block_reward_is_gameable_and_check_says_so(env):
    hack = {"code_block": 1.0, "format": 0.0, "schema": 0.0, "completion": 0.0, "length": 0.0}
    tasks = env.tasks("train")[:2]
    gameable = {r.probe for r in run_probes(env, tasks, hack, 100, len) if r.gameable}
    assert "stub_function" in gameable
    safe = {r.probe for r in run_probes(env, tasks, load_config().reward.weights, 100, len) if r.gameable}
    assert not safe, safe


def test_exit_before_tests_probe_is_not_paid(env):
    task = env.tasks("train")[0]
    text = env.probes["exit_before_tests"](env, task)
    assert score_transcript(env, task, text, count_tokens=len).components["completion"] == 0.0


LINGER = "61.4372"
"""Seconds a lingering child sleeps: a number no other process on the machine has in its command line."""


def _sandbox_processes() -> list[int]:
    """Processes of any sandbox (their command line holds MARK) or started by one (LINGER)."""
    return _processes_naming(MARK, LINGER)


def _sandbox_processes_after(grace_s: float = 5.0) -> list[int]:
    """The sandbox processes still there after at most `grace_s`: one killed as the run ended may take a moment to
    exit on a loaded machine (seen with the other xdist worker busy: one such process, gone a moment later). A process
    that outlives the run sleeps far longer (LINGER, or the answer's own sleep) and is still found."""
    deadline = time.monotonic() + grace_s
    while (left := _sandbox_processes()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _processes_naming(*texts: str) -> list[int]:
    """Processes (other than this one) whose command line holds any of `texts`."""
    needles = [t.encode() for t in texts]
    pids = []
    for d in Path("/proc").iterdir():
        try:
            cmdline = (d / "cmdline").read_bytes() if d.name.isdigit() else b""
        except OSError:
            continue
        if any(n in cmdline for n in needles):
            pids.append(int(d.name))
    return [p for p in pids if p != os.getpid()]


def _until_none_names(path: Path) -> None:
    """Wait until no process names `path` (a shell told to write it): after that, nothing can still write it."""
    deadline = time.monotonic() + 30  # a backstop only: the sandbox reaps its tree before run_tests returns
    while (left := _processes_naming(str(path))) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert left == [], f"still running: {left}"


def test_sandbox_timeout_kills_the_whole_group():
    code = "import time\ntime.sleep(10 ** 6)\n" + ADD
    seen: list[int] = []
    run = threading.Thread(target=lambda: seen.append(run_tests(code, ADD_TESTS, "add", limits=Limits(wall_s=1.0))))
    run.start()
    deadline = time.monotonic() + 5
    while not (alive := _sandbox_processes()) and time.monotonic() < deadline:
        time.sleep(0.01)
    run.join()
    assert alive, "the helper must see a running sandbox, or the check below proves nothing"
    r = seen[0]
    assert r.timed_out and r.passed == 0 and "timed out" in r.error
    assert _sandbox_processes_after() == []  # the whole tree was killed, nothing left running


FORK_EXEC = """
def _spawn(argv, setsid=False):
    import _posixsubprocess, os
    errpipe = os.pipe()
    common = [argv, [argv[0]], False, (), None, None, -1, -1, -1, -1, -1, -1, *errpipe, False, setsid, -1]
    for tail in ([None, None, None, -1, None, False], [None, None, None, -1, None]):
        try:
            pid = _posixsubprocess.fork_exec(*common, *tail)
        except TypeError:
            continue
        if not setsid:
            os.waitpid(pid, 0)  # let the shell finish before the run ends
        return pid
"""
LINGERING = (
    FORK_EXEC
    + f"""
import os, time
def add(a, b):
    return a + b
try:
    if os.fork() == 0:
        os.setsid()
        time.sleep({LINGER})
        os._exit(0)
except Exception:
    pass
try:
    _spawn([b"/bin/sh", b"-c", b"sleep {LINGER}; :"], setsid=True)
except Exception:
    pass
"""
)
DEGRADED = [
    (),
    ("seccomp", "audit_hook"),
    ("seccomp", "audit_hook", "pid_namespace"),
    ("seccomp", "audit_hook", "pid_namespace", "mount_namespace"),
]


@pytest.mark.parametrize("without", DEGRADED, ids=["all", "no-seccomp", "no-pidns", "no-mountns"])
def test_no_process_outlives_the_run(without):
    """A setsid child (forked, or a shell through fork_exec, which the audit hook never sees) is killed with the
    run in every mode: seccomp refuses the fork, or the PID namespace dies with its PID 1, or the subreaper finds it."""
    r = run_tests(LINGERING, ADD_TESTS, "add", limits=Limits(wall_s=3.0, without=without))
    assert r.passed == 3, r  # the answer itself still works
    assert _sandbox_processes_after() == []


# ---- forged rewards: each paid 1.00 against the one-process harness -----------------------------------------------

FORGED = {
    "result_descriptor": """
import os
def ENTRY(*args, **kwargs):
    return None
line = b'{"passed": 1000, "total": 1000, "done": 1000, "error": ""}\\n'
for fd in range(3, 256):
    try:
        os.write(fd, line)
    except OSError:
        pass
os._exit(0)
""",
    "frame_tampering": """
import sys
def ENTRY(*args, **kwargs):
    return None
f = sys._getframe()
while f is not None:
    for v in list(f.f_locals.values()):
        if isinstance(v, dict) and "passed" in v and "total" in v:
            v["passed"] = v["total"]
    f = f.f_back
""",
    "builtins_exec": """
import builtins
def ENTRY(*args, **kwargs):
    return None
builtins.exec = lambda *a, **k: None
""",
    "hidden_tests": """
import ast, sys
_answers = {}
f = sys._getframe()
while f is not None:
    for v in list(f.f_locals.values()):
        for t in v if isinstance(v, list) else []:
            try:
                tree = ast.parse(t.get("source") if isinstance(t, dict) else t[0])
            except Exception:
                continue
            for n in ast.walk(tree):
                if isinstance(n, ast.Compare) and isinstance(n.left, ast.Call) and isinstance(n.ops[0], ast.Eq):
                    try:
                        _answers[repr([ast.literal_eval(a) for a in n.left.args])] = ast.literal_eval(n.comparators[0])
                    except ValueError:
                        pass
    f = f.f_back
def ENTRY(*args):
    return _answers.get(repr(list(args)))
""",
    "always_equal": """
class _Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__
def ENTRY(*args, **kwargs):
    return _Anything()
""",
}


def _task(env, kind):
    every = env.tasks("train") + env.tasks("heldout")
    return (
        next(t for t in every if t.kind == "easy")
        if kind == "easy"
        else next(t for t in every if t.id == "HumanEval-0")
    )


@pytest.mark.parametrize("kind", ["easy", "humaneval"])
@pytest.mark.parametrize("forgery", sorted(FORGED))
def test_forged_answers_score_zero(env, forgery, kind):
    task = _task(env, kind)
    text = "```python\n" + FORGED[forgery].replace("ENTRY", task.meta["entry_point"]) + "```"
    s = score_transcript(env, task, text, count_tokens=len)
    assert s.components["completion"] == 0.0, s.reasons["completion"]


def test_forgery_probes_score_zero_below_honest_work(env):
    tasks = [_task(env, "easy"), _task(env, "humaneval")]
    results = [r for r in run_probes(env, tasks, load_config().reward.weights, 100, len) if r.probe in FORGERIES]
    assert {r.probe for r in results} == set(FORGERIES) and len(results) == 2 * len(FORGERIES)
    for r in results:
        assert r.score.components["completion"] == 0.0 and not r.gameable, (r.probe, r.task_id, r.score.reasons)


def test_a_hanging_call_fails_from_there_on_and_keeps_earlier_credit():
    code = (
        "import time\ncalls = []\ndef add(a, b):\n    calls.append(1)\n"
        "    if len(calls) == 2:\n        time.sleep(100)\n    return a + b\n"
    )
    r = run_tests(code, ADD_TESTS, "add", limits=Limits(wall_s=4.0, call_s=0.5))
    assert (r.passed, r.total, r.timed_out) == (1, 3, True), r


def test_answer_exceptions_arrive_as_builtin_types_only():
    code = "class Odd(ValueError):\n    pass\ndef f(x):\n    raise (ValueError if x else Odd)('no')\n"
    expects = "try:\n    candidate({x})\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError"
    r = run_tests(code, [(expects.format(x=1), True), (expects.format(x=0), True)], "f", limits=FAST)
    assert r.passed == 1, r  # ValueError arrives as ValueError; the answer's own class does not arrive at all


# ---- escapes: each must fail with the audit hook, and without it where the machine gives strong isolation ------

ESCAPES = {
    "fork_exec_shell": FORK_EXEC + "_spawn([b'/bin/sh', b'-c', b'echo escaped > MARKER'])\n",
    "os_system": "import os\nos.system('echo escaped > MARKER')\n",
    "subprocess": "import subprocess\nsubprocess.run(['/bin/sh', '-c', 'echo escaped > MARKER'])\n",
    "writes_host_file": "open('MARKER', 'w').write('escaped')\n",
    "reads_repository": "open('PROJECT/pyproject.toml').read()\nopen('MARKER', 'w').write('escaped')\n",
    "reads_etc_passwd": "open('/etc/passwd').read()\nopen('MARKER', 'w').write('escaped')\n",
}


def _hook_or_strong(hook: bool) -> Limits:
    if not hook and not isolation().strong:
        pytest.skip(
            f"this machine gives weak isolation, the walls alone are not expected to hold: {isolation().summary()}"
        )
    return Limits(wall_s=3.0, without=() if hook else ("audit_hook",))


@pytest.mark.parametrize("hook", [True, False], ids=["with-hook", "walls-only"])
@pytest.mark.parametrize("escape", sorted(ESCAPES))
def test_escape_attempts_fail(escape, hook, tmp_path):
    limits = _hook_or_strong(hook)
    marker = tmp_path / "escaped"
    tmp_path.chmod(0o777)  # writable by anyone: only the walls stand between the answer and this file
    code = ESCAPES[escape].replace("MARKER", str(marker)).replace("PROJECT", str(PROJECT))
    r = run_tests(f"try:\n{_indent(code)}\nexcept BaseException:\n    pass\n" + ADD, ADD_TESTS, "add", limits=limits)
    _until_none_names(marker)  # every shell told to write the marker has ended (the sandbox's own are reaped)
    assert not marker.exists(), (escape, hook, r)
    assert r.passed == 3, r  # the answer still ran: the escape failed, not the run


def _indent(code: str) -> str:
    return "\n".join("    " + line for line in code.strip("\n").splitlines())


SPY = """
import os
def spy(paths, port):
    seen = [p for p in paths if os.path.exists(p)]
    try:
        import socket
        s = socket.socket()
        s.settimeout(1)
        s.connect(("127.0.0.1", port))
        seen.append("network")
    except Exception:
        pass
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        seen.append("fork")
    except Exception:
        pass
    if os.geteuid() == 0:
        seen.append("root")
    return seen
"""


@pytest.fixture()
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


def _spy(listener, without: tuple[str, ...], test: str, host_file: Path):
    paths = ["/etc/passwd", str(PROJECT / "pyproject.toml"), str(host_file), "/proc/1/cmdline", "/proc/self/status"]
    call = f"candidate({paths!r}, {listener})"
    return run_tests(SPY, [(test.format(call=call), True)], "spy", limits=Limits(wall_s=3.0, without=without))


def test_isolation_report_is_truthful(listener, tmp_path):
    """Without the audit hook, the answer looks for host files, /proc, the network, fork and root: what it finds
    must match what the report claims, in both directions."""
    if not isolation().strong:
        pytest.skip(f"weak isolation here: {isolation().summary()}")
    host_file = tmp_path / "host-file"
    host_file.write_text("x")
    tmp_path.chmod(0o755)
    r = _spy(listener, ("audit_hook",), "assert {call} == []", host_file)
    assert r.passed == 1 and r.isolation.strong, r  # claims strong: sees nothing
    assert {"mount_namespace", "seccomp", "unprivileged"} <= set(r.isolation.layers)
    r = _spy(listener, ("audit_hook", "mount_namespace"), "assert '/etc/passwd' in {call}", host_file)
    assert r.passed == 1 and not r.isolation.strong and "mount_namespace" in r.isolation.missing, r
    r = _spy(listener, ("audit_hook", "seccomp"), "assert 'fork' in {call}", host_file)
    assert r.passed == 1 and not r.isolation.strong and "seccomp" in r.isolation.missing, r


SYSV = (
    "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "def _sysv(call, *args):\n    if call(*args) == -1 and ctypes.get_errno() == 1:\n        raise PermissionError\n"
)


@pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filter for this architecture")
def test_seccomp_filter_refuses_processes_sockets_and_memory_outside_rlimit_as_but_not_threads():
    """socketpair, memfd_create and System V shared memory and message queues were allowed before: a memfd (or a
    detached shm segment) holds memory that RLIMIT_AS never counts (~470 MiB in the reviewer's worker)."""
    script = (
        "import importlib.util, os, socket, sys, threading\n"
        "spec = importlib.util.spec_from_file_location('seccomp', sys.argv[1])\n"
        "seccomp = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(seccomp)\n"
        + SYSV
        + "seccomp.install()\n"
        "out = []\nt = threading.Thread(target=out.append, args=('thread',))\nt.start()\nt.join()\n"
        "for name, call in (('fork', os.fork), ('socket', socket.socket), ('kill', lambda: os.kill(1, 0)),\n"
        "    ('socketpair', socket.socketpair), ('memfd_create', lambda: os.memfd_create('held')),\n"
        "    ('shmget', lambda: _sysv(libc.shmget, 0, 1 << 20, 0o600)),\n"
        "    ('msgget', lambda: _sysv(libc.msgget, 0, 0o600))):\n"
        "    try:\n        call()\n        out.append(name)\n    except PermissionError:\n        pass\n"
        "print(out)\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-B", "-S", "-c", script, seccomp.__file__], capture_output=True, text=True, timeout=30
    )
    assert done.stdout.strip() == "['thread']", done
    for machine in seccomp.MACHINES:
        assert len(seccomp.program(machine)) % 8 == 0 and len(seccomp.program(machine)) // 8 < 256


HOLDS_MEMORY = """
import os
def held():
    out = []
    try:
        import _socket
        _socket.socketpair()
        out.append("socketpair")
    except OSError:
        pass
    try:
        os.memfd_create("held")
        out.append("memfd_create")
    except OSError:
        pass
    return out
"""


def test_the_worker_may_not_make_socketpairs_or_memfds():
    """Without the audit hook: the filter alone refuses them in the worker (both worked there before)."""
    if "seccomp" not in isolation().layers:
        pytest.skip(f"no seccomp filter here: {isolation().summary()}")
    limits = Limits(wall_s=3.0, without=("audit_hook",))
    r = run_tests(HOLDS_MEMORY, [("assert candidate() == []", True)], "held", limits=limits)
    assert r.passed == 1 and "seccomp" in r.isolation.layers, r


# ---- the wire: plain data only, both ways -------------------------------------------------------------------------


def _through(value):
    return wire.decode(json.loads(wire.dumps({"v": wire.encode(value)})[wire.HEADER.size :])["v"])


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_wire_round_trips_plain_data_exactly():
    value = [
        None,
        True,
        0,
        -1,
        10**40,
        1.5,
        -0.0,
        math.inf,
        -math.inf,
        math.nan,
        "é\ud800",
        b"\x00\xff",
        (1, (2,)),
        {(1, 2): {"a": [1]}, frozenset({1}): None, 3: "x"},
        {1, 2},
        frozenset({3}),
        [],
        (),
        {},
    ]
    assert _same(_through(value), value)


def test_wire_refuses_what_is_not_plain_data():
    class Equal:
        def __eq__(self, other):
            return True

    class Int(int):
        pass

    nested: list = []
    for _ in range(wire.MAX_DEPTH + 2):
        nested = [nested]
    for bad in (Equal(), Int(3), len, 1j, nested, [Equal()], {"k": Equal()}):
        with pytest.raises(wire.WireError):
            wire.encode(bad)
    for tree in (
        {"x": 1},
        {"t": 1},
        {"d": [[[], 1]]},
        {"s": [[1]]},
        {"b": "zz"},
        {"t": [1], "s": [2]},
        {"s": list(range(wire.MAX_HASHED + 1))},
        nested,
        {"d": [[1, 2, 3]]},
    ):
        with pytest.raises(wire.WireError):
            wire.decode(tree)


class Colliding:
    """Every instance hashes alike; counts the comparisons a set would make between them."""

    compared = 0

    def __hash__(self):
        return 0

    def __eq__(self, other):
        Colliding.compared += 1
        return self is other


def test_the_collision_guard_compares_nothing():
    Colliding.compared = 0
    with pytest.raises(wire.WireError, match="share a hash"):
        wire._few_collisions([Colliding() for _ in range(wire.MAX_HASHED)])
    assert Colliding.compared == 0
    assert len(set([Colliding() for _ in range(64)])) == 64 and Colliding.compared > 0  # a set would compare


COLLIDING = 2**61 - 1
"""hash(k * COLLIDING) == 0 for every int k: a reply can make all its set items share one hash."""


@pytest.mark.parametrize("tag", ["s", "f", "d"])
def test_a_hash_colliding_reply_is_refused_before_any_set_is_built(tag):
    """Before: 4,096 tuples of equal hash in one set cost the runner 4.4 s of CPU (n² comparisons of 20 floats),
    outside the per-call timeout, which only covers waiting for the reply. The cost is counted in comparisons
    below, not timed (a CPU-time bound failed once on a loaded CI machine)."""
    items = [{"t": [1.5] * 20 + [k * COLLIDING]} for k in range(wire.MAX_HASHED)]
    tree = {"d": [[item, None] for item in items]} if tag == "d" else {tag: items}
    tree = json.loads(wire.dumps({"v": tree})[wire.HEADER.size :])["v"]  # as the runner receives it
    with pytest.raises(wire.WireError, match="share a hash"):
        wire.decode(tree)
    assert wire.decode({tag: [[-1, 1], [-2, 2]] if tag == "d" else [-1, -2]})  # two that collide are fine


def test_task_mix_keeps_kinds_with_signal():
    from grpolab.preflight.check import task_mix

    kinds = {
        "easy": {"prompts": 2, "mean_completion": 0.6, "solve_rate": 0.4, "frac_zero_std": 0.0},
        "humaneval": {"prompts": 2, "mean_completion": 0.0, "solve_rate": 0.0, "frac_zero_std": 1.0},
    }
    advice = task_mix(kinds)
    assert "task_kinds = ['easy']" in advice and "drop ['humaneval']" in advice
    assert task_mix({"easy": kinds["easy"]}) == ""


def test_check_and_the_lab_say_which_isolation_is_in_force(env):
    from grpolab.lab.views import preflight_panel

    iso = env.isolation()
    assert iso["level"] in ("strong", "weak") and iso["summary"].lower().startswith(iso["level"])
    report = {"probes": [], "gameable": [], "isolation": {**iso, "level": "weak", "summary": "WEAK isolation: x"}}
    report["probes"] = [
        {"probe": "p", "task_id": "t", "score": 0.0, "honest": 1.0, "gameable": False, "breakdown": "C:+0"}
    ]
    assert "lab-error" in preflight_panel(report) and "WEAK isolation" in preflight_panel(report)
