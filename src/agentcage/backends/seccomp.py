"""A seccomp filter for the workload, built by hand as a classic BPF program for bwrap --seccomp.

Why hand-built: bwrap takes a compiled sock_filter array on a file descriptor; the program we
need is a short deny-list, which is 60 lines here versus a new native dependency (libseccomp's
Python binding is not on PyPI in a maintained form for 3.12 and Debian's python3-seccomp binds
the system Python only). The program is pure data, so it is unit-tested byte for byte and
behaviour-tested in a real cage.

The filter: kill the process on any foreign architecture (an i386 `int 0x80` would otherwise use
other syscall numbers), refuse x32 syscalls, refuse the key-management and io_uring families and
a few kernel-attack-surface calls with EPERM, refuse the terminal-injection ioctls (TIOCSTI,
TIOCLINUX), allow everything else.
"""

from __future__ import annotations

import errno
import os
import struct

from agentcage.errors import BackendError

# BPF opcodes (linux/filter.h, linux/bpf_common.h)
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

_OFF_NR, _OFF_ARCH, _OFF_ARG1_LO = 0, 4, 24

_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C

# name -> (audit arch, {syscall: number}); numbers from the kernel's syscall tables.
_ARCHES = {
    "x86_64": (
        0xC000003E,
        {
            "ioctl": 16, "init_module": 175, "delete_module": 176,
            "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250,
            "perf_event_open": 298, "name_to_handle_at": 303, "open_by_handle_at": 304,
            "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "ioctl": 29, "init_module": 105, "delete_module": 106,
            "kexec_load": 104, "add_key": 217, "request_key": 218, "keyctl": 219,
            "perf_event_open": 241, "name_to_handle_at": 264, "open_by_handle_at": 265,
            "finit_module": 273, "kexec_file_load": 294, "bpf": 280, "userfaultfd": 282,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        },
    ),
}

DENIED = (
    "keyctl", "add_key", "request_key",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "bpf", "userfaultfd", "perf_event_open",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "open_by_handle_at", "name_to_handle_at",
)


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def build_filter(machine: str | None = None) -> bytes:
    """The sock_filter array for `machine` (default: this host); BackendError if unsupported."""
    arch = machine or os.uname().machine  # what platform.machine() reads, without its import
    if arch not in _ARCHES:
        raise BackendError(f"no seccomp filter for architecture {arch}; refusing to start")
    audit_arch, numbers = _ARCHES[arch]
    deny = _RET_ERRNO | errno.EPERM
    prog = [
        _insn(_LD_W_ABS, _OFF_ARCH),
        _insn(_JEQ_K, audit_arch, jt=1, jf=0),
        _insn(_RET_K, _RET_KILL_PROCESS),
        _insn(_LD_W_ABS, _OFF_NR),
    ]
    if arch == "x86_64":  # x32 ABI: syscall numbers with bit 30 set
        prog += [_insn(_JGE_K, 0x40000000, jt=0, jf=1), _insn(_RET_K, deny)]
    for name in DENIED:
        prog += [_insn(_JEQ_K, numbers[name], jt=0, jf=1), _insn(_RET_K, deny)]
    # ioctl(fd, TIOCSTI | TIOCLINUX, ...): push characters into the controlling terminal
    prog += [
        _insn(_JEQ_K, numbers["ioctl"], jt=0, jf=5),
        _insn(_LD_W_ABS, _OFF_ARG1_LO),
        _insn(_JEQ_K, _TIOCSTI, jt=2, jf=0),
        _insn(_JEQ_K, _TIOCLINUX, jt=1, jf=0),
        _insn(_RET_K, _RET_ALLOW),
        _insn(_RET_K, deny),
    ]
    prog.append(_insn(_RET_K, _RET_ALLOW))
    return b"".join(prog)
