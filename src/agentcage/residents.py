"""Proving a resident process of ours before using it: the gateway zygote (backends/zygote.py)
and the resident servers of commands (backends/resident.py: the exec server and the command
server, through served.py).

A resident is found by its unix socket in a private directory of the state root; it is used
only when every check here passes, and anything else means doing the work in the caller (the
gateway spawned, the command started in-process): slower, never less safe.
- The directory is ours and private (0700), the socket is ours and 0600.
- The process holding it (SO_PEERCRED) runs as our uid, is this interpreter (/proc/PID/exe),
  started with exactly the command line this installation starts it with, in our network,
  mount, PID, user and cgroup namespaces and under our root directory.

Import-light (os and sys): a served command checks its server with it before anything else is
loaded.
"""

from __future__ import annotations

import os
import stat
import sys

NAMESPACES = ("net", "mnt", "pid", "user", "cgroup")
SUN_PATH_MAX = 107  # a unix socket's path, without the terminating NUL


def private_socket_refusal(directory: str, socket_path: str) -> str | None:
    """Why the socket may not be trusted (None: it may): it and its directory must be ours
    and private. FileNotFoundError if either is missing."""
    d = os.lstat(directory)
    if not stat.S_ISDIR(d.st_mode) or d.st_uid != os.geteuid() or d.st_mode & 0o077:
        return f"{directory} is not a private directory of ours"
    s = os.lstat(socket_path)
    if not stat.S_ISSOCK(s.st_mode) or s.st_uid != os.geteuid() or s.st_mode & 0o077:
        return f"{socket_path} is not a private socket of ours"
    return None


def _same(path_a: str, path_b: str) -> bool:
    a, b = os.stat(path_a), os.stat(path_b)
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def peer_refusal(pid: int, uid: int, argv: list[str], what: str) -> str | None:
    """Why process `pid` (peer credentials `pid`, `uid`) is not the resident `what` started
    with command line `argv` by this installation (None: it is)."""
    if uid != os.geteuid() or pid <= 0:
        return f"the {what}'s peer is uid {uid}, pid {pid}"
    proc = f"/proc/{pid}"
    try:
        with open(f"{proc}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")[:-1]
        exe = os.readlink(f"{proc}/exe")
        same_ns = all(_same(f"{proc}/ns/{ns}", f"/proc/self/ns/{ns}") for ns in NAMESPACES)
        same_root = _same(f"{proc}/root", "/")
    except OSError as e:
        return f"cannot inspect the {what} (pid {pid}): {e.strerror}"
    if [a.decode(errors="replace") for a in cmdline] != argv:
        return f"pid {pid} is not a {what} of this state root and installation"
    if exe != os.path.realpath(sys.executable):
        return f"the {what} (pid {pid}) runs {exe}, not this interpreter"
    if not (same_ns and same_root):
        return f"the {what} (pid {pid}) lives in other namespaces than this process"
    return None


# /proc/PID/status fields a command inherits from the process that starts it
STATUS_FIELDS = ("Uid", "Gid", "Groups", "Umask", "CapInh", "CapPrm", "CapEff", "CapBnd",
                 "CapAmb", "NoNewPrivs", "Seccomp", "Seccomp_filters", "SigBlk", "SigIgn",
                 "Cpus_allowed_list", "Mems_allowed_list")
# /proc/PID/stat fields after the name: priority, nice, rt_priority, policy
STAT_FIELDS = {"priority": 15, "nice": 16, "rt_priority": 37, "policy": 38}


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def process_state(pid: int | str = "self") -> dict[str, str]:
    """What a command started by process `pid` would inherit from it, as text (for a resident
    server, which serves only a client whose state is its own; its I/O priority, which needs a
    system call, it adds itself)."""
    proc = f"/proc/{pid}"
    found: dict[str, str] = {}
    for line in _read(f"{proc}/status").splitlines():
        name, _, value = line.partition(":")
        if name in STATUS_FIELDS:
            found[name] = " ".join(value.split())
    fields = _read(f"{proc}/stat").rsplit(")", 1)[1].split()
    found.update((name, fields[i]) for name, i in STAT_FIELDS.items())
    for name in ("limits", "cgroup", "oom_score_adj", "attr/current", "personality"):
        try:
            found[name] = _read(f"{proc}/{name}")
        except OSError as e:  # a kernel without the file (no LSM): the same for both
            found[name] = f"({e.errno})"
    for ns in sorted(os.listdir(f"{proc}/ns")):
        found[f"ns/{ns}"] = os.readlink(f"{proc}/ns/{ns}")
    root = os.stat(f"{proc}/root")
    found["root"] = f"{root.st_dev}:{root.st_ino}"
    return found


def import_root() -> str:
    """The directory agentcage is imported from (a source tree's src/, or site-packages)."""
    import agentcage

    return os.path.dirname(os.path.dirname(os.path.realpath(agentcage.__file__)))
