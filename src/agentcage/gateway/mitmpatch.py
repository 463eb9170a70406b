"""Every change the gateway makes to mitmproxy's own behaviour, in one place.

All are about bodies, all pinned to mitmproxy 12 (the dependency says <13, `agentcage doctor`
checks it) and applied by `proxy.build_master` before the proxy starts. Each one looks up the
method it wraps and raises if it is missing, so a mitmproxy that changed refuses to start the
gateway instead of running it with the old behaviour. Each is idempotent.

1. `limit_request_bodies_only`: mitmproxy has ONE `body_size_limit` for both directions, checked
   on a response's headers before any addon hook could choose to stream it. The gateway wants
   requests bounded (they are buffered for the inspectors) and responses streamed when large
   (`gateway.streaming`), so the check is narrowed to requests.
2. `reset_refused_uploads`: when an HTTP/2 request body passes the limit, mitmproxy answers 413
   and ends its side of the stream, but never tells the client to stop sending (RFC 9113 8.1:
   RST_STREAM with NO_ERROR). The client keeps uploading into a stream nobody reads, its flow
   control window runs dry, and it hangs until its own timeout. The reset is added.
   (An upload after `Expect: 100-continue` that is never answered is avoided in the addon:
   see `messages.drop_interim_continue`.)
3. `drain_refused_uploads`: over HTTP/1.1, mitmproxy answers 413 and closes the connection at
   once. A client that writes its whole body before it reads (Python's http.client, most
   simple clients) then gets a reset in the middle of its write (an SSL EOF), or, for a
   chunked body, writes into a connection nobody reads until its own timeout, and never sees
   the 413. Now the 413 is sent and the rest of the body is read and thrown away (up to
   `DRAIN_LIMIT` bytes), and the connection is closed once the request has ended: the client
   finishes writing, then reads the 413. Nothing of it is kept or forwarded.
4. `one_copy_request_bodies`: mitmproxy collects a request body as a list of the pieces that
   arrived and joins them at the end: twice the body at that moment, and thousands of freed
   pieces that fragment the heap (a 100 MiB upload left the gateway 200 MiB larger for good).
   The body is collected in one growing buffer whose bytes are handed over without a copy.
5. `encrypt_in_slices`: mitmproxy hands a whole request body to OpenSSL at once, which writes
   all of its ciphertext into one memory BIO before any of it is read out: a 100 MiB upload
   held 100 MiB more, and the BIO kept its size for the life of the connection. Slices of
   `TLS_SLICE` bytes, each read out before the next, keep the BIO that small. The slices
   still all went into the upstream transport's write buffer at once (the same 100 MiB more,
   until it drained): toward an upstream, each slice now waits for the one before it to be
   taken (`gateway.pacing`, whose addon `build_master` adds).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

_PATCHED = "_agentcage_patched"


def _wrap(owner: type, name: str, make: Callable[[Any], Any]) -> None:
    original = getattr(owner, name)  # AttributeError: a mitmproxy this was not written for
    if getattr(original, _PATCHED, False):
        return
    wrapper = make(original)
    setattr(wrapper, _PATCHED, True)
    setattr(owner, name, wrapper)


def limit_request_bodies_only() -> None:
    """`HttpStream.check_body_size(self, request: bool)` (a generator returning True when it
    refused the body) checks requests only; a response's size is the addon's decision."""
    from mitmproxy.proxy.layers.http import HttpStream

    def make(original: Any) -> Any:
        def check_body_size(self, request: bool):
            if request:
                return (yield from original(self, request))
            return False

        return check_body_size

    _wrap(HttpStream, "check_body_size", make)


def reset_refused_uploads() -> None:
    """After mitmproxy's 413 for an HTTP/2 request over the limit, reset the stream (NO_ERROR)
    so the client stops sending and reads the 413."""
    import h2.errors
    import h2.exceptions
    from mitmproxy.proxy.commands import SendData
    from mitmproxy.proxy.layers.http import ErrorCode, ResponseProtocolError
    from mitmproxy.proxy.layers.http._http2 import Http2Connection

    def make(original: Any) -> Any:
        def _handle_event(self, event):
            yield from original(self, event)
            if (isinstance(event, ResponseProtocolError)
                    and event.code is ErrorCode.REQUEST_TOO_LARGE
                    and not self.is_closed(event.stream_id)):
                try:
                    self.h2_conn.reset_stream(event.stream_id, h2.errors.ErrorCodes.NO_ERROR)
                except h2.exceptions.H2Error:  # the stream ended meanwhile: nothing to stop
                    return
                data = self.h2_conn.data_to_send()
                if data:
                    yield SendData(self.conn, data)

        return _handle_event

    _wrap(Http2Connection, "_handle_event", make)


class BodyBuffer:
    """mitmproxy's ReceiveBuffer interface (`+=`, len, bool, bytes(), clear) over one BytesIO:
    `bytes()` returns BytesIO's own buffer (no copy when nothing else shares it)."""

    def __init__(self) -> None:
        self._io = io.BytesIO()

    def __iadd__(self, other: bytes) -> BodyBuffer:
        self._io.write(other)
        return self

    def __len__(self) -> int:
        return self._io.tell()

    def __bool__(self) -> bool:
        return self._io.tell() > 0

    def __bytes__(self) -> bytes:
        return self._io.getvalue()

    def clear(self) -> None:
        self._io = io.BytesIO()


