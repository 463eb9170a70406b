"""Closing a flow's connections from a hook, where `flow.kill()` is not enough.

mitmproxy acts on `flow.kill()` only at its next hook point: a WebSocket connection, a response
still streaming, or a request waiting for an upstream that never answers would stay open. The
proxy server's handler for the client connection owns every transport of the flow; closing
them there is what a layer's CloseConnection would do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any


def handler_of(client_conn: Any) -> Any:
    """The proxy server's handler of a client connection (it owns the transports of every
    connection made for that client), or None."""
    try:
        from mitmproxy import ctx

        server = ctx.master.addons.get("proxyserver")
        return server.connections.get(client_conn.id) if server else None
    except Exception:  # no proxy server (unit tests)
        return None


def _handler(flow: Any) -> Any:
    return handler_of(flow.client_conn)


def close(flow: Any, *, client: bool = True, server: bool = True) -> bool:
    """Close the flow's client and/or server connection now; False when no proxy server runs
    (as in unit tests). `flow.kill()` is called too, for mitmproxy's own bookkeeping."""
    with contextlib.suppress(Exception):
        flow.kill()
    handler = _handler(flow)
    if handler is None:
        return False
    for conn, wanted in ((flow.client_conn, client), (flow.server_conn, server)):
        if wanted and conn in handler.transports:
            handler.close_connection(conn)
    return True


def transport(flow: Any, which: str) -> Any:
    """The asyncio transport of the flow's `client` or `server` connection, or None."""
    handler = _handler(flow)
    if handler is None:
        return None
    conn = flow.client_conn if which == "client" else flow.server_conn
    io = handler.transports.get(conn)
    writer = getattr(io, "writer", None) if io is not None else None
    return getattr(writer, "transport", None)


def cut(clients: Iterable[Any]) -> int:
    """Close every connection of each client connection (its own and those made upstream for
    it): what a revoked grant was used through. How many clients were still connected."""
    count = 0
    for client in list(clients):
        handler = handler_of(client)
        if handler is None:
            continue
        for conn in list(handler.transports):
            with contextlib.suppress(Exception):
                handler.close_connection(conn)
        count += 1
    return count
