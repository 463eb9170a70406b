"""capture.jsonl: one JSON line per flow, seen from both sides of the gateway.

- `inbound`: the request as the cage sent it (placeholders, taken BEFORE injection) and the
  response as the cage received it (after redaction, or the gateway's own 403/502).
- `outbound`: the request as sent on the wire (after injection: REAL secret values) and the
  response as the server sent it (before redaction). Absent when nothing reached upstream.

The file lives in the cage's state directory on the host (0600, never inside the cage). It is
bounded: when a write would pass `max_file_size`, the file is rotated (`capture.jsonl.1`, ...,
keeping `max_files` files in all). Bodies are cut at `max_body_size` (`snapshots.py`). A
capture that fails is audited and traffic goes on: capture never decides anything. The lines
are assembled and written by `recorder.FlowRecorder`, the one writer.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcage.domains import DomainMatcher, DomainRule, parse_pattern

CAPTURE_VERSION = 1


@dataclass(frozen=True)
class CaptureSettings:
    """cage.yaml's `capture` section, as the gateway gets it (declared here, once)."""

    enable_har: bool = False
    max_body_size: int = 1024 * 1024
    max_file_size: int = 64 * 1024 * 1024
    max_files: int = 5
    include_domains: tuple[str, ...] = ()
    exclude_domains: tuple[str, ...] = ()

    @functools.cached_property
    def _include(self) -> DomainMatcher:
        return DomainMatcher(DomainRule(parse_pattern(p)) for p in self.include_domains)

    @functools.cached_property
    def _exclude(self) -> DomainMatcher:
        return DomainMatcher(DomainRule(parse_pattern(p)) for p in self.exclude_domains)

    def wants(self, host: str) -> bool:
        """Whether flows to `host` are captured: include (if any) then exclude, with the
        domain policy's own patterns and matcher (`domains.py`)."""
        if not self.enable_har:
            return False
        if self.include_domains and self._include.match(host or "") is None:
            return False
        return self._exclude.match(host or "") is None


# ---- the file ----------------------------------------------------------------------------------

class CaptureLog:
    """Appends lines to a 0600 file and rotates it at `max_file_size`. Never raises: a failure is
    reported once to `on_failure` (until a write succeeds again) and the line is dropped."""

    def __init__(self, path: Path, config: CaptureSettings,
                 on_failure: Callable[[str], object] | None = None):
        self.path = Path(path)
        self.config = config
        self.on_failure = on_failure
        self.failed = False
        self.dropped = 0
        self._file: Any = None
        self._size = 0

    def _open(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        os.fchmod(fd, 0o600)
        self._file = os.fdopen(fd, "ab", buffering=0)
        self._size = os.fstat(fd).st_size

    def _rotate(self) -> None:
        self.close()
        keep = self.config.max_files
        if keep <= 1:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            return
        with contextlib.suppress(FileNotFoundError):
            rotated_path(self.path, keep - 1).unlink()
        for n in range(keep - 2, 0, -1):
            with contextlib.suppress(FileNotFoundError):
                os.replace(rotated_path(self.path, n), rotated_path(self.path, n + 1))
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.path, rotated_path(self.path, 1))

    def write(self, record: dict[str, Any]) -> bool:
        try:
            line = encode_line(record, self.config.max_file_size)
            if self._file is None:
                self._open()
            if self._size and self._size + len(line) > self.config.max_file_size:
                self._rotate()
                self._open()
            self._file.write(line)
            self._size += len(line)
        except Exception as e:
            self.dropped += 1
            self.close()
            if not self.failed:
                self.failed = True
                self._report(f"capture write failed: {type(e).__name__}: {e}")
            return False
        self.failed = False
        return True

    def _report(self, reason: str) -> None:
        try:
            if self.on_failure is not None:
                self.on_failure(reason)
        except Exception as again:
            print(f"agentcage-gateway: {reason} (and auditing it failed: {again!r})",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(Exception):
                self._file.close()
        self._file = None


def encode_line(record: dict[str, Any], limit: int) -> bytes:
    """One JSON line; a line over `limit` keeps everything but its bodies (marked omitted)."""
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    if len(line) <= limit:
        return line
    slim = json.loads(line)
    for side in ("inbound", "outbound"):
        for part in ("request", "response"):
            snap = (slim.get(side) or {}).get(part)
            if isinstance(snap, dict) and isinstance(snap.get("body"), dict):
                size = snap["body"].get("size", 0)
                snap["body"] = {"size": size, "truncated": True, "omitted": "line too long"}
    return (json.dumps(slim, separators=(",", ":")) + "\n").encode()


def rotated_path(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}")


def capture_files(path: Path) -> list[Path]:
    """The capture file and its rotations, oldest first."""
    path = Path(path)
    rotated = []
    for candidate in path.parent.glob(f"{path.name}.*"):
        suffix = candidate.name[len(path.name) + 1:]
        if suffix.isdigit():
            rotated.append((int(suffix), candidate))
    files = [p for _n, p in sorted(rotated, reverse=True)]
    if path.exists():
        files.append(path)
    return files


def read_capture(paths: Iterable[Path]) -> tuple[list[dict[str, Any]], int]:
    """Every record of the capture files, and how many lines were skipped (torn, corrupt)."""
    records: list[dict[str, Any]] = []
    skipped = 0
    for path in paths:
        try:
            data = Path(path).read_bytes()
        except OSError:
            skipped += 1
            continue
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            if isinstance(rec, dict) and isinstance(rec.get("inbound"), dict):
                records.append(rec)
            else:
                skipped += 1
    return records, skipped
