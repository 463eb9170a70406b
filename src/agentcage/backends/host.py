"""Talking to the host: run commands, find and stop processes.

Errors of the tools become BackendError here, where they are called.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from agentcage.errors import BackendError


def run(argv: list[str], *, check: bool = True, input: str | None = None,
        timeout: float = 30) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(argv, input=input, capture_output=True, text=True,
                                timeout=timeout, check=False)
    except FileNotFoundError:
        raise BackendError(f"{argv[0]} is not installed; run `agentcage doctor`") from None
    except subprocess.TimeoutExpired:
        raise BackendError(f"{' '.join(argv[:4])} timed out after {timeout:g}s") from None
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise BackendError(f"{' '.join(argv)}: {detail[-1] if detail else 'failed'}")
    return result


def netns_inode(ns: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{ns}").st_ino
    except OSError:
        return None


def pids_in_netns(ns: str) -> list[int]:
    """Every process whose network namespace is `ns` (found through /proc/PID/ns/net)."""
    inode = netns_inode(ns)
    if inode is None:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                found.append(int(entry))
    return [p for p in found if p != os.getpid()]


def processes_citing(*needles: str) -> list[int]:
    """Processes whose command line holds every one of `needles` (a gateway names its cage's
    settings file): how a cage's processes are found when its runtime.json cannot tell."""
    wanted = [n.encode() for n in needles]
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if all(w in cmdline for w in wanted):
            found.append(int(entry))
    return found


def gateway_settings_of(pid: int) -> str | None:
    """The settings file a cage gateway process was started with (its identity: the file is
    in its cage's state directory), or None for any other process."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if b"agentcage.gateway" not in args or b"--settings" not in args:
        return None
    i = args.index(b"--settings")
    return args[i + 1].decode(errors="replace") if i + 1 < len(args) else None


def cage_suffix_of(pid: int) -> str | None:
    """The suffix of the cage gateway namespace (`agc-<suffix>-gw`) process `pid` lives in."""
    try:
        inode = os.stat(f"/proc/{pid}/ns/net").st_ino
        names = os.listdir("/run/netns")
    except OSError:
        return None
    for name in names:
        if name.startswith("agc-") and name.endswith("-gw") and netns_inode(name) == inode:
            return name.removeprefix("agc-").removesuffix("-gw")
    return None


def pid_matches(pid: int, needle: str) -> bool:
    try:
        return needle.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is not alive for our purposes
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def terminate(pids: list[int], grace: float = 3.0) -> None:
    """SIGTERM, wait up to `grace`, then SIGKILL whatever is left."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.02)
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.02)
