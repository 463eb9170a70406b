"""Every change the gateway makes to mitmproxy's own behaviour, in one place.

Both are about bodies, both pinned to mitmproxy 12 (the dependency says <13, `agentcage doctor`
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
   (The HTTP/1.1 twin, an upload after `Expect: 100-continue` that is never answered, is avoided
   in the addon: see `CageAddon._no_interim_continue`.)
"""

from __future__ import annotations

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


def apply_all() -> None:
    limit_request_bodies_only()
    reset_refused_uploads()
