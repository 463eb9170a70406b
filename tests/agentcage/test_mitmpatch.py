"""The gateway's changes to mitmproxy: applied once, and refused loudly on a mitmproxy that lacks
what they wrap (end to end: test_streaming_world.py, large downloads and refused uploads)."""

from __future__ import annotations

import pytest
from mitmproxy.proxy.layers.http import HttpStream
from mitmproxy.proxy.layers.http._http1 import Http1Server
from mitmproxy.proxy.layers.http._http2 import Http2Connection
from mitmproxy.proxy.layers.tls import TLSLayer

from agentcage.gateway import mitmpatch


def patched() -> tuple:
    return (HttpStream.check_body_size, Http2Connection._handle_event, HttpStream.__init__,
            Http1Server.send, Http1Server._handle_event, Http1Server.mark_done,
            TLSLayer.send_data)


def test_apply_all_is_idempotent():
    mitmpatch.apply_all()
    first = patched()
    mitmpatch.apply_all()
    assert patched() == first
    assert all(getattr(f, mitmpatch._PATCHED) for f in first)


def test_request_bodies_are_collected_in_one_buffer_handed_over_without_a_copy():
    buf = mitmpatch.BodyBuffer()
    assert not buf and len(buf) == 0
    for piece in (b"abc", b"", b"defg"):
        buf += piece
    assert len(buf) == 7 and bytes(buf) == b"abcdefg"
    buf.clear()
    assert bytes(buf) == b"" and not buf


def test_a_missing_method_stops_the_gateway_instead_of_running_unpatched():
    class NotMitmproxy:
        pass

    with pytest.raises(AttributeError):
        mitmpatch._wrap(NotMitmproxy, "check_body_size", lambda original: original)


def test_response_bodies_are_no_longer_size_checked():
    """The narrowed check returns False for a response without looking at the limit."""
    mitmpatch.apply_all()
    gen = HttpStream.check_body_size(object(), False)  # type: ignore[arg-type]
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value is False
