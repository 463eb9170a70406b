"""The mitmproxy addon: every request decided by name, every decision audited, every fault a block.

Stages, in the order mitmproxy calls them:
- `http_connect` (regular proxy): the CONNECT target must be an allowed name on an allowed port.
- `requestheaders`: find the target name (SNI, Host, or the request line), refuse SNI != Host,
  check the port, rate-limit per host, run the header-phase inspectors, then retarget the request
  to the name (the cage dialled the gateway's own address).
- `request`: the body-phase inspectors over the DECODED body (a body that cannot be decoded, or
  decodes past `max_request_body`, is blocked), then secret injection: placeholders swapped for
  real values where a rule allows (a placeholder toward any other host blocks).
- `server_connect`: a second, stateless gate over every upstream connection.
- `responseheaders`: a response of unknown length or over `max_request_body` is streamed
  (`gateway.streaming`): decoded and redacted piece by piece, headers redacted now; a body that
  would need redacting in an encoding the gateway cannot decode is refused (the flow killed).
- `response`: every real secret value in the response (body and headers, any encoding the
  redactor knows) replaced by its placeholder before the cage sees it; then the audit record.
- `error` / `server_connect_error`: the audit record of what really happened.
- capture (`capture.enable_har`): the cage's request is copied in `request` before injection, the
  server's response in `response` before redaction; one capture.jsonl line is written once the
  cage's side is final (`response`, `error`, a refused CONNECT). Capture never decides: its
  failures are audited and swallowed.
- `websocket_message`: messages from the cage go through the body-phase chain and injection;
  messages from the server are redacted. The chain sees each message after the last `WS_TAIL`
  bytes the cage sent before it on the connection, so a key split across messages (or random
  material trickled in small ones) is still seen whole. A WebSocket flow's capture line is
  written when the connection ends (`websocket_end`), with its messages in both views.

Every hook is wrapped: an exception blocks the flow (403, or kill when a response cannot be set)
and writes an audit record. Nothing is ever audited as allowed before an upstream answered.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mitmproxy import http
from mitmproxy.proxy.mode_specs import TransparentMode

from agentcage.addresses import parse_ip
from agentcage.gateway.audit import AuditRecord
from agentcage.gateway.capture import (
    CaptureLog,
    WebSocketCapture,
    body_doc,
    request_doc,
    response_doc,
)
from agentcage.gateway.decoding import DecodeError
from agentcage.gateway.inspectors import (
    Decision,
    InspectionContext,
    Inspector,
    Phase,
    RequestView,
)
from agentcage.gateway.ratelimit import HostRateLimiter
from agentcage.gateway.streaming import ResponseStream, must_stream, plan
from agentcage.inspect.chain import first_block, run_chain
from agentcage.policy import Policy
from agentcage.secrets.inject import Injector
from agentcage.secrets.redact import Redactor

META_AUDITED = "agentcage.audited"
META_DECISIONS = "agentcage.decisions"
META_TARGET = "agentcage.target"
META_INJECTED = "agentcage.injected"
META_REDACTED = "agentcage.redacted"
META_PATH = "agentcage.path"  # the path as the cage sent it (audited: never an injected value)
META_VERDICT = "agentcage.verdict"  # {decision, reason, by} of the audit record
# Capture (capture.jsonl): the request as the cage sent it, taken in `request` BEFORE injection
# (None: that snapshot failed, and the flow is then captured without it); whether the flow went
# upstream; the response as the server sent it, taken in `response` BEFORE redaction.
META_CAPTURE_IN = "agentcage.capture.inbound_request"
META_FORWARDED = "agentcage.forwarded"
META_CAPTURE_OUT = "agentcage.capture.outbound_response"
# A streamed response: its ResponseStream, and the headers as the server sent them.
META_STREAM = "agentcage.stream"
META_STREAM_HEADERS = "agentcage.stream.server_headers"
# WebSocket: the tail of what the cage sent before (inspected with each message), the captured
# messages, and whether the flow's capture line was written already.
META_WS_TAIL = "agentcage.ws.tail"
META_WS_CAPTURE = "agentcage.ws.capture"
META_WS_CAPTURED = "agentcage.ws.captured"
META_WS_CUT = "agentcage.ws.cut"  # a message was blocked: nothing more passes either way
WS_TAIL = 4096
_RESPONDING_STAGES = ("requestheaders", "request", "http_connect", "response")
DEFAULT_MAX_BODY = 10 * 1024 * 1024


@dataclass(frozen=True)
class Armour:
    """What one version of the staged secrets gives the gateway: the inspector chain, the
    injector and the redactor. Swapped as one object on reload, so a request sees one version."""

    chain: tuple[Inspector, ...]
    injector: Injector
    redactor: Redactor
    names: tuple[str, ...] = ()  # env names of the staged secrets (for the audit)
    placeholders: tuple[str, ...] = ()  # of the staged secrets (for the reload ack)


class BodyUnreadable(Exception):
    """A request body the inspectors cannot see in full (unknown encoding, corrupt, too big)."""


def decoded_body(message: http.Message, limit: int) -> bytes:
    """The body with its Content-Encoding undone, never more than `limit` bytes decoded (a
    compression bomb is refused, not inflated). Raises BodyUnreadable when it cannot be seen."""
    raw = message.raw_content
    if raw is None:
        raise BodyUnreadable("body was streamed, not buffered")
    encodings = [part.strip().lower() for value in message.headers.get_all("content-encoding")
                 for part in value.split(",") if part.strip()]
    data = raw
    for encoding in reversed(encodings):
        if encoding == "identity":
            continue
        if encoding in ("gzip", "x-gzip", "deflate"):
            wbits = 47 if encoding != "deflate" else 15  # 47: gzip or zlib header
            try:
                d = zlib.decompressobj(wbits)
                out = d.decompress(data, limit + 1)
                if encoding == "deflate" and not out and data:
                    raise zlib.error("empty")
            except zlib.error:
                if encoding != "deflate":
                    raise BodyUnreadable(f"corrupt {encoding} body") from None
                try:  # raw deflate, as some clients send it
                    d = zlib.decompressobj(-15)
                    out = d.decompress(data, limit + 1)
                except zlib.error:
                    raise BodyUnreadable("corrupt deflate body") from None
            if len(out) > limit or d.unconsumed_tail:
                raise BodyUnreadable(f"body decodes to more than {limit} bytes")
            data = out
        else:
            raise BodyUnreadable(f"cannot inspect a body with Content-Encoding {encoding!r}")
    if len(data) > limit:
        raise BodyUnreadable(f"body of more than {limit} bytes")
    return data


def _as_bytes(data: bytes | str) -> bytes:
    return data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)


def _is_json(headers: http.Headers) -> bool:
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def _raw_headers(items: Sequence[tuple[str, str]]) -> http.Headers:
    return http.Headers([(k.encode("utf-8", "surrogateescape"),
                          v.encode("utf-8", "surrogateescape")) for k, v in items])


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
        injector: Injector | None = None,
        redactor: Redactor | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        capture: CaptureLog | None = None,
    ):
        self.policy = policy
        self.audit = audit
        self.armour = Armour(
            tuple(chain), injector or Injector((), ()), redactor or Redactor(())
        )
        self.max_body = max_body
        self.tcp_ports = frozenset(tcp_ports)
        self.limiter = limiter
        self.clock = clock
        self.fault_host = fault_host
        self.capture = capture

    @property
    def chain(self) -> tuple[Inspector, ...]:
        return self.armour.chain

    def rearm(self, armour: Armour) -> None:
        """Use a new version of the staged secrets from the next request on (one assignment)."""
        self.armour = armour

    # ---- helpers -------------------------------------------------------------------------

    def _record(self, flow: http.HTTPFlow, decision: str, reason: str, by: str,
                status: int | None = None, host: str | None = None,
                port: int | None = None) -> None:
        if flow.metadata.get(META_AUDITED):
            return
        flow.metadata[META_AUDITED] = True
        flow.metadata[META_VERDICT] = {"decision": decision, "reason": reason, "by": by}
        req = flow.request
        target = flow.metadata.get(META_TARGET)
        host = host or (target[0] if target else req.host)
        port = port or (target[1] if target else req.port)
        path = flow.metadata.get(META_PATH, req.path)
        self.audit(
            AuditRecord(
                direction="outbound",
                decision=decision,
                reason=reason,
                host=host,
                method=req.method,
                port=port,
                path=path,
                url=f"{req.scheme}://{host}:{port}{path}",
                by=by,
                status=status,
                inspectors=tuple(flow.metadata.get(META_DECISIONS, ())),
                secrets_injected=tuple(flow.metadata.get(META_INJECTED, ())),
                secrets_redacted=tuple(flow.metadata.get(META_REDACTED, ())),
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
            self._capture(flow)

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
        self._no_interim_continue(flow)

    def _no_interim_continue(self, flow: http.HTTPFlow) -> None:
        """Drop `Expect: 100-continue` from a request of unknown length (chunked).

        mitmproxy answers the Expect itself, and once it has sent that interim 100 it neither
        sends the 413 nor closes the connection when the body then passes the size limit: the
        client uploads into a connection that never answers (measured with `curl -T -`). Without
        the 100, a client sends the body after its own short wait (curl: 1 s) and gets the 413 at
        once. A declared Content-Length within the limit cannot pass it: that Expect is kept."""
        req = flow.request
        if "expect" in req.headers and "content-length" not in req.headers:
            del req.headers["expect"]

    @_guarded("request")
    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or flow.request.method == "CONNECT":
            return
        name, port = flow.metadata[META_TARGET]
        armour = self.armour  # one version of the secrets for the whole request
        try:
            body = decoded_body(flow.request, self.max_body)
        except BodyUnreadable as e:
            self._block(flow, f"request body cannot be inspected: {e}", "body", host=name)
            return
        blocker = self._inspect(flow, "body", name, port, body, armour)
        if blocker is not None:
            self._block(flow, blocker.reason, blocker.inspector, host=name)
            return
        self._snapshot_inbound(flow, name, port, body, armour)  # before injection changes it
        self._inject(flow, name, body, armour)

    def _inject(self, flow: http.HTTPFlow, host: str, body: bytes, armour: Armour) -> None:
        """Swap placeholders for real values where a rule allows; a placeholder toward any
        other host blocks the request (nothing is injected anywhere then)."""
        req = flow.request
        injector = armour.injector
        headers = injector.inject_headers(host, req.headers.items(multi=True))
        url = injector.inject_url(host, req.path)
        text = None
        if body and b"agentcage" in body:
            text = injector.inject_text(host, body, json_string=_is_json(req.headers))
        refusals = [r.blocked for r in (headers, url, text) if r is not None and r.blocked]
        if refusals:
            self._block(flow, "; ".join(refusals), "injection", host=host)
            return
        names: set[str] = set(headers.injected) | set(url.injected)
        if headers.injected:
            req.headers = _raw_headers(headers.value)  # type: ignore[arg-type]
        if url.injected:
            flow.metadata[META_PATH] = req.path
            req.path = url.value  # type: ignore[assignment]
        if text is not None and text.injected:
            names |= set(text.injected)
            req.set_content(text.value)  # type: ignore[arg-type]  # re-encoded, length fixed
        flow.metadata[META_INJECTED] = tuple(sorted(names))
        flow.metadata[META_FORWARDED] = True

    def _inspect(self, flow: http.HTTPFlow, phase: Phase, name: str, port: int,
                 body: bytes | None = None, armour: Armour | None = None) -> Decision | None:
        req = flow.request
        view = RequestView(
            method=req.method,
            scheme=req.scheme,
            host=name,
            port=port,
            path=req.path,
            headers=tuple((k, v) for k, v in req.headers.items(multi=True)),
            body=body if phase == "body" else None,
        )
        ctx = InspectionContext(self.policy(), self.clock())
        chain = (armour or self.armour).chain
        decisions = run_chain(chain, view, ctx, phase=phase)
        recorded = list(flow.metadata.get(META_DECISIONS, ()))
        recorded.extend(d.as_record() for d in decisions)
        flow.metadata[META_DECISIONS] = recorded
        return first_block(decisions)

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

    @_guarded("responseheaders")
    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """Choose between buffering the response (redacted whole in `response`) and streaming
        it; a streamed response has its headers redacted here, before they are sent."""
        resp = flow.response
        if resp is None or flow.error or flow.metadata.get(META_AUDITED):
            return
        if not must_stream(flow.request.method, resp.status_code, resp.headers, self.max_body):
            return
        armour = self.armour  # one version of the secrets for the whole body
        cap = 0
        with contextlib.suppress(Exception):  # capture never decides
            if self._captured(flow):
                cap = self.capture.config.max_body_size  # type: ignore[union-attr]
        flow.metadata[META_STREAM_HEADERS] = tuple(resp.headers.items(multi=True))
        try:
            stream = plan(armour.redactor, resp.headers.get_all("content-encoding"),
                          functools.partial(self._stream_failed, flow), cap)
        except DecodeError as e:
            flow.metadata[META_STREAM_HEADERS] = None
            self._record(flow, "blocked", f"response body cannot be redacted: {e}", "redaction",
                         status=resp.status_code)
            flow.kill()
            return
        if stream.redactor is not None:
            headers, found = armour.redactor.redact_headers(resp.headers.items(multi=True))
            if found:
                flow.metadata[META_REDACTED] = tuple(sorted(found))
            headers = tuple((k, v) for k, v in headers
                            if k.lower() not in ("content-length", "content-encoding",
                                                 "transfer-encoding"))
            if self._client_speaks_http1(flow):
                headers += (("transfer-encoding", "chunked"),)  # a cut-off body stays visible
            resp.headers = _raw_headers(headers)
        flow.metadata[META_STREAM] = stream
        resp.stream = stream

    @staticmethod
    def _client_speaks_http1(flow: http.HTTPFlow) -> bool:
        return flow.client_conn.alpn != b"h2" and flow.request.http_version == "HTTP/1.1"

    def _stream_failed(self, flow: http.HTTPFlow, reason: str) -> None:
        """A streamed body could not be processed: drop the rest, kill the flow, audit it."""
        try:
            self._record(flow, "blocked", reason, "redaction",
                         status=flow.response.status_code if flow.response else None)
        finally:
            with contextlib.suppress(Exception):
                flow.kill()

    @_guarded("response")
    def response(self, flow: http.HTTPFlow) -> None:
        stream = flow.metadata.get(META_STREAM)
        if not flow.metadata.get(META_AUDITED):  # the server's answer, not one of ours
            self._snapshot_outbound_response(flow)
        if isinstance(stream, ResponseStream):
            names = set(flow.metadata.get(META_REDACTED, ())) | stream.names
            if names:
                flow.metadata[META_REDACTED] = tuple(sorted(names))
        else:
            self._redact(flow)
        if not flow.metadata.get(META_AUDITED):
            flagged = any(d.get("action") == "flag"
                          for d in flow.metadata.get(META_DECISIONS, ()))
            self._record(
                flow,
                "flagged" if flagged else "allowed",
                "upstream answered",
                "upstream",
                status=flow.response.status_code if flow.response else None,
            )
        if flow.websocket is None:
            self._capture(flow)
        # an upgraded flow is captured when the connection ends, with its messages

    def _redact(self, flow: http.HTTPFlow) -> None:
        """Every real value in the response replaced by its placeholder; a body that cannot be
        decoded is replaced by a block (the cage never gets what could not be checked)."""
        redactor = self.armour.redactor
        resp = flow.response
        if resp is None or redactor.empty:
            return
        names: set[str] = set()
        new_headers, found = redactor.redact_headers(resp.headers.items(multi=True))
        if found:
            names |= found
            resp.headers = _raw_headers(new_headers)
        if resp.raw_content:
            try:
                content = resp.get_content(strict=True)
            except ValueError:
                content = None
            if content is None:
                host = _name(flow.request.host) or ""
                flow.response = self._blocked_response(
                    502, "response body cannot be decoded for redaction", host, "redaction")
                return
            redacted = redactor.redact(content)
            if redacted.names:
                names |= redacted.names
                resp.set_content(redacted.data)
        if names:
            flow.metadata[META_REDACTED] = tuple(sorted(names))

    @_guarded("error")
    def error(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get(META_AUDITED):
            return
        msg = flow.error.msg if flow.error else "unknown error"
        if "body_size_limit" in msg:
            self._record(flow, "blocked", f"body over the size limit: {msg}", "body-size")
        else:
            self._record(flow, "blocked", f"upstream error: {msg}", "upstream")
        self._capture(flow, error=msg)

    # ---- capture (never decides anything: every failure is audited and swallowed) ----------

    def _captured(self, flow: http.HTTPFlow) -> bool:
        """Whether capture is on for this flow's destination (may raise: callers suppress)."""
        return self.capture is not None and self.capture.config.wants(self._capture_host(flow)[0])

    def _capture_failed(self, reason: str) -> None:
        try:
            self.audit(AuditRecord("capture", "flagged", reason, by="capture"))
        except Exception as again:
            print(f"agentcage-gateway: {reason} (and auditing it failed: {again!r})",
                  file=sys.stderr, flush=True)

    def _capture_host(self, flow: http.HTTPFlow) -> tuple[str, int]:
        target = flow.metadata.get(META_TARGET)
        if target:
            return target
        req = flow.request
        if req.method != "CONNECT":
            header_host, header_port = split_host_header(req.host_header)
            if header_host:
                return header_host, header_port or req.port
        return _name(req.host) or "", req.port

    def _inbound_request(self, flow: http.HTTPFlow, host: str, port: int,
                         body: bytes | None, armour: Armour) -> dict[str, Any]:
        """The request as the cage sent it; any real value in it (however it got into the
        cage) replaced by its placeholder, so the inbound view never holds one."""
        assert self.capture is not None
        req = flow.request
        doc = request_doc(req, host, port, self.capture.config.max_body_size, body=body)
        redactor = armour.redactor
        if not redactor.empty:
            headers, _ = redactor.redact_headers([(k, v) for k, v in doc["headers"]])
            doc["headers"] = [[k, v] for k, v in headers]
            doc["path"] = redactor.redact_text(doc["path"])[0]
            b = doc.get("body") or {}
            if "text" in b:
                b["text"] = redactor.redact_text(b["text"])[0]
            elif "base64" in b:
                raw = base64.b64decode(b["base64"])
                b["base64"] = base64.b64encode(redactor.redact(raw).data).decode()
        return doc

    def _snapshot_inbound(self, flow: http.HTTPFlow, host: str, port: int, body: bytes,
                          armour: Armour) -> None:
        if self.capture is None:
            return
        # set first: whatever fails below, the request is never re-read after injection
        flow.metadata[META_CAPTURE_IN] = None
        try:
            if not self.capture.config.wants(host):
                return
            flow.metadata[META_CAPTURE_IN] = self._inbound_request(flow, host, port, body,
                                                                   armour)
        except Exception as e:
            self._capture_failed(f"capture of the inbound request failed: "
                                 f"{type(e).__name__}: {e}")

    def _snapshot_outbound_response(self, flow: http.HTTPFlow) -> None:
        if self.capture is None or flow.response is None:
            return
        try:
            if not self._captured(flow):
                return
            cap = self.capture.config.max_body_size
            stream = flow.metadata.get(META_STREAM)
            if isinstance(stream, ResponseStream):
                doc = response_doc(flow.response, cap,
                                   headers=flow.metadata.get(META_STREAM_HEADERS) or ())
                doc["body"] = self._streamed_body(stream, outbound=True)
            else:
                doc = response_doc(flow.response, cap)
            flow.metadata[META_CAPTURE_OUT] = doc
        except Exception as e:
            self._capture_failed(f"capture of the upstream response failed: "
                                 f"{type(e).__name__}: {e}")

    def _capture(self, flow: http.HTTPFlow, error: str | None = None) -> None:
        """Write the flow's capture line (called once the cage's side is final)."""
        if self.capture is None:
            return
        try:
            host, port = self._capture_host(flow)
            if not self.capture.config.wants(host):
                return
            record = self._capture_record(flow, host, port, error)
        except Exception as e:
            self._capture_failed(f"capture of a flow failed: {type(e).__name__}: {e}")
            return
        self.capture.write(record)

    def _capture_record(self, flow: http.HTTPFlow, host: str, port: int,
                        error: str | None) -> dict[str, Any]:
        assert self.capture is not None
        cap = self.capture.config.max_body_size
        meta = flow.metadata
        req, resp = flow.request, flow.response
        if META_CAPTURE_IN in meta:
            inbound_request = meta[META_CAPTURE_IN]
        else:  # the flow never reached injection: flow.request is still the cage's
            inbound_request = self._inbound_request(flow, host, port, None, self.armour)
        outbound = None
        if meta.get(META_FORWARDED):
            outbound = {
                "request": request_doc(req, host, port, cap),
                "response": meta.get(META_CAPTURE_OUT),
            }
        verdict = meta.get(META_VERDICT) or {}
        ws = meta.get(META_WS_CAPTURE)
        inbound_response = None
        if resp is not None:
            inbound_response = response_doc(resp, cap)
            stream = meta.get(META_STREAM)
            if isinstance(stream, ResponseStream):
                inbound_response["body"] = self._streamed_body(stream, outbound=False)
        return {
            "v": 1,
            "id": flow.id,
            "ts": req.timestamp_start,
            "timestamps": {
                "request_start": req.timestamp_start,
                "request_end": req.timestamp_end,
                "response_start": resp.timestamp_start if resp else None,
                "response_end": resp.timestamp_end if resp else None,
            },
            "host": host,
            "port": port,
            "decision": verdict.get("decision"),
            "by": verdict.get("by"),
            "reason": verdict.get("reason"),
            "error": error,
            "secrets_injected": list(meta.get(META_INJECTED, ())),
            "secrets_redacted": list(meta.get(META_REDACTED, ())),
            "inbound": {
                "request": inbound_request,
                "response": inbound_response,
                **({"websocket": ws.inbound} if isinstance(ws, WebSocketCapture) else {}),
            },
            "outbound": ({**outbound, "websocket": ws.outbound}
                         if outbound is not None and isinstance(ws, WebSocketCapture)
                         else outbound),
        }

    @staticmethod
    def _streamed_body(stream: ResponseStream, outbound: bool) -> dict[str, Any] | None:
        """A streamed body as far as the stream kept it (decoded when it was decoded)."""
        tee = stream.outbound if outbound else stream.inbound
        doc = body_doc(tee.data, size=tee.size, cap=tee.cap, encoded=stream.encoded)
        if doc is not None:
            doc["streamed"] = True
            if stream.failure:
                doc["cut_off"] = stream.failure
        return doc

    # ---- WebSocket -----------------------------------------------------------------------

    @_guarded("websocket_message")
    def websocket_message(self, flow: http.HTTPFlow) -> None:
        """Messages from the cage: body-phase chain (after the connection's tail), then
        injection; from the server: redacted. Both captured when capture wants the host."""
        assert flow.websocket is not None
        message = flow.websocket.messages[-1]
        if flow.metadata.get(META_WS_CUT):
            # already parsed from the same read as the blocked one, before the close landed
            message.drop()
            return
        armour = self.armour
        name, port = flow.metadata.get(META_TARGET) or (_name(flow.request.host) or "",
                                                        flow.request.port)
        if not message.from_client:
            sent = message.content
            if not armour.redactor.empty:
                redacted = armour.redactor.redact(message.content)
                if redacted.names:
                    message.content = redacted.data
                    self._ws_record(flow, name, port, "allowed", "server frame redacted",
                                    "redaction", redacted=tuple(sorted(redacted.names)))
            self._ws_capture(flow, message, inbound=message.content, outbound=sent)
            return
        content = message.content
        tail = flow.metadata.get(META_WS_TAIL, b"")
        view = RequestView(method="WEBSOCKET", scheme=flow.request.scheme, host=name, port=port,
                           path=flow.request.path, headers=(), body=tail + content)
        decisions = run_chain(armour.chain, view, InspectionContext(self.policy(), self.clock()),
                              phase="body")
        blocker = first_block(decisions)
        if blocker is None:
            text = armour.injector.inject_text(name, content)
            if text.blocked:
                blocker = Decision("block", text.blocked, "injection", "high")
            elif text.injected:
                message.content = text.value  # type: ignore[assignment]
                self._ws_record(flow, name, port, "allowed", "frame injected", "injection",
                                injected=text.injected, decisions=decisions)
        if blocker is not None:
            message.drop()
            flow.metadata[META_WS_CUT] = True
            self._cut_websocket(flow)
            self._ws_record(flow, name, port, "blocked", blocker.reason, blocker.inspector,
                            decisions=decisions)
            self._ws_capture(flow, message, inbound=content, outbound=None,
                             redactor=armour.redactor,
                             blocked=f"{blocker.inspector}: {blocker.reason}")
            self._capture_websocket_flow(flow)  # the connection is cut: write it now
            return
        flow.metadata[META_WS_TAIL] = (tail + content)[-WS_TAIL:]
        self._ws_capture(flow, message, inbound=content, outbound=message.content,
                         redactor=armour.redactor)

    @staticmethod
    def _cut_websocket(flow: http.HTTPFlow) -> bool:
        """Close both ends of a WebSocket connection now. mitmproxy's WebSocket layer does not
        act on `flow.kill()`: the connection would stay open (later messages still inspected,
        one by one) and the cage's client would wait for an answer until its own timeout. The
        proxy server's handler for the connection closes it as a layer's CloseConnection would.
        Returns whether it could (False where no proxy server runs, as in unit tests)."""
        with contextlib.suppress(Exception):
            flow.kill()  # for mitmproxy's own bookkeeping (flow.error)
        try:
            from mitmproxy import ctx

            server = ctx.master.addons.get("proxyserver")
            handler = server.connections.get(flow.client_conn.id) if server else None
        except Exception:
            handler = None
        if handler is None:
            return False
        for conn in (flow.client_conn, flow.server_conn):
            if conn in handler.transports:
                handler.close_connection(conn)
        return True

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self._capture_websocket_flow(flow)

    def _ws_capture(self, flow: http.HTTPFlow, message: Any, *, inbound: Any, outbound: Any,
                    redactor: Redactor | None = None, blocked: str | None = None) -> None:
        """Record one message. `redactor`: the cage sent `inbound`, and any real value in it
        (however it got into the cage) becomes its placeholder in the inbound view; redacted
        here, only when capture is on, not on every message."""
        if self.capture is None:
            return
        try:
            if not self._captured(flow):
                return
            if redactor is not None and not redactor.empty:
                inbound = redactor.redact(inbound).data
            ws = flow.metadata.get(META_WS_CAPTURE)
            if not isinstance(ws, WebSocketCapture):
                ws = flow.metadata[META_WS_CAPTURE] = WebSocketCapture(
                    self.capture.config.max_body_size)
            ws.add(from_client=message.from_client, ts=message.timestamp,
                   text=message.is_text, inbound=_as_bytes(inbound),
                   outbound=None if outbound is None else _as_bytes(outbound), blocked=blocked)
        except Exception as e:
            self._capture_failed(f"capture of a WebSocket message failed: "
                                 f"{type(e).__name__}: {e}")

    def _capture_websocket_flow(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get(META_WS_CAPTURED):
            return
        flow.metadata[META_WS_CAPTURED] = True
        self._capture(flow)

    def _ws_record(self, flow: http.HTTPFlow, host: str, port: int, decision: str, reason: str,
                   by: str, injected: tuple[str, ...] = (), redacted: tuple[str, ...] = (),
                   decisions: Sequence[Decision] = ()) -> None:
        self.audit(AuditRecord(
            "websocket", decision, reason, host=host, method="WEBSOCKET", port=port,
            path=flow.request.path, url=f"{flow.request.scheme}://{host}:{port}{flow.request.path}",
            by=by, inspectors=tuple(d.as_record() for d in decisions),
            secrets_injected=injected, secrets_redacted=redacted,
        ))

    def tcp_start(self, flow: Any) -> None:
        flow.kill()
        self.audit(AuditRecord("outbound", "blocked", "raw TCP is not allowed", by="rawtcp"))

    def udp_start(self, flow: Any) -> None:
        flow.kill()
        self.audit(AuditRecord("outbound", "blocked", "UDP is not allowed", by="rawudp"))
