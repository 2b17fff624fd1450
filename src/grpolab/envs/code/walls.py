"""The walls around the answer process: namespaces, a minimal read-only root, no privileges, a subreaper.

Called by `harness.py` (the sandboxed process) before any model code runs; standard library only, system calls
through ctypes (Python 3.11 has no `os.unshare`). Every step is tried on its own and recorded in a `Report`: what
worked goes to `layers` with what it means here, what did not goes to `missing` with the kernel's reason, so that
a machine allowing less (no user namespaces, no mounts) gets a weaker sandbox with an honest label, never a crash.

Departures from the usual container recipe, and why:
- no `/proc` in the new root at all (nothing in a plain Python function needs it), and no `/etc`;
- the only host paths visible are the standard library's directories and the system library directory (extension
  modules such as `_hashlib` load their shared libraries lazily), bind-mounted read-only at their own paths so that
  `sys.path` stays valid; the working directory is a small private tmpfs;
- as root we drop to uid/gid 65534 rather than keep a user namespace's root, so a kernel bug in a namespaced
  capability check has nothing to work with; as an ordinary user the user namespace is the only way to mount.
"""

from __future__ import annotations

import ctypes
import os
import signal
import stat
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MNT_DETACH = 2
# flags a bind mount inherits from its source and that an unprivileged remount may not clear (statvfs f_flag bits
# have the same values as the MS_ flags)
LOCKED_FLAGS = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME | MS_RELATIME

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

NOBODY = 65534
SYSCALLS = {
    "x86_64": {"pivot_root": 155, "capget": 125, "capset": 126},
    "aarch64": {"pivot_root": 41, "capget": 90, "capset": 91},
}
CAP_VERSION_3 = 0x20080522
DEVICES = ("null", "zero", "urandom", "random")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.syscall.restype = ctypes.c_long


class Report:
    """Which layers are in force (name -> what it means here) and which are not (name -> why not)."""

    def __init__(self, without: list[str] | tuple[str, ...] = ()):
        self.layers: dict[str, str] = {}
        self.missing: dict[str, str] = {}
        self.without = set(without)
        self.user_namespace = False

    def wanted(self, name: str) -> bool:
        if name in self.without:
            self.missing[name] = "left out on request (Limits.without)"
            return False
        return True

    def ok(self, name: str, detail: str) -> None:
        self.layers[name] = detail
        self.missing.pop(name, None)

    def fail(self, name: str, why: object) -> None:
        self.missing[name] = str(why)[:200]

    def as_dict(self) -> dict:
        return {"layers": dict(self.layers), "missing": dict(self.missing)}


