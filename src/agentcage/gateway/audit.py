"""audit.jsonl: one JSON line per decision, each written whole, in order, and known written.

`AuditLog.write` returns only once the whole line is in the file (the kernel has it: any reader
sees it, and it survives the gateway's death). A write that fails, or lands only in part (a
full disk), raises `AuditUnavailable` and leaves nothing behind: a partial line is cut off
again, and nothing is kept to be flushed later, so a line is never torn, never late and never
out of order. The caller refuses what it could not audit. Once writes work again, the first
record after the outage is preceded by one that says how many records were lost and when.

Writers: the proxy's event loop and the resolver's thread share one AuditLog (a lock orders
them); the gateway's obituary (`obituary.py`) appends one line after the gateway is gone.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DECISIONS = ("allowed", "flagged", "blocked")
_MAX_TEXT = 2048
# What a log applies to every text of a record before it is written (auditmask.py: the
# credentials in it replaced by fingerprints).
Mask = Callable[[str], str]


def _clip(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _MAX_TEXT:
        return value[:_MAX_TEXT] + "…"
    return value


def _masked(value: Any, mask: Mask) -> Any:
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {k: _masked(v, mask) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(v, mask) for v in value]
    return value


class AuditUnavailable(OSError):
    """A record could not be written whole; whatever it audited must be refused."""


@dataclass(frozen=True)
class AuditRecord:
    """One decision, in the fields every audit record carries; `by` names the layer that
    decided (inspector, resolver, gate...)."""

    direction: str  # outbound | response | websocket | dns | upstream | config | packets | ...
    decision: str
    reason: str
    host: str = ""
    method: str = ""
    port: int | None = None
    path: str = ""
    url: str = ""
    by: str = ""
    status: int | None = None
    inspectors: tuple[dict[str, str], ...] = ()
    secrets_injected: tuple[str, ...] = ()
    secrets_redacted: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    ts: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"unknown decision {self.decision!r}")

    def to_dict(self, mask: Mask | None = None) -> dict[str, Any]:
        """The record as written; with `mask`, applied to every text the cage could have put
        there before it is clipped (so a clip never keeps the first half of a credential)."""
        def text(value: Any) -> Any:
            return _clip(_masked(value, mask) if mask is not None else value)

        out = {
            "ts": round(self.ts, 6),
            "direction": self.direction,
            "method": text(self.method),
            "host": text(self.host),
            "port": self.port,
            "path": text(self.path),
            "url": text(self.url),
            "decision": self.decision,
            "reason": text(self.reason),
            "by": self.by,
            "status": self.status,
            "inspectors": [text(dict(i)) for i in self.inspectors],
            "secrets_injected": list(self.secrets_injected),
            "secrets_redacted": list(self.secrets_redacted),
        }
        out.update({k: text(v) for k, v in self.extra.items()})
        return out


def encode(record: AuditRecord, mask: Mask | None = None) -> bytes:
    return (json.dumps(record.to_dict(mask), separators=(",", ":")) + "\n").encode()


def say(message: str) -> None:
    """One line on stderr (the gateway log); never raises (stderr may be on the full disk)."""
    with contextlib.suppress(Exception):  # nowhere left to say it: the refusal still stands
        print(f"agentcage-gateway: {message}", file=sys.stderr, flush=True)


class AuditLog:
    """Appends records to a 0600 file, one `os.write` per line, whole or not at all."""

    def __init__(self, path: Path, mask: Mask | None = None):
        self.path = Path(path)
        self._mask = mask
        # Told of every record once it is written, as written (masked): the policy API's
        # recent refusals (control/denials.py). Must be quick and must not raise.
        self.observers: list[Callable[[dict[str, Any]], None]] = []
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                           0o600)
        self._lock = threading.Lock()
        self._lost = 0  # records refused since the last one written
        self._lost_since: float | None = None
        self._lost_why = ""

    def write(self, record: AuditRecord) -> None:
        """Write `record` whole, or raise AuditUnavailable having written nothing."""
        with self._lock:
            try:
                doc, line = self._encode(record)
                if self._lost:
                    self._append(self._outage_line(record.ts))
                    self._lost, self._lost_since = 0, None
                self._append(line)
            except OSError as e:
                self._lost += 1
                if self._lost_since is None:
                    self._lost_since = record.ts
                self._lost_why = f"{type(e).__name__}: {e.strerror or e}"
                raise AuditUnavailable(e.errno or errno.EIO,
                                       f"audit log not writable ({self._lost_why})") from e
        for observe in self.observers:
            with contextlib.suppress(Exception):  # an observer never undoes a written record
                observe(doc)

    def _encode(self, record: AuditRecord) -> tuple[dict[str, Any], bytes]:
        """The record as it is written (masked, clipped), and its line: one that does not
        encode is not written."""
        try:
            doc = record.to_dict(self._mask)
            return doc, (json.dumps(doc, separators=(",", ":")) + "\n").encode()
        except Exception as e:  # a record that cannot be made safe to keep is not kept
            raise OSError(errno.EINVAL, f"record not encodable: {e}") from e

    def write_or_say(self, record: AuditRecord) -> bool:
        """For records about something that happens whether or not they are written (a policy
        reload, packets already dropped): write, or say on stderr that it could not be."""
        try:
            self.write(record)
            return True
        except AuditUnavailable as e:
            say(f"cannot audit ({e}): {record.direction} {record.decision}: {record.reason}")
            return False

    def _append(self, line: bytes) -> None:
        """One line at the end of the file; a short write is cut off again (only this process
        writes while the gateway runs, so the end it saw is still the end)."""
        end = os.fstat(self._fd).st_size
        try:
            written = os.write(self._fd, line)
        except OSError:
            self._cut(end)
            raise
        if written != len(line):
            self._cut(end)
            raise OSError(errno.ENOSPC, "short write: the disk is full")

    def _cut(self, end: int) -> None:
        try:
            os.ftruncate(self._fd, end)
        except OSError as e:  # cannot happen on a local file we own; say so if it does
            say(f"audit log: could not remove a partial line ({e})")

    def _outage_line(self, now: float) -> bytes:
        return encode(AuditRecord(
            "audit", "blocked",
            f"{self._lost} audit record(s) could not be written ({self._lost_why}); "
            "what they audited was refused",
            by="audit", ts=now,
            extra={"lost": self._lost, "since": round(self._lost_since or now, 6)},
        ))

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def append_record(path: Path, record: AuditRecord) -> bool:
    """Append one record to an audit file nobody else writes now (the gateway is gone): whole,
    or nothing. False when it could not be written."""
    try:
        log = AuditLog(path)
    except OSError:
        return False
    try:
        log.write(record)
        return True
    except AuditUnavailable:
        return False
    finally:
        log.close()


def read_audit(path: Path) -> list[dict[str, Any]]:
    """Every record of an audit file (torn or foreign lines are skipped)."""
    records = []
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return records
