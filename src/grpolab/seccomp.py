"""Seccomp-BPF filters, written by hand and installed through ctypes: the sandbox's wall and the tools' leash.

Two filters, both standard library only (the sandbox starts without site-packages and compiles this file itself,
`envs/code/sandbox.py`). libseccomp would be the usual tool, but it is not in the standard library, and the filters
are small enough to write and test directly.

- `program()`: loaded by the sandboxed answer process (`envs/code/harness.py`) after its namespaces and privileges
  are set and before any model code runs. It refuses (EPERM) every way to start a program or a process (fork,
  vfork, execve, execveat, and clone without CLONE_THREAD; clone3 answers ENOSYS so that glibc falls back to clone
  for threads, which stay allowed), to reach another process (kill and its relatives, ptrace, process_vm_*,
  pidfd_*), to open a socket or a socket pair, to hold memory that RLIMIT_AS does not count (memfd_create,
  memfd_secret, System V shared memory and message queues), to change mounts or namespaces, io_uring (it would run
  system calls the filter never sees) and a handful of kernel-facing calls.
- `group_program()`: loaded by the child process of a user tool call (`tools.py`); it refuses only setsid and
  setpgid, so that nothing the tool starts can leave the process group that is killed when the call ends.

A system call from another ABI (x32, or a foreign architecture) is refused or kills the process. The syscall
numbers were read from the kernel headers (asm/unistd_64.h and asm-generic/unistd.h); only x86_64 and aarch64
are covered, elsewhere `supported()` says no and the caller reports the layer as missing.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
PR_GET_SECCOMP = 21
SECCOMP_MODE_FILTER = 2
CLONE_THREAD = 0x00010000

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

LD_W_ABS = 0x20
JEQ_K = 0x15
JGE_K = 0x35
JSET_K = 0x45
RET_K = 0x06

X32_SYSCALL_BIT = 0x40000000

# Blocked system calls: name, x86_64 number, aarch64 number ("-": no such call there). Read from the kernel
# headers asm/unistd_64.h and asm-generic/unistd.h. clone and clone3 are handled separately below.
BLOCKED = """
fork 57 -
vfork 58 -
execve 59 221
execveat 322 281
kill 62 129
tkill 200 130
tgkill 234 131
rt_sigqueueinfo 129 138
rt_tgsigqueueinfo 297 240
pidfd_send_signal 424 424
pidfd_open 434 434
pidfd_getfd 438 438
ptrace 101 117
process_vm_readv 310 270
process_vm_writev 311 271
kcmp 312 272
socket 41 198
socketpair 53 199
memfd_create 319 279
memfd_secret 447 447
shmget 29 194
msgget 68 186
unshare 272 97
setns 308 268
mount 165 40
umount2 166 39
pivot_root 155 41
chroot 161 51
open_tree 428 428
move_mount 429 429
fsopen 430 430
fsconfig 431 431
fsmount 432 432
fspick 433 433
mount_setattr 442 442
io_uring_setup 425 425
io_uring_enter 426 426
io_uring_register 427 427
bpf 321 280
perf_event_open 298 241
userfaultfd 323 282
keyctl 250 219
add_key 248 217
request_key 249 218
open_by_handle_at 304 265
name_to_handle_at 303 264
init_module 175 105
finit_module 313 273
delete_module 176 106
kexec_load 246 104
kexec_file_load 320 294
reboot 169 142
swapon 167 224
swapoff 168 225
acct 163 89
"""
LEAVE_GROUP = """
setsid 112 157
setpgid 109 154
"""
"""What `group_program` refuses: the only two ways out of a process group."""
MACHINES = ("x86_64", "aarch64")
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
CLONE = {"x86_64": 56, "aarch64": 220}
CLONE3 = 435


def blocked(machine: str, table: str = BLOCKED) -> dict[str, int]:
    """{name: number} of the calls of `table` on this architecture."""
    column = MACHINES.index(machine) + 1
    rows = [line.split() for line in table.strip().splitlines()]
    return {row[0]: int(row[column]) for row in rows if row[column] != "-"}


class SeccompError(OSError):
    pass


def supported() -> bool:
    return os.uname().machine in MACHINES


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes:
    """The sandbox's filter as raw `struct sock_filter` instructions for this (or the named) architecture."""
    machine = machine or os.uname().machine
    eperm = RET_ERRNO | errno.EPERM
    out = _refusing(machine, blocked(machine))
    out += [_insn(JEQ_K, 0, 1, CLONE3), _insn(RET_K, 0, 0, RET_ERRNO | errno.ENOSYS)]
    out += [
        _insn(JEQ_K, 0, 4, CLONE[machine]),
        _insn(LD_W_ABS, 0, 0, 16),  # low 32 bits of args[0], the clone flags (little-endian on both arches)
        _insn(JSET_K, 0, 1, CLONE_THREAD),
        _insn(RET_K, 0, 0, RET_ALLOW),
        _insn(RET_K, 0, 0, eperm),
    ]
    out.append(_insn(RET_K, 0, 0, RET_ALLOW))
    return b"".join(out)


