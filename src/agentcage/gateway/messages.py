"""Small helpers over mitmproxy messages, shared by the steps that change them."""

from __future__ import annotations

import json
from collections.abc import Sequence

from mitmproxy import http


def raw_headers(items: Sequence[tuple[str, str]]) -> http.Headers:
    """Headers from (name, value) pairs, bytes kept as they were (surrogate-escaped)."""
    return http.Headers([(k.encode("utf-8", "surrogateescape"),
                          v.encode("utf-8", "surrogateescape")) for k, v in items])


def is_json(headers: http.Headers) -> bool:
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def content_codings(message: http.Message) -> list[str]:
    return message.headers.get_all("content-encoding")


def blocked_response(status: int, reason: str, host: str, by: str,
                     ask: str | None = None) -> http.Response:
    """The gateway's own answer to a refused request: JSON the client can tell apart from a
    network failure; `ask`: how the cage can ask for what was refused (the policy API)."""
    doc = {"blocked": True, "reason": reason, "host": host, "by": by}
    if ask:
        doc["how_to_ask"] = ask
    body = json.dumps(doc)
    return http.Response.make(
        status, body.encode(), {"Content-Type": "application/json", "X-Agentcage-Blocked": by}
    )


def drop_interim_continue(request: http.Request) -> None:
    """Drop `Expect: 100-continue` from a request of unknown length (chunked).

    mitmproxy answers the Expect itself, and once it has sent that interim 100 it neither
    sends the 413 nor closes the connection when the body then passes the size limit: the
    client uploads into a connection that never answers (measured with `curl -T -`). Without
    the 100, a client sends the body after its own short wait (curl: 1 s) and gets the 413 at
    once. A declared Content-Length within the limit cannot pass it: that Expect is kept."""
    if "expect" in request.headers and "content-length" not in request.headers:
        del request.headers["expect"]