def _call(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _syscall(name: str, *args: object) -> int:
    number = SYSCALLS.get(os.uname().machine, {}).get(name)
    if number is None:
        raise OSError(38, f"{name}: no syscall number for {os.uname().machine}")
    return _libc.syscall(number, *args)


def unshare(flags: int) -> None:
    _call(_libc.unshare(flags), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    _call(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def prctl(option: int, arg: int = 0) -> None:
    _call(_libc.prctl(option, arg, 0, 0, 0), f"prctl({option})")


def set_dumpable(flag: bool) -> None:
    """Not dumpable: processes of the same user can no longer ptrace this one or open its /proc files."""
    prctl(PR_SET_DUMPABLE, int(flag))


# ---- the keeper (before the fork): subreaper and the namespaces the worker is born into -------------------------


def become_subreaper(report: Report) -> None:
    """Orphans of the answer's process tree are re-parented here (not to init), so `kill_tree` can reach them."""
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        report.ok("subreaper", "orphaned descendants come back to the sandbox's keeper, which kills them")
    except OSError as exc:
        report.fail("subreaper", exc)


def enter_namespaces(report: Report) -> None:
    """A user namespace when not root (the only way to mount then), then PID, network, IPC and UTS namespaces."""
    if os.geteuid() != 0 and report.wanted("user_namespace"):
        uid, gid = os.geteuid(), os.getegid()
        try:
            unshare(CLONE_NEWUSER)
            for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
            report.user_namespace = True
            report.ok("user_namespace", f"root inside a user namespace that maps only uid {uid}")
        except OSError as exc:
            report.fail("user_namespace", exc)
    for name, flag, detail in (
        ("pid_namespace", CLONE_NEWPID, "the answer is PID 1 of its own PID namespace: every process dies with it"),
        ("network_namespace", CLONE_NEWNET, "an empty network namespace: no interface, not even loopback up"),
        ("ipc_namespace", CLONE_NEWIPC, "its own System V IPC and POSIX message queues"),
        ("uts_namespace", CLONE_NEWUTS, "its own hostname"),
    ):
        if report.wanted(name):
            try:
                unshare(flag)
                report.ok(name, detail)
            except OSError as exc:
                report.fail(name, exc)


# ---- the worker (after the fork): its own mount namespace and root, then no privileges --------------------------


def readable_paths() -> list[str]:
    """Host directories the answer process needs: the standard library and the system library directory."""
    paths = [os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)]
    libc = _mapped("/libc.so") or _mapped("/libc-")
    if libc:
        paths.append(os.path.dirname(os.path.realpath(libc)))
    out: list[str] = []
    for p in sorted(set(paths), key=len):  # a directory inside one already bound comes with it
        if not any(p == q or p.startswith(q + os.sep) for q in out):
            out.append(p)
    return out


def _mapped(fragment: str) -> str | None:
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(maxsplit=5)[-1].strip()
                if fragment in path and path.startswith("/"):
                    return path
    except OSError:
        pass
    return None


def build_root(report: Report, root: str, box_mb: int) -> bool:
    """Enter a new mount namespace whose root is a read-only tmpfs holding only `readable_paths()` (read-only),
    a few devices and a writable /box; the old root is detached. True when it worked."""
    if not report.wanted("mount_namespace"):
        return False
    try:
        unshare(CLONE_NEWNS)
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
        paths = readable_paths()
        for path in paths:
            target = root + path
            os.makedirs(target, exist_ok=True)
            mount(path, target, None, MS_BIND | MS_REC)
            locked = os.statvfs(path).f_flag & LOCKED_FLAGS
            mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | locked)
            site = os.path.join(target, "site-packages")
            if os.path.isdir(site):  # not on sys.path (python -S), and not worth showing either
                mount("tmpfs", site, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")
        for name in os.listdir("/"):  # keep the host's top-level symlinks (lib -> usr/lib) so library paths resolve
            if os.path.islink("/" + name) and not os.path.lexists(os.path.join(root, name)):
                os.symlink(os.readlink("/" + name), os.path.join(root, name))
        os.makedirs(root + "/dev")
        for dev in DEVICES:
            if os.path.exists("/dev/" + dev):
                open(f"{root}/dev/{dev}", "w").close()
                mount("/dev/" + dev, f"{root}/dev/{dev}", None, MS_BIND)
        os.makedirs(root + "/box")
        mount("tmpfs", root + "/box", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"size={box_mb}m,mode=0777")
        os.makedirs(root + "/.old")
        _call(_syscall("pivot_root", os.fsencode(root), os.fsencode(root + "/.old")), "pivot_root")
        os.chdir("/")
        _call(_libc.umount2(b"/.old", MNT_DETACH), "umount /.old")
        os.rmdir("/.old")
        mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.chdir("/box")
    except OSError as exc:
        report.fail("mount_namespace", exc)
        return False
    shown = ", ".join(paths)
    report.ok("mount_namespace", f"a private root: read-only {shown}, /dev/null and friends, a {box_mb} MB /box")
    return True


def _stdlib_open_to_all(paths: list[str]) -> bool:
    """Can uid 65534 reach these directories (every parent searchable by 'other')?"""
    for path in paths:
        parts = path.split(os.sep)
        for i in range(2, len(parts) + 1):
            try:
                mode = os.stat(os.sep.join(parts[:i])).st_mode
            except OSError:
                return False
            if not mode & stat.S_IXOTH or not mode & stat.S_IROTH:
                return False
    return True


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def capabilities() -> int:
    """This process's effective | permitted capability bits (all 64), or -1 when capget fails."""
    header, data = _CapHeader(CAP_VERSION_3, 0), (_CapData * 2)()
    if _syscall("capget", ctypes.byref(header), ctypes.byref(data)) != 0:
        return -1
    return sum((d.effective | d.permitted) << (32 * i) for i, d in enumerate(data))


def _drop_capabilities() -> None:
    for cap in range(64):  # the bounding set first: dropping needs CAP_SETPCAP, which capset removes
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header, data = _CapHeader(CAP_VERSION_3, 0), (_CapData * 2)()
    _call(_syscall("capset", ctypes.byref(header), ctypes.byref(data)), "capset")


def drop_privileges(report: Report, fs_hidden: bool, box: str) -> None:
    """Root: become uid/gid 65534 (where it can still import the standard library). Everyone: no capabilities."""
    if not report.wanted("unprivileged"):
        return
    kept_root = ""
    try:
        if os.geteuid() == 0 and not report.user_namespace:
            if fs_hidden or _stdlib_open_to_all(readable_paths()):
                if not fs_hidden:
                    os.chown(box, NOBODY, NOBODY)
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            else:
                kept_root = "still uid 0 (capabilities dropped): uid 65534 could not import the standard library here"
        _drop_capabilities()
        caps = capabilities()
        if caps != 0:
            raise OSError(1, f"capabilities left: {caps:#x}")
    except OSError as exc:
        report.fail("unprivileged", exc)
        return
    if kept_root:
        report.fail("unprivileged", kept_root)
    elif report.user_namespace:
        report.ok("unprivileged", "no capabilities (root only inside the user namespace, an ordinary user outside)")
    elif os.getuid() == NOBODY:
        report.ok("unprivileged", f"uid/gid {NOBODY}, no supplementary groups, no capabilities")
    else:
        report.ok("unprivileged", f"no capabilities, but uid {os.getuid()}: the trainer's own user")


def die_with_parent() -> None:
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


# ---- killing the whole tree -----------------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`, from /proc (no CONFIG_PROC_CHILDREN needed)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid: int, rounds: int = 20) -> None:
    """SIGKILL everything below `pid` (this process when it is a subreaper) and reap, until nothing is left."""
    for _ in range(rounds):  # a process may fork while we look: look again until nothing is left
        found = descendants(pid)
        for child in found:
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if not found:
            return
        time.sleep(0.01)
