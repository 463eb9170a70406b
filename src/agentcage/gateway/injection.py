"""Secret injection into a request that the whole chain allowed: placeholders swapped for real
values where a rule allows (credential headers; URL and body with `inject_body`). A placeholder
of this cage toward any other host refuses the request, and then nothing is injected anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from mitmproxy import http

from agentcage.gateway.flowstate import state
from agentcage.gateway.messages import is_json, raw_headers
from agentcage.secrets.inject import Injector


@dataclass(frozen=True)
class InjectionResult:
    names: tuple[str, ...] = ()  # env names injected
    refusal: str | None = None  # why the request must be refused (nothing was injected)


def inject_request(flow: http.HTTPFlow, host: str, body: bytes,
                   injector: Injector) -> InjectionResult:
    """Change `flow.request` in place (headers, path, body); `body` is its decoded body. The
    path as the cage sent it is kept in the flow's state, for the audit."""
    req = flow.request
    headers = injector.inject_headers(host, req.headers.items(multi=True))
    url = injector.inject_url(host, req.path)
    text = None
    if body and b"agentcage" in body:
        text = injector.inject_text(host, body, json_string=is_json(req.headers))
    refusals = [r.blocked for r in (headers, url, text) if r is not None and r.blocked]
    if refusals:
        return InjectionResult(refusal="; ".join(refusals))
    names: set[str] = set(headers.injected) | set(url.injected)
    if headers.injected:
        req.headers = raw_headers(headers.value)  # type: ignore[arg-type]
    if url.injected:
        state(flow).path = req.path
        req.path = url.value  # type: ignore[assignment]
    if text is not None and text.injected:
        names |= set(text.injected)
        req.set_content(text.value)  # type: ignore[arg-type]  # re-encoded, length fixed
    return InjectionResult(tuple(sorted(names)))
