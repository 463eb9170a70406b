"""Facts about a process, read from /proc/PID (shared by the host side, the gateway zygote,
which may not import the host side, and `ls` and `exec`, which import nothing they need not)."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # (typing.TYPE_CHECKING, without importing typing: `ls` reads this)
if TYPE_CHECKING:
    from agentcage.state import CageDir


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first); None if it is gone.
    The name is skipped whole: it is in parentheses and may hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def start_time(pid: int) -> int | None:
    """When the process started, in clock ticks since boot: with its pid, its identity (a pid
    is reused, a pid and a start time are not)."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None


def parent(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[1]) if fields else None


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie is not, for our purposes)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = stat_fields(pid)
    return fields is None or fields[0] != "Z"


def is_process(pid: int, start: int | None) -> bool:
    """Whether `pid` is alive and, given its start time, still the process that started then
    (not another one that got its pid)."""
    return alive(pid) and (start is None or start_time(pid) == start)


def pid_matches(pid: int, needle: str) -> bool:
    """Whether `needle` is in the command line of `pid`."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return needle.encode() in f.read()
    except OSError:
        return False


def recorded_gateway(runtime: dict, cage: CageDir) -> int | None:
    """The pid runtime.json records for the cage's gateway if that process is still it."""
    pid = runtime.get("gateway_pid")
    if not pid:
        return None
    start = runtime.get("gateway_start")
    if start is not None:
        return int(pid) if is_process(int(pid), int(start)) else None
    # recorded without a start time (before they were recorded): the spawned command line
    return int(pid) if pid_matches(int(pid), cage.file("gateway.json")) else None