def group_program(machine: str | None = None) -> bytes:
    """The tools' filter: setsid and setpgid refused, everything else allowed (processes and exec included)."""
    machine = machine or os.uname().machine
    return b"".join([*_refusing(machine, blocked(machine, LEAVE_GROUP)), _insn(RET_K, 0, 0, RET_ALLOW)])


def _refusing(machine: str, numbers: dict[str, int]) -> list[bytes]:
    """The checks every filter starts with (this architecture only, no x32 calls), then EPERM for `numbers`."""
    eperm = RET_ERRNO | errno.EPERM
    out = [
        _insn(LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        _insn(JEQ_K, 1, 0, AUDIT_ARCH[machine]),
        _insn(RET_K, 0, 0, RET_KILL_PROCESS),
        _insn(LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if machine == "x86_64":  # x32 calls use the same arch value with this bit set
        out += [_insn(JGE_K, 0, 1, X32_SYSCALL_BIT), _insn(RET_K, 0, 0, eperm)]
    for number in numbers.values():
        out += [_insn(JEQ_K, 0, 1, number), _insn(RET_K, 0, 0, eperm)]
    return out


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return libc


def _prctl(libc: ctypes.CDLL, name: str, option: int, arg2: int, arg3: int = 0) -> None:
    if libc.prctl(option, arg2, arg3, 0, 0) != 0:
        err = ctypes.get_errno()
        raise SeccompError(err, f"prctl({name}): {errno.errorcode.get(err, err)}")


def no_new_privs() -> None:
    """From here on no exec can grant privileges (set-uid bits, file capabilities); required for an unprivileged
    process to load a filter."""
    _prctl(_libc(), "PR_SET_NO_NEW_PRIVS", PR_SET_NO_NEW_PRIVS, 1)


def install() -> None:
    """Load the sandbox's filter into this (single-threaded) process, setting no_new_privs first; SeccompError if
    refused."""
    if not supported():
        raise SeccompError(errno.ENOSYS, f"no seccomp filter for architecture {os.uname().machine}")
    Filter(program()).install()


class Filter:
    """A filter ready to load: everything that allocates or loads a library is done when it is made, so that a
    forked child of a multi-threaded parent (a tool call) only makes two prctl calls to load it (a lock another
    thread held at the fork cannot stop it there)."""

    def __init__(self, code: bytes):
        self.libc = _libc()
        self.buffer = ctypes.create_string_buffer(code, len(code))
        self.program = _SockFprog(len(code) // 8, ctypes.cast(self.buffer, ctypes.c_void_p))
        self.address = ctypes.addressof(self.program)

    def install(self) -> None:
        """Set no_new_privs, then load the filter into the calling thread (and what it starts); SeccompError if
        refused."""
        _prctl(self.libc, "PR_SET_NO_NEW_PRIVS", PR_SET_NO_NEW_PRIVS, 1)
        _prctl(self.libc, "PR_SET_SECCOMP", PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self.address)
