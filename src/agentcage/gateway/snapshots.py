"""What a capture line holds: request, response and WebSocket snapshots, bodies cut at a cap.

Snapshots are copies (later changes to the flow do not reach them). A body is the decoded
content (the one bounded decoder, `decoding.decode_prefix`) cut at `cap` bytes, as text when it
is UTF-8, else base64; a body that cannot be decoded is kept as it came, marked
`content_encoded`.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Sequence
from typing import Any

from agentcage.gateway.decoding import DecodeError, decode_prefix, is_encoded


def body_doc(data: bytes | None, size: int | None = None, cap: int = 1024 * 1024,
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
    """The (decoded) body of a mitmproxy message, bounded: a body that cannot be decoded is
    kept as it came (cut), marked `content_encoded`."""
    raw = message.raw_content
    if raw is None:
        return None
    codings = message.headers.get_all("content-encoding")
    try:
        prefix, size = decode_prefix(raw, codings, cap)
    except DecodeError:
        return body_doc(raw, cap=cap, encoded=is_encoded(codings))
    if size is None:  # decodes past the cap (or past the ratio bound): the prefix only
        doc = body_doc(prefix, cap=cap)
        assert doc is not None
        doc["size"], doc["truncated"] = None, True
        return doc
    return body_doc(prefix, size=size, cap=cap)


def request_doc(req: Any, host: str, port: int, cap: int, body: bytes | None = None,
                path: str | None = None,
                headers: Sequence[tuple[str, str]] | None = None) -> dict[str, Any]:
    """A request snapshot; `body` is the decoded body when the caller has it already."""
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
