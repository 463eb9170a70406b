"""Redaction of responses: every real secret value replaced by its placeholder before the cage
sees it, in the headers and in the body, buffered or streamed.

- `start_stream` (at the response headers): a response of unknown length, over the buffering
  limit, or content-encoded while there is something to redact, is streamed through the
  redactor (`streaming.py`); its headers are redacted at once. An encoding the gateway cannot
  decode is refused before a byte is sent.
- `redact_buffered` (at the end of a buffered response): headers and body, the body decoded
  first with the one bounded decoder; a body that cannot be decoded within the bound is never
  passed on unredacted.

The ResponseStream of a flow (it holds what passed, for the capture) is kept in this object's
own table, keyed by the flow, never in `flow.metadata`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mitmproxy import http

from agentcage.gateway.decoding import DecodeError, decode_all
from agentcage.gateway.messages import content_codings, raw_headers
from agentcage.gateway.streaming import ResponseStream, must_stream, plan
from agentcage.secrets.redact import Redactor

_FRAMING = ("content-length", "content-encoding", "transfer-encoding")


@dataclass(frozen=True)
class Redacted:
    names: frozenset[str] = frozenset()
    failure: str | None = None  # the body could not be checked: the caller refuses it


class ResponseRedaction:
    def __init__(self, limit: int):
        self.limit = limit  # bodies buffered and decoded up to this many bytes
        self._streams: weakref.WeakKeyDictionary[Any, tuple[ResponseStream,
                                                             tuple[tuple[str, str], ...]]]
        self._streams = weakref.WeakKeyDictionary()

    def stream_of(self, flow: Any) -> tuple[ResponseStream | None, tuple[tuple[str, str], ...]]:
        """The flow's stream (None: buffered) and the headers as the server sent them."""
        return self._streams.get(flow, (None, ()))

    def start_stream(self, flow: http.HTTPFlow, redactor: Redactor,
                     on_failure: Callable[[str], None], capture_cap: int) -> Redacted | None:
        """Stream the response if it must be; None when it is buffered instead. Raises
        DecodeError when it would need redacting in an encoding the gateway cannot decode."""
        resp = flow.response
        assert resp is not None
        if not must_stream(flow.request.method, resp.status_code, resp.headers, self.limit,
                           redacting=not redactor.empty):
            return None
        server_headers = tuple(resp.headers.items(multi=True))
        stream = plan(redactor, content_codings(resp), on_failure, capture_cap)
        found: frozenset[str] = frozenset()
        if stream.redactor is not None:
            headers, names = redactor.redact_headers(resp.headers.items(multi=True))
            found = frozenset(names)
            headers = tuple((k, v) for k, v in headers if k.lower() not in _FRAMING)
            if _client_speaks_http1(flow):
                headers += (("transfer-encoding", "chunked"),)  # a cut-off body stays visible
            resp.headers = raw_headers(headers)
        self._streams[flow] = (stream, server_headers)
        resp.stream = stream
        return Redacted(found)

    def redact_buffered(self, flow: http.HTTPFlow, redactor: Redactor) -> Redacted:
        """Redact a buffered response in place (headers, then the decoded body, re-encoded)."""
        resp = flow.response
        if resp is None or redactor.empty:
            return Redacted()
        names: set[str] = set()
        new_headers, found = redactor.redact_headers(resp.headers.items(multi=True))
        if found:
            names |= found
            resp.headers = raw_headers(new_headers)
        if resp.raw_content:
            try:
                content = decode_all(resp.raw_content, content_codings(resp), self.limit)
            except DecodeError as e:
                return Redacted(frozenset(names), f"response body cannot be redacted: {e}")
            redacted = redactor.redact(content)
            if redacted.names:
                names |= redacted.names
                resp.set_content(redacted.data)  # re-encoded
        return Redacted(frozenset(names))


def _client_speaks_http1(flow: http.HTTPFlow) -> bool:
    return flow.client_conn.alpn != b"h2" and flow.request.http_version == "HTTP/1.1"
