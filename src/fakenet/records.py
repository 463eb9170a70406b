"""What the servers saw: written by the server process as JSON lines, read back by the host.

Files, not pipes or memory, so records outlive the server process and a crash loses nothing
already seen. One writer per directory (one asyncio thread), any number of readers.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import IO, Any, NamedTuple

SINK_FILE = "sink.jsonl"
DNS_FILE = "dns.jsonl"
HTTP_FILE = "http.jsonl"
MAIL_FILE = "mail.jsonl"
_FILES = (SINK_FILE, DNS_FILE, HTTP_FILE, MAIL_FILE)


class SinkRecord(NamedTuple):
    """Bytes one connection (TCP) or one datagram (UDP) delivered to a server.

    proto is "tcp", "udp", or "tls" (the decrypted bytes an HTTPS server read), or "ws" / "wss":
    one WebSocket message (text or binary) a `/ws` endpoint received, unmasked and reassembled.
    """

    proto: str
    port: int
    peer: str
    data: bytes


class RecordWriter:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        # Append mode, so a reader truncating a file (reset) never leaves a hole of zeros.
        self._files: dict[str, IO[str]] = {
            name: open(directory / name, "a", encoding="utf-8") for name in _FILES  # noqa: SIM115
        }

    def close(self) -> None:
        for f in self._files.values():
            f.close()

    def sink(self, proto: str, port: int, peer: str, conn: str, data: bytes) -> None:
        self._write(SINK_FILE, {"proto": proto, "port": port, "peer": peer, "conn": conn,
                                "data": base64.b64encode(data).decode()})

    def dns(self, qname: str, qtype: str, peer: str, transport: str) -> None:
        self._write(DNS_FILE, {"qname": qname, "qtype": qtype, "peer": peer,
                               "transport": transport})

    def http(self, request: dict[str, Any]) -> None:
        entry = dict(request)
        entry["body"] = base64.b64encode(request["body"]).decode()
        self._write(HTTP_FILE, entry)

    def mail(self, event: dict[str, Any]) -> None:
        """A mail server's event (a login, a message: its `data` as base64)."""
        entry = dict(event)
        if isinstance(entry.get("data"), bytes):
            entry["data"] = base64.b64encode(entry["data"]).decode()
        self._write(MAIL_FILE, entry)

    def _write(self, name: str, entry: dict[str, Any]) -> None:
        f = self._files[name]
        # One write per line: a reader sees whole lines or an unterminated tail it skips.
        f.write(json.dumps(entry, separators=(",", ":")) + "\n")
        f.flush()


class RecordReader:
    def __init__(self, directory: Path) -> None:
        self._dir = directory

    def sink_records(self, port: int | None = None) -> list[SinkRecord]:
        """One record per connection or datagram, in order of first arrival."""
        merged: dict[str, list[Any]] = {}
        for entry in self._lines(SINK_FILE):
            if port is not None and entry["port"] != port:
                continue
            data = base64.b64decode(entry["data"])
            if entry["conn"] in merged:
                merged[entry["conn"]][3] += data
            else:
                merged[entry["conn"]] = [entry["proto"], entry["port"], entry["peer"], data]
        return [SinkRecord(*fields) for fields in merged.values()]

    def dns_queries(self) -> list[tuple[str, str]]:
        return [(e["qname"], e["qtype"]) for e in self._lines(DNS_FILE)]

    def dns_log(self) -> list[dict[str, Any]]:
        return list(self._lines(DNS_FILE))

    def http_requests(self) -> list[dict[str, Any]]:
        requests = []
        for entry in self._lines(HTTP_FILE):
            entry["body"] = base64.b64decode(entry["body"])
            requests.append(entry)
        return requests

    def mail_records(self) -> list[dict[str, Any]]:
        records = []
        for entry in self._lines(MAIL_FILE):
            if "data" in entry:
                entry["data"] = base64.b64decode(entry["data"])
            records.append(entry)
        return records

    def reset(self) -> None:
        for name in _FILES:
            path = self._dir / name
            if path.exists():
                path.write_bytes(b"")

    def _lines(self, name: str) -> list[dict[str, Any]]:
        try:
            text = (self._dir / name).read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        lines = text.split("\n")
        # The last element is "" after a complete line, or a line still being written.
        return [json.loads(line) for line in lines[:-1] if line]
