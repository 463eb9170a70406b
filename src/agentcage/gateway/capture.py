"""capture.jsonl: one JSON line per flow, seen from both sides of the gateway.

- `inbound`: the request as the cage sent it (placeholders, taken BEFORE injection) and the
  response as the cage received it (after redaction, or the gateway's own 403/502).
- `outbound`: the request as sent on the wire (after injection: REAL secret values) and the
  response as the server sent it (before redaction). Absent when nothing reached upstream.

The file lives in the cage's state directory on the host (0600, never inside the cage). It is
bounded: when a write would pass `max_file_size`, the file is rotated (`capture.jsonl.1`, ...,
keeping `max_files` files in all). Bodies are cut at `max_body_size`. A capture that fails is
audited and traffic goes on: capture never decides anything.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcage.domains import parse_pattern

CAPTURE_VERSION = 1
DEFAULT_MAX_BODY = 1024 * 1024
DEFAULT_MAX_FILE = 64 * 1024 * 1024


@dataclass(frozen=True)
class CaptureConfig:
    enable: bool = False
    max_body_size: int = DEFAULT_MAX_BODY
    max_file_size: int = DEFAULT_MAX_FILE
    max_files: int = 5
    include_domains: tuple[str, ...] = ()
    exclude_domains: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, raw: dict[str, Any] | None) -> CaptureConfig:
        """From cage.yaml's `capture` section as the backend passes it to the gateway."""
        raw = dict(raw or {})
        return cls(
            enable=bool(raw.get("enable_har", False)),
            max_body_size=int(raw.get("max_body_size", DEFAULT_MAX_BODY)),
            max_file_size=int(raw.get("max_file_size", DEFAULT_MAX_FILE)),
            max_files=max(1, int(raw.get("max_files", 5))),
            include_domains=tuple(raw.get("include_domains", ())),
            exclude_domains=tuple(raw.get("exclude_domains", ())),
        )

    def wants(self, host: str) -> bool:
        """Whether flows to `host` are captured: include (if any) then exclude; a pattern covers
        its name and every subdomain of it."""
        if not self.enable:
            return False
        host = (host or "").rstrip(".").lower()
        if self.include_domains and not any(_covers(p, host) for p in self.include_domains):
            return False
        return not any(_covers(p, host) for p in self.exclude_domains)


def _covers(pattern: str, host: str) -> bool:
    p = parse_pattern(pattern)
    return host == p.name or host.endswith("." + p.name)


# ---- snapshots ---------------------------------------------------------------------------------

def body_doc(data: bytes | None, size: int | None = None, cap: int = DEFAULT_MAX_BODY,
             encoded: bool = False) -> dict[str, Any] | None:
    """A body for the capture line: text when it is UTF-8, else base64; cut at `cap` bytes.
    `size` is the full size when `data` was already cut; `encoded`: still content-encoded."""
    if data is None:
        return None
    full = len(data) if size is None else size
    cut = data[:cap]
    doc: dict[str, Any] = {"size": full, "truncated": full > len(cut)}
    if encoded:
        doc["content_encoded"] = True
    text = _utf8(cut, doc["truncated"])
    if text is not None:
        doc["text"] = text
    else:
        doc["base64"] = base64.b64encode(cut).decode()
    return doc


def _utf8(data: bytes, truncated: bool) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        # a cut in the middle of a character is still text
        if truncated and e.start >= len(data) - 3:
            with contextlib.suppress(UnicodeDecodeError):
                return data[: e.start].decode("utf-8")
        return None


def body_bytes(doc: dict[str, Any] | None) -> bytes:
    if not doc:
        return b""
    if "text" in doc:
        return str(doc["text"]).encode("utf-8", "surrogateescape")
    if "base64" in doc:
        return base64.b64decode(doc["base64"])
    return b""


def message_body(message: Any, cap: int) -> dict[str, Any] | None:
    """The (decoded) body of a mitmproxy message, bounded: a body that cannot be decoded within
    `cap` bytes is kept as it came (cut), marked `content_encoded`."""
    from agentcage.gateway.addon import BodyUnreadable, decoded_body

    raw = message.raw_content
    if raw is None:
        return None
    if not raw:
        return body_doc(b"", cap=cap)
    try:
        return body_doc(decoded_body(message, cap), cap=cap)
    except BodyUnreadable:
        pass
    encoded = bool(message.headers.get("content-encoding", "").strip().lower()
                   not in ("", "identity"))
    return body_doc(raw, cap=cap, encoded=encoded)


def request_doc(req: Any, host: str, port: int, cap: int, body: bytes | None = None,
                path: str | None = None,
                headers: Sequence[tuple[str, str]] | None = None) -> dict[str, Any]:
    """A request snapshot (copies: later changes to the flow do not reach it)."""
    return {
        "method": req.method,
        "scheme": req.scheme,
        "host": host,
        "port": port,
        "path": req.path if path is None else path,
        "http_version": req.http_version,
        "headers": [[k, v] for k, v in (headers if headers is not None
                                         else req.headers.items(multi=True))],
        "body": body_doc(body, cap=cap) if body is not None else message_body(req, cap),
    }


def response_doc(resp: Any, cap: int,
                 headers: Sequence[tuple[str, str]] | None = None) -> dict[str, Any]:
    return {
        "status": resp.status_code,
        "reason": resp.reason,
        "http_version": resp.http_version,
        "headers": [[k, v] for k, v in (headers if headers is not None
                                         else resp.headers.items(multi=True))],
        "body": message_body(resp, cap),
    }


class WebSocketCapture:
    """The messages of one WebSocket connection, both views, within one byte budget (`cap`,
    shared by all messages of the connection) and `max_messages`; past them a message keeps
    its direction, time and size but not its data (`omitted`)."""

    def __init__(self, cap: int, max_messages: int = 1000):
        self.cap = cap
        self.max_messages = max_messages
        self.used = 0
        self.inbound: list[dict[str, Any]] = []
        self.outbound: list[dict[str, Any]] = []
        self.dropped = 0

    def add(self, *, from_client: bool, ts: float, text: bool, inbound: bytes | None,
            outbound: bytes | None, blocked: str | None = None) -> None:
        """One message: `inbound` as the cage sent or received it, `outbound` as it went to or
        came from the server (None: it never did, e.g. a blocked message)."""
        if len(self.inbound) >= self.max_messages:
            self.dropped += 1
            return
        kind = "send" if from_client else "receive"
        for side, data in ((self.inbound, inbound), (self.outbound, outbound)):
            if data is None:
                continue
            doc: dict[str, Any] = {"type": kind, "time": ts, "opcode": 1 if text else 2,
                                   "size": len(data)}
            if self.used + len(data) <= self.cap:
                self.used += len(data)
                if text:
                    doc["text"] = data.decode("utf-8", "replace")
                else:
                    doc["base64"] = base64.b64encode(data).decode()
            else:
                doc["omitted"] = "over the capture budget"
            if blocked is not None and side is self.inbound:
                doc["blocked"] = blocked
            side.append(doc)


# ---- the file ----------------------------------------------------------------------------------

class CaptureLog:
    """Appends lines to a 0600 file and rotates it at `max_file_size`. Never raises: a failure is
    reported once to `on_failure` (until a write succeeds again) and the line is dropped."""

    def __init__(self, path: Path, config: CaptureConfig,
                 on_failure: Callable[[str], None] | None = None):
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


def now() -> float:
    return time.time()
