"""A fresh, empty session keyring for the workload (the caller's keys must not be inherited).

Called in the child between fork and exec (`preexec_fn`), before privileges are dropped: the
workload then possesses only this anonymous keyring, and the seccomp filter refuses every
further keyctl/add_key/request_key call. Done with one syscall rather than `keyctl session -`,
which prints a line on the workload's stderr.
"""

from __future__ import annotations

import ctypes
import os

_KEYCTL = {"x86_64": 250, "aarch64": 219}
_KEYCTL_JOIN_SESSION_KEYRING = 1


def join_new_session_keyring() -> None:
    number = _KEYCTL.get(os.uname().machine)
    if number is None:
        raise OSError("keyctl: unsupported architecture")
    libc = ctypes.CDLL(None, use_errno=True)
    serial = libc.syscall(number, _KEYCTL_JOIN_SESSION_KEYRING, None)
    if serial < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"cannot join a new session keyring: {os.strerror(errno)}")
