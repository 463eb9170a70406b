"""audit.jsonl: one JSON line per decision, appended and flushed at once."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DECISIONS = ("allowed", "flagged", "blocked")
_MAX_TEXT = 2048


def _clip(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _MAX_TEXT:
        return value[:_MAX_TEXT] + "…"
    return value


@dataclass(frozen=True)
class AuditRecord:
    """One decision, in the fields every audit record carries; `by` names the layer that
    decided (inspector, resolver, gate...)."""

    direction: str  # outbound | dns | upstream | config | packets
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

    def to_dict(self) -> dict[str, Any]:
        out = {
            "ts": round(self.ts, 6),
            "direction": self.direction,
            "method": self.method,
            "host": _clip(self.host),
            "port": self.port,
            "path": _clip(self.path),
            "url": _clip(self.url),
            "decision": self.decision,
            "reason": _clip(self.reason),
            "by": self.by,
            "status": self.status,
            "inspectors": [dict(i) for i in self.inspectors],
            "secrets_injected": list(self.secrets_injected),
            "secrets_redacted": list(self.secrets_redacted),
        }
        out.update({k: _clip(v) for k, v in self.extra.items()})
        return out


class AuditLog:
    """Appends records to a 0600 file. Writes are line-sized and unbuffered beyond one record."""

    def __init__(self, path: Path):
        self.path = Path(path)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._file = os.fdopen(fd, "a", buffering=1)

    def write(self, record: AuditRecord) -> None:
        self._file.write(json.dumps(record.to_dict(), separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()


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