def one_copy_request_bodies() -> None:
    """`HttpStream.__init__` sets `request_body_buf = ReceiveBuffer()`; it gets a BodyBuffer."""
    from mitmproxy.proxy.layers.http import HttpStream

    def make(original: Any) -> Any:
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            if not hasattr(self, "request_body_buf"):
                raise AttributeError("HttpStream has no request_body_buf")
            self.request_body_buf = BodyBuffer()

        return __init__

    _wrap(HttpStream, "__init__", make)


TLS_SLICE = 256 * 1024


def encrypt_in_slices() -> None:
    """`TLSLayer.send_data(self, data)`: the plaintext is encrypted `TLS_SLICE` bytes at a
    time, the ciphertext of each read out of the BIO (as SendData) before the next; toward an
    upstream, each slice after the first waits for the transport to drain (`pacing`)."""
    from mitmproxy.proxy.layers.tls import ServerTLSLayer, TLSLayer

    from agentcage.gateway.pacing import SendWindow, UpstreamSendPausedHook

    def make(original: Any) -> Any:
        def send_data(self, data: bytes):
            if len(data) <= TLS_SLICE:
                return (yield from original(self, data))
            window = (SendWindow(self.context.client, self.conn)
                      if isinstance(self, ServerTLSLayer) else None)
            view = memoryview(data)
            for start in range(0, len(data), TLS_SLICE):
                if start and window is not None and not window.unpaced:
                    yield UpstreamSendPausedHook(window)
                yield from original(self, bytes(view[start:start + TLS_SLICE]))
            return None

        return send_data

    _wrap(TLSLayer, "send_data", make)


DRAIN_LIMIT = 1024 ** 3  # bytes of a refused upload read and thrown away before a hard close
_DRAIN = "_agentcage_drain"  # on an Http1Server: bytes it may still throw away, or absent


def drain_refused_uploads() -> None:
    """`Http1Server.send(ResponseProtocolError REQUEST_TOO_LARGE)` sends the 413 but does not
    close; `Http1Server._handle_event` counts what is then thrown away (closing past the
    limit); `Http1Server.mark_done(request=True)` closes once the request has ended."""
    from mitmproxy.connection import ConnectionState
    from mitmproxy.proxy.commands import CloseConnection, SendData
    from mitmproxy.proxy.events import DataReceived
    from mitmproxy.proxy.layers.http import ErrorCode, ResponseProtocolError
    from mitmproxy.proxy.layers.http._http1 import Http1Server, make_error_response

    def make_send(original: Any) -> Any:
        def send(self, event):
            if (isinstance(event, ResponseProtocolError)
                    and event.code is ErrorCode.REQUEST_TOO_LARGE
                    and not self.request_done and self.conn.state & ConnectionState.CAN_WRITE):
                status = event.code.http_status_code()
                if not self.response and status is not None:
                    yield SendData(self.conn, make_error_response(status, event.message))
                setattr(self, _DRAIN, DRAIN_LIMIT)
                return None
            return (yield from original(self, event))

        return send

    def make_handle(original: Any) -> Any:
        def _handle_event(self, event):
            left = getattr(self, _DRAIN, None)
            if left is not None and isinstance(event, DataReceived):
                left -= len(event.data)
                setattr(self, _DRAIN, left)
                if left < 0:
                    delattr(self, _DRAIN)
                    yield CloseConnection(self.conn)
                    return None
            return (yield from original(self, event))

        return _handle_event

    def make_mark_done(original: Any) -> Any:
        def mark_done(self, *, request=False, response=False):
            yield from original(self, request=request, response=response)
            if request and getattr(self, _DRAIN, None) is not None:
                delattr(self, _DRAIN)
                yield CloseConnection(self.conn)

        return mark_done

    _wrap(Http1Server, "send", make_send)
    _wrap(Http1Server, "_handle_event", make_handle)
    _wrap(Http1Server, "mark_done", make_mark_done)


def apply_all() -> None:
    limit_request_bodies_only()
    reset_refused_uploads()
    drain_refused_uploads()
    one_copy_request_bodies()
    encrypt_in_slices()
