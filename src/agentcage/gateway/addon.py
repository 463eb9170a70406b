"""The mitmproxy addon: every request decided by name, every decision audited, every fault a block.

Stages, in the order mitmproxy calls them:
- `http_connect` (regular proxy): the CONNECT target must be an allowed name on an allowed port.
- `requestheaders`: find the target name (SNI, Host, or the request line), refuse SNI != Host,
  check the port, rate-limit per host, run the header-phase inspectors, then retarget the request
  to the name (the cage dialled the gateway's own address).
- `request`: body-phase inspectors (issue 5 adds them).
- `server_connect`: a second, stateless gate over every upstream connection.
- `response` / `error` / `server_connect_error`: the audit record of what really happened.

Every hook is wrapped: an exception blocks the flow (403, or kill when a response cannot be set)
and writes an audit record. Nothing is ever audited as allowed before an upstream answered.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from mitmproxy import http
from mitmproxy.proxy.mode_specs import TransparentMode

from agentcage.addresses import parse_ip
from agentcage.gateway.audit import AuditRecord
from agentcage.gateway.inspectors import (
    Decision,
    InspectionContext,
    Inspector,
    RequestView,
    run_chain,
)
from agentcage.gateway.ratelimit import HostRateLimiter
from agentcage.policy import Policy

META_AUDITED = "agentcage.audited"
META_DECISIONS = "agentcage.decisions"
META_TARGET = "agentcage.target"
_RESPONDING_STAGES = ("requestheaders", "request", "http_connect", "response")


class Refusal(Exception):
    """A policy refusal raised inside a stage; turned into a 4xx with a JSON body."""

    def __init__(self, reason: str, by: str, status: int = 403):
        super().__init__(reason)
        self.reason, self.by, self.status = reason, by, status


def _name(value: str | None) -> str | None:
    if not value:
        return None
    return value.strip().rstrip(".").lower() or None


def split_host_header(value: str | None) -> tuple[str | None, int | None]:
    """('name', port) from a Host header value; IPv6 literals keep their brackets off."""
    if not value:
        return None, None
    text = value.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    try:
        return _name(host), int(port) if port else None
    except ValueError:
        return _name(host), -1


def _guarded(stage: str):
    """Wrap a flow hook: an unexpected exception blocks the flow and is audited (fail closed)."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(self: CageAddon, subject: Any):
            try:
                return fn(self, subject)
            except Exception as e:  # fail closed, never let the flow continue
                try:
                    self._fault(stage, subject, e)
                except Exception as again:  # the block is in place; only the audit failed
                    print(f"agentcage-gateway: cannot audit a fault in {stage}: {again!r}",
                          file=sys.stderr, flush=True)
            return None

        return wrapper

    return decorate


