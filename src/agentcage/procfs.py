"""Facts about a process, read from /proc/PID/stat (shared by the host side and the gateway
zygote, which may not import the host side)."""

from __future__ import annotations


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
