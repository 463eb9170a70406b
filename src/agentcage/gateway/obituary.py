"""The gateway's end, recorded in its audit log by whoever notices first, once.

When the gateway dies the cage has no egress (fail closed), but the audit log must still say
when and why. Two noticers:

- the supervisor: `python -m agentcage.gateway` forks at once; the parent stays small, forwards
  signals (SIGTERM, SIGINT, SIGHUP) to the gateway it forked, waits for it, and records its
  exit with the exact time and cause (the signal that killed it, or its exit code and the last
  line it logged), then exits the same way. The gateway dies with its supervisor
  (PR_SET_PDEATHSIG), so killing the supervisor cannot leave an unsupervised gateway serving.
- the CLI: when its status of a cage finds the gateway gone (`notice`): a supervisor killed
  with SIGKILL says nothing, so the record gives the time it was noticed and the gateway's last
  sign of life (its heartbeat).

A marker per gateway pid (`gateway.<pid>.died`, under the supervisor's pid, which the CLI knows
the gateway by; created exclusively) makes the first noticer the only one to write. A new
supervisor clears the markers of earlier gateways.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import time
from pathlib import Path

from agentcage.gateway.audit import AuditRecord, append_record

HEARTBEAT = "gateway.heartbeat"  # touched by the running gateway; its mtime is a sign of life
_PR_SET_PDEATHSIG = 1
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def marker_path(state_dir: Path, pid: int) -> Path:
    return Path(state_dir) / f"gateway.{pid}.died"


def clear_markers(state_dir: Path) -> None:
    """A new gateway starts with no verdict on it (markers of earlier ones go)."""
    for stale in Path(state_dir).glob("gateway.*.died"):
        with contextlib.suppress(OSError):
            stale.unlink()


def heartbeat(state_dir: Path) -> None:
    """Touch the heartbeat file (the gateway calls this every few seconds)."""
    path = Path(state_dir) / HEARTBEAT
    try:
        os.utime(path)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        pass


def last_sign_of_life(state_dir: Path) -> float | None:
    with contextlib.suppress(OSError):
        return (Path(state_dir) / HEARTBEAT).stat().st_mtime
    return None


def record(audit_path: Path, pid: int, cause: str, noticed_by: str,
           died_at: float | None = None, extra: dict | None = None) -> bool:
    """Write the gateway's obituary unless someone did already; True if this call wrote it."""
    state_dir = Path(audit_path).parent
    try:
        fd = os.open(marker_path(state_dir, pid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    except OSError:
        fd = -1  # no marker (a full disk): write the record anyway, a duplicate beats none
    now = time.time()
    details = {"pid": pid, "noticed_by": noticed_by, "cause": cause,
               "died_at": round(died_at, 6) if died_at is not None else None,
               "last_seen": last_sign_of_life(state_dir), **(extra or {})}
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.write(fd, json.dumps(details).encode())
        os.close(fd)
    when = "" if died_at is not None else " (noticed now; it died after its last heartbeat)"
    return append_record(Path(audit_path), AuditRecord(
        "gateway", "blocked", f"gateway stopped: {cause}{when}; the cage has no egress",
        by=noticed_by, ts=died_at if died_at is not None else now, extra=details))


def notice(audit_path: Path, pid: int | None) -> bool:
    """The CLI found the gateway gone: record it, unless its supervisor already did."""
    if not pid:
        return False
    return record(audit_path, pid, "the gateway process is gone and no supervisor recorded its "
                  "end (both killed, e.g. with SIGKILL)", "cli")


def describe(status: int, log_tail: str = "") -> str:
    """An exit status from waitpid, in words."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by signal {sig} ({name})"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    if code == 0:
        return "exited normally"
    return f"exited with status {code}" + (f": {log_tail}" if log_tail else "")


def _last_log_line(settings: dict) -> str:
    """The last line the gateway wrote to its log (stderr), if it can be found, clipped."""
    with contextlib.suppress(OSError, ValueError):
        log = Path(settings["audit_path"]).parent / "gateway.log"
        with open(log, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            lines = f.read().decode("utf-8", "replace").strip().splitlines()
        return lines[-1][:300] if lines else ""
    return ""


def supervise(settings_path: Path) -> None:
    """Fork: return in the child (the gateway), never in the parent (the supervisor), which
    waits for the child, records its end, and exits with its status."""
    clear_markers(Path(settings_path).parent)
    parent = os.getpid()
    child = 0

    def forward(signum: int, _frame: object) -> None:
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    for sig in _FORWARDED:  # before the fork: no signal can find the supervisor unprepared
        signal.signal(sig, forward)
    child = os.fork()
    if child == 0:
        _die_with(parent)
        return
    try:
        _, status = os.waitpid(child, 0)  # retried after each forwarded signal (PEP 475)
    except ChildProcessError:
        status = 0
    died_at = time.time()
    with contextlib.suppress(Exception):
        settings = json.loads(Path(settings_path).read_text())
        extra = ({"exit_signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status)
                 else {"exit_code": os.WEXITSTATUS(status)})
        # under the supervisor's pid: the one the CLI knows the gateway by
        record(Path(settings["audit_path"]), parent, describe(status, _last_log_line(settings)),
               "supervisor", died_at, {"process": child, **extra})
    code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    os._exit(code)


def _die_with(parent: int) -> None:
    """In the gateway: be killed when the supervisor dies, and never run without one."""
    for sig in _FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        os._exit(1)
    if os.getppid() != parent:  # the supervisor died before the line above
        os._exit(1)