class CageAddon:
    def __init__(
        self,
        policy: Callable[[], Policy],
        audit: Callable[[AuditRecord], None],
        chain: Sequence[Inspector],
        tcp_ports: Sequence[int],
        limiter: HostRateLimiter,
        clock: Callable[[], float] = time.time,
        fault_host: str | None = None,
    ):
        self.policy = policy
        self.audit = audit
        self.chain = tuple(chain)
        self.tcp_ports = frozenset(tcp_ports)
        self.limiter = limiter
        self.clock = clock
        self.fault_host = fault_host

    # ---- helpers -------------------------------------------------------------------------

    def _record(self, flow: http.HTTPFlow, decision: str, reason: str, by: str,
                status: int | None = None, host: str | None = None,
                port: int | None = None) -> None:
        if flow.metadata.get(META_AUDITED):
            return
        flow.metadata[META_AUDITED] = True
        req = flow.request
        target = flow.metadata.get(META_TARGET)
        host = host or (target[0] if target else req.host)
        port = port or (target[1] if target else req.port)
        self.audit(
            AuditRecord(
                direction="outbound",
                decision=decision,
                reason=reason,
                host=host,
                method=req.method,
                port=port,
                path=req.path,
                url=f"{req.scheme}://{host}:{port}{req.path}",
                by=by,
                status=status,
                inspectors=tuple(flow.metadata.get(META_DECISIONS, ())),
            )
        )

    @staticmethod
    def _blocked_response(status: int, reason: str, host: str, by: str) -> http.Response:
        body = json.dumps({"blocked": True, "reason": reason, "host": host, "by": by})
        return http.Response.make(
            status, body.encode(), {"Content-Type": "application/json", "X-Agentcage-Blocked": by}
        )

    def _block(self, flow: http.HTTPFlow, reason: str, by: str, status: int = 403,
               host: str | None = None) -> None:
        shown = host or _name(flow.request.host) or ""
        flow.response = self._blocked_response(status, reason, shown, by)
        self._record(flow, "blocked", reason, by, status=status, host=host)

    def _fault(self, stage: str, subject: Any, error: Exception) -> None:
        """A hook raised: block what it was handling, whatever state it left, and audit it."""
        reason = f"internal error in {stage}: {type(error).__name__}: {error}"
        if stage == "server_connect":
            subject.server.error = f"agentcage: {reason}"  # first: the connection never opens
            self._upstream_record(subject, reason, "fail-closed")
            return
        flow = subject
        responded = False
        if stage in _RESPONDING_STAGES:  # a 403 can still replace the request or response
            with contextlib.suppress(Exception):
                host = _name(flow.request.host) or ""
                flow.response = self._blocked_response(403, reason, host, "fail-closed")
                responded = True
        if not responded:
            with contextlib.suppress(Exception):
                flow.kill()
        try:
            flow.metadata[META_AUDITED] = False
            self._record(flow, "blocked", reason, "fail-closed", status=403 if responded else None)
        except Exception:
            self.audit(AuditRecord("outbound", "blocked", reason, by="fail-closed"))

    def _upstream_record(self, data: Any, reason: str, by: str) -> None:
        host, port = data.server.address or ("", None)
        self.audit(
            AuditRecord("upstream", "blocked", reason, host=str(host), port=port, by=by)
        )

    def _port_refusal(self, port: int) -> str | None:
        if port not in self.tcp_ports:
            return f"port {port} not allowed"
        return None

    def name_refusal(self, host: str, port: int) -> str | None:
        """The stateless verdict on dialling host:port (None = allowed)."""
        if parse_ip(host) is not None:
            return "IP literal"
        if (why := self._port_refusal(port)) is not None:
            return why
        verdict = self.policy().decide(host, self.clock())
        return None if verdict.allowed else verdict.reason

    def _target(self, flow: http.HTTPFlow) -> tuple[str, int]:
        req = flow.request
        sni = _name(flow.client_conn.sni)
        header_host, header_port = split_host_header(req.host_header)
        if isinstance(flow.client_conn.proxy_mode, TransparentMode):
            name = sni or header_host
        else:
            name = _name(req.host)
        if not name:
            raise Refusal("no SNI and no Host header: cannot tell the destination", "identity")
        if sni and header_host and sni != header_host:
            raise Refusal(f"SNI {sni!r} does not match Host {header_host!r}", "identity")
        if sni and sni != name:
            raise Refusal(f"SNI {sni!r} does not match target {name!r}", "identity")
        if header_host and header_host != name:
            raise Refusal(f"Host header {header_host!r} does not match {name!r}", "identity")
        if header_port is not None and header_port != req.port:
            raise Refusal(f"Host header port {header_port} does not match {req.port}", "identity")
        return name, req.port

    # ---- hooks ---------------------------------------------------------------------------

    @_guarded("http_connect")
    def http_connect(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error:
            return
        host, port = _name(flow.request.host) or "", flow.request.port
        why = self.name_refusal(host, port)
        if why is not None:
            self._block(flow, why, "connect", host=host)

    @_guarded("requestheaders")
    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or flow.request.method == "CONNECT":
            return
        try:
            name, port = self._target(flow)
            flow.metadata[META_TARGET] = (name, port)
            if self.fault_host is not None and name == self.fault_host:
                raise RuntimeError("injected fault")
            if (why := self._port_refusal(port)) is not None:
                raise Refusal(why, "ports")
            if not self.limiter.allow(name):
                raise Refusal("rate limit exceeded", "rate_limit", status=429)
            result = self._inspect(flow, "headers", name, port)
            if (blocker := result) is not None:
                raise Refusal(blocker.reason, blocker.inspector)
        except Refusal as r:
            target = flow.metadata.get(META_TARGET)
            self._block(flow, r.reason, r.by, r.status, host=target[0] if target else None)
            return
        if flow.request.host != name:
            flow.request.host = name  # retarget: upstream chosen by name, never by dialled IP

    @_guarded("request")
    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or flow.request.method == "CONNECT":
            return
        name, port = flow.metadata[META_TARGET]
        blocker = self._inspect(flow, "body", name, port)
        if blocker is not None:
            self._block(flow, blocker.reason, blocker.inspector, host=name)

    def _inspect(self, flow: http.HTTPFlow, phase: str, name: str, port: int) -> Decision | None:
        req = flow.request
        view = RequestView(
            method=req.method,
            scheme=req.scheme,
            host=name,
            port=port,
            path=req.path,
            headers=tuple((k, v) for k, v in req.headers.items(multi=True)),
            body=req.raw_content if phase == "body" else None,
        )
        ctx = InspectionContext(self.policy(), self.clock())
        result = run_chain(self.chain, phase, view, ctx)  # type: ignore[arg-type]
        recorded = list(flow.metadata.get(META_DECISIONS, ()))
        recorded.extend(d.as_record() for d in result.decisions)
        flow.metadata[META_DECISIONS] = recorded
        return result.blocked_by

    @_guarded("server_connect")
    def server_connect(self, data: Any) -> None:
        if data.server.error:
            return
        host, port = data.server.address
        why = self.name_refusal(str(host), int(port))
        if data.server.via is not None:
            why = "upstream proxies are not allowed"
        if why is not None:
            data.server.error = f"agentcage: refused {host}:{port}: {why}"
            self._upstream_record(data, why, "server_connect")

    @_guarded("server_connect_error")
    def server_connect_error(self, data: Any) -> None:
        self._upstream_record(data, f"upstream connect failed: {data.server.error}", "upstream")

    @_guarded("response")
    def response(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get(META_AUDITED):
            return
        flagged = any(d.get("action") == "flag" for d in flow.metadata.get(META_DECISIONS, ()))
        self._record(
            flow,
            "flagged" if flagged else "allowed",
            "upstream answered",
            "upstream",
            status=flow.response.status_code if flow.response else None,
        )

    @_guarded("error")
    def error(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get(META_AUDITED):
            return
        msg = flow.error.msg if flow.error else "unknown error"
        self._record(flow, "blocked", f"upstream error: {msg}", "upstream")

    def tcp_start(self, flow: Any) -> None:
        flow.kill()
        self.audit(AuditRecord("outbound", "blocked", "raw TCP is not allowed", by="rawtcp"))

    def udp_start(self, flow: Any) -> None:
        flow.kill()
        self.audit(AuditRecord("outbound", "blocked", "UDP is not allowed", by="rawudp"))
