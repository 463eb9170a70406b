"""The mitmproxy addon: it orders the gateway's steps; each step has its own module.

In the order mitmproxy calls the hooks:
- `http_connect` (regular proxy): the CONNECT target must be an allowed name on an allowed port
  (`destination.Gate`).
- `requestheaders`: the target name (`destination.target_of`: SNI, Host or the request line;
  SNI must equal Host), the port, the per-host rate, the header-phase inspectors; then the
  request is retargeted to the name (the cage dialled the gateway's own address).
- `request`: the body decoded (`decoding`, bounded), the body-phase inspectors, the capture's
  snapshot of what the cage sent, secret injection (`injection`); then the `outbound` audit
  record, written and known written BEFORE the request goes upstream: a request that cannot be
  audited is refused. From here the flow is watched for first-byte and idle timeouts
  (`timeouts`).
- `server_connect` / `server_connect_error`: a second, stateless gate over every upstream
  connection, and the record of one that failed.
- `responseheaders`: stream the response through the redactor, or buffer it (`redaction`).
- `response`: the buffered body redacted; the `response` audit record (what came of the
  request: `outcome`); the capture line (`recorder`, the one writer).
- `error`: the `response` record of a flow that did not end well, said as it happened.
- `websocket_message` / `websocket_end`: `websocket.WebSocketGuard`.

Every hook is wrapped: an exception blocks the flow (a 403, or its connections closed) and is
audited. Credentials never go in `flow.metadata`: it holds names and verdicts (`flowstate`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from mitmproxy import http
from mitmproxy.connection import ConnectionState

from agentcage.gateway import connections
from agentcage.gateway.armour import Armour
from agentcage.gateway.audit import AuditRecord, say
from agentcage.gateway.capture import CaptureLog
from agentcage.gateway.control.api import how_to_ask, is_api_flow
from agentcage.gateway.control.grants import Grants
from agentcage.gateway.decoding import DecodeError, decode_all
from agentcage.gateway.destination import (
    Gate,
    Refusal,
    host_name,
    split_host_header,
    target_of,
)
from agentcage.gateway.faults import fail_closed
from agentcage.gateway.flowaudit import FlowAudit
from agentcage.gateway.flowstate import Verdict, state
from agentcage.gateway.injection import inject_request
from agentcage.gateway.messages import blocked_response, content_codings, drop_interim_continue
from agentcage.gateway.outcome import never_sent, of_error, served, stopped
from agentcage.gateway.ratelimit import HostRateLimiter
from agentcage.gateway.reclaim import Reclaimer
from agentcage.gateway.recorder import FlowRecorder
from agentcage.gateway.redaction import ResponseRedaction
from agentcage.gateway.settings import GatewaySettings
from agentcage.gateway.timeouts import UpstreamWatchdog
from agentcage.gateway.watcher.events import Sent
from agentcage.gateway.watcher.watch import Watcher
from agentcage.gateway.websocket import WebSocketGuard
from agentcage.inspect.chain import first_block, run_chain
from agentcage.inspect.protocol import Decision, InspectionContext, Inspector, Phase, RequestView
from agentcage.policy import Policy
from agentcage.secrets.inject import Injector
from agentcage.secrets.redact import Redactor

__all__ = ["Armour", "CageAddon", "split_host_header"]

ASKABLE = ("connect", "domain")  # refusals of a name, which the policy API may grant
ECHO_RESPONSE_MAX = 4 * 1024 * 1024  # a larger buffered response is not told to the watcher
# Media types whose bodies are not read for echoes (a tarball, an image): nothing the cage
# sends back as a token comes from one, and scanning them was most of what the watcher cost
# a package install. Not learning echoes only ever counts more as information sent.
BINARY_MEDIA = ("image/", "audio/", "video/", "font/", "application/octet-stream",
                "application/gzip", "application/x-gzip", "application/zip",
                "application/x-tar", "application/x-bzip2", "application/x-xz",
                "application/zstd", "application/wasm", "application/pdf",
                "application/java-archive", "application/vnd.debian.binary-package")

BINARY_MEDIA_BYTES = tuple(kind.encode() for kind in BINARY_MEDIA)


def answer_body(resp: http.Response) -> bytes:
    """What the watcher learns echoes from in a response: its decoded body, or nothing for a
    binary one or one whose encoding cannot be undone. (Its two headers are found in one
    walk of the raw fields, not two lookups: this runs for every answer.)"""
    kind = coding = None
    for name, value in resp.headers.fields:
        name = name.lower()
        if name == b"content-type" and kind is None:
            kind = value
        elif name == b"content-encoding":
            coding = coding or value
    if kind is not None and kind.strip().lower().startswith(BINARY_MEDIA_BYTES):
        return b""
    if not coding:
        return resp.raw_content or b""
    try:
        return resp.get_content(strict=True) or b""
    except ValueError:  # an encoding it cannot undo: nothing to learn from it
        return b""


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
                    say(f"cannot audit a fault in {stage}: {again!r}")
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
        max_body: int = GatewaySettings.max_request_body,
        capture: CaptureLog | None = None,
        first_byte_timeout: float = GatewaySettings.first_byte_timeout_seconds,
        idle_timeout: float = GatewaySettings.idle_timeout_seconds,
        grants: Grants | None = None,
        watcher: Watcher | None = None,
    ):
        """`grants`: the runtime grants (control/grants.py), whose scope this addon holds
        requests to and whose connections it tracks; None without a policy API. `watcher`:
        the budgets told of every request that leaves (watcher/), None when it is off."""
        self.policy = policy
        self.grants = grants
        self.watcher = watcher
        self.records = FlowAudit(audit)
        self.armour = Armour(tuple(chain), injector or Injector((), ()), redactor or Redactor(()))
        self.max_body = max_body
        self.limiter = limiter
        self.clock = clock
        self.fault_host = fault_host
        self.gate = Gate(lambda: self.policy(), tcp_ports, lambda: self.clock())
        self.recorder = (FlowRecorder(capture, self._capture_failed)
                         if capture is not None else None)
        self.redaction = ResponseRedaction(max_body)
        self.websockets = WebSocketGuard(lambda r: self.records.audit(r), lambda: self.policy(),
                                         lambda: self.clock(), self.recorder,
                                         self._finish_capture,
                                         self._watch_frame if watcher is not None else None)
        self.watchdog = UpstreamWatchdog(first_byte_timeout, idle_timeout, self._timed_out)
        self._watching: asyncio.Task | None = None
        self.reclaimer = Reclaimer()

    @property
    def chain(self) -> tuple[Inspector, ...]:
        return self.armour.chain

    def rearm(self, armour: Armour) -> None:
        """Use a new version of the staged secrets from the next request on (one assignment)."""
        self.armour = armour

    def name_refusal(self, host: str, port: int) -> str | None:
        """The stateless verdict on dialling host:port (None = allowed), for the connector."""
        return self.gate.refusal(host, port)

    # ---- lifecycle -----------------------------------------------------------------------

    def running(self) -> None:
        self._watching = asyncio.get_running_loop().create_task(self.watchdog.run())

    def done(self) -> None:
        if self._watching is not None:
            self._watching.cancel()

    # ---- request hooks -------------------------------------------------------------------

    @_guarded("http_connect")
    def http_connect(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or is_api_flow(flow):
            return
        host, port = host_name(flow.request.host) or "", flow.request.port
        if (why := self.gate.refusal(host, port)) is not None:
            self._refuse(flow, why, "connect", host=host)
            self._finish_capture(flow)
            return
        try:
            self._watched(host)
            self._under_grant(flow, host, port, None)
        except Refusal as r:
            self._refuse(flow, r.reason, r.by, r.status, host=host)
            self._finish_capture(flow)

    @_guarded("requestheaders")
    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or flow.request.method == "CONNECT" or is_api_flow(flow):
            return
        st = state(flow)
        try:
            st.target = target_of(flow)
            name, port = st.target
            if self.fault_host is not None and name == self.fault_host:
                raise RuntimeError("injected fault")
            if (why := self.gate.port_refusal(port)) is not None:
                raise Refusal(why, "ports")
            self._watched(name)
            self._under_grant(flow, name, port, flow.request)
            if not self.limiter.allow(name):
                raise Refusal("rate limit exceeded", "rate_limit", status=429)
            if (blocker := self._inspect(flow, "headers")) is not None:
                # a body too large is a 413, which a client can tell from a policy refusal
                raise Refusal(blocker.reason, blocker.inspector,
                              413 if blocker.inspector == "body-size" else 403)
        except Refusal as r:
            self._refuse(flow, r.reason, r.by, r.status, host=st.target[0] if st.target else None)
            return
        if flow.request.host != name:
            flow.request.host = name  # retarget: upstream chosen by name, never by dialled IP
        drop_interim_continue(flow.request)

    @_guarded("request")
    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or flow.request.method == "CONNECT" or is_api_flow(flow):
            return
        st = state(flow)
        assert st.target is not None
        name, port = st.target
        armour = self.armour  # one version of the secrets for the whole request
        raw = flow.request.raw_content
        try:
            if raw is None:
                raise DecodeError("body was streamed, not buffered")
            body = decode_all(raw, content_codings(flow.request), self.max_body)
        except DecodeError as e:
            self._refuse(flow, f"request body cannot be inspected: {e}", "body", host=name)
            return
        headers = tuple(flow.request.headers.items(multi=True))  # as inspected, as watched
        if (blocker := self._inspect(flow, "body", body, armour, headers)) is not None:
            self._refuse(flow, blocker.reason, blocker.inspector, host=name)
            return
        if self.recorder is not None:  # before injection changes the request
            self.recorder.request(flow, name, port, body, armour.redactor)
        if self.watcher is not None and (
                why := self._tell_watcher(flow, body, headers=headers)) is not None:
            self._refuse(flow, why, "watcher", host=name)
            return
        injected = inject_request(flow, name, body, armour.injector)
        if injected.refusal is not None:
            self._refuse(flow, injected.refusal, "injection", host=name)
            return
        st.injected = injected.names
        self._forward(flow)

    def _watcher_received(self, flow: http.HTTPFlow, host: str) -> None:
        """A buffered response, told to the watcher: what the host sent, the cage may send
        back without it counting as information sent (an integrity hash, an ETag). Only its
        size is looked at here; its body is read once the response has gone to the cage
        (`answer_body`, called by the watcher's settle)."""
        assert self.watcher is not None
        resp = flow.response
        if resp is None or not resp.raw_content or len(resp.raw_content) > ECHO_RESPONSE_MAX:
            return
        self.watcher.answered(host, functools.partial(answer_body, resp),
                              len(resp.raw_content))

    def _watch_frame(self, flow: http.HTTPFlow, content: bytes) -> str | None:
        """A WebSocket frame from the cage, told to the budgets as a request of its own."""
        return self._tell_watcher(flow, content, method="WEBSOCKET", headers=())

    def _tell_watcher(self, flow: http.HTTPFlow, body: bytes, method: str | None = None,
                      headers: tuple[tuple[str, str], ...] | None = None) -> str | None:
        """Tell the budgets of a request about to leave, as the cage sent it (before
        injection: placeholders, never a value); why it must not go."""
        assert self.watcher is not None
        st = state(flow)
        assert st.target is not None
        name, port = st.target
        req = flow.request
        if headers is None:
            headers = tuple(req.headers.items(multi=True))
        sent = Sent(name, port, method or req.method, st.path if st.path is not None else req.path,
                    headers, body, self.clock(), self.watcher.is_model_host(name), st.grant,
                    flow.id)
        return self.watcher.sent(sent, flow.client_conn)

    def _forward(self, flow: http.HTTPFlow) -> None:
        """Audit the request, then let it go; one that cannot be audited does not go."""
        st = state(flow)
        decision = "flagged" if st.flagged else "allowed"
        try:
            self.records.request(flow, Verdict(decision, "forwarded upstream", "gateway"))
        except Exception as e:
            reason = f"request refused: the audit log cannot record it ({e})"
            say(f"{reason}: {flow.request.method} {st.target[0] if st.target else ''}")
            flow.response = blocked_response(503, reason, st.target[0] if st.target else "",
                                             "audit")
            return
        st.forwarded = True
        self.watchdog.forwarded(flow)

    # ---- upstream hooks ------------------------------------------------------------------

    @_guarded("server_connect")
    def server_connect(self, data: Any) -> None:
        if data.server.error:
            return
        host, port = data.server.address
        why = self.gate.refusal(str(host), int(port))
        if data.server.via is not None:
            why = "upstream proxies are not allowed"
        if why is not None:
            data.server.error = f"agentcage: refused {host}:{port}: {why}"
            self.records.upstream(data, why, "server_connect")

    @_guarded("server_connect_error")
    def server_connect_error(self, data: Any) -> None:
        self.records.upstream(data, f"upstream connect failed: {data.server.error}", "upstream")

    # ---- response hooks ------------------------------------------------------------------

    @_guarded("responseheaders")
    def responseheaders(self, flow: http.HTTPFlow) -> None:
        st = state(flow)
        resp = flow.response
        if resp is None or flow.error or not st.forwarded or st.outcome_verdict is not None:
            return
        st.responded = True
        self.watchdog.responded(flow)
        cap = self.recorder.body_cap(flow) if self.recorder is not None else 0
        try:
            started = self.redaction.start_stream(
                flow, self.armour.redactor, functools.partial(self._stream_failed, flow), cap)
        except DecodeError as e:
            self.records.outcome(flow, stopped(f"response body cannot be redacted: {e}",
                                               "redaction"))
            flow.kill()
            return
        if started is not None and started.names:
            st.redacted = tuple(sorted(started.names))

    def _stream_failed(self, flow: http.HTTPFlow, reason: str) -> None:
        """A streamed body could not be processed: drop the rest, kill the flow, audit it."""
        try:
            self.records.outcome(flow, stopped(reason, "redaction"))
        finally:
            with contextlib.suppress(Exception):
                flow.kill()

    @_guarded("response")
    def response(self, flow: http.HTTPFlow) -> None:
        st = state(flow)
        self.watchdog.done(flow)
        if not st.forwarded:  # the gateway's own answer to a refused request
            self._finish_capture(flow)
            return
        stream, server_headers = self.redaction.stream_of(flow)
        if self.recorder is not None:  # as the server sent it, before redaction
            self.recorder.server_response(flow, stream, server_headers)
        names = set(st.redacted)
        if stream is not None:
            names |= stream.names
        else:
            redacted = self.redaction.redact_buffered(flow, self.armour.redactor)
            names |= redacted.names
            if redacted.failure is not None:
                host = st.target[0] if st.target else ""
                flow.response = blocked_response(502, redacted.failure, host, "redaction")
                self.records.outcome(flow, stopped(redacted.failure, "redaction"))
        st.redacted = tuple(sorted(names))
        if self.watcher is not None and stream is None and st.target is not None:
            self._watcher_received(flow, st.target[0])
        if st.outcome_verdict is None:
            self.records.outcome(flow, served(st), withhold=stream is None)
        if flow.websocket is None:  # an upgraded flow is captured when the connection ends
            self._finish_capture(flow)
        self.reclaimer.flow_ended(flow, stream.received if stream is not None else 0)

    @_guarded("error")
    def error(self, flow: http.HTTPFlow) -> None:
        st = state(flow)
        self.watchdog.done(flow)
        message = flow.error.msg if flow.error else "unknown error"
        if st.forwarded:
            # "peer closed connection" does not say which peer: the connections' states do
            client_gone = not flow.client_conn.state & ConnectionState.CAN_READ
            self.records.outcome(flow, of_error(message, st, client_gone))
        else:  # it never went upstream: the request's own record says why
            outcome = never_sent(message)
            self.records.request(flow, Verdict("blocked", outcome.reason, outcome.by),
                                 must=False)
        self._finish_capture(flow, error=message)
        self.reclaimer.flow_ended(flow)

    # ---- WebSocket -----------------------------------------------------------------------

    @_guarded("websocket_message")
    def websocket_message(self, flow: http.HTTPFlow) -> None:
        self.websockets.message(flow, self.armour)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self._finish_capture(flow)

    def tcp_start(self, flow: Any) -> None:
        flow.kill()
        self.records.safely(AuditRecord("outbound", "blocked", "raw TCP is not allowed",
                                       by="rawtcp"))

    def udp_start(self, flow: Any) -> None:
        flow.kill()
        self.records.safely(AuditRecord("outbound", "blocked", "UDP is not allowed", by="rawudp"))

    # ---- steps ---------------------------------------------------------------------------

    def _under_grant(self, flow: http.HTTPFlow, name: str, port: int,
                     request: http.Request | None) -> None:
        """When `name` is reachable by a runtime grant alone: hold the request to the grant's
        scope (Refusal), and track the connection, which is cut when the grant ends."""
        if self.grants is None:
            return
        grant = self.grants.grant_of(self.policy().decide(name, self.clock()).rule)
        if grant is None:
            return
        state(flow).grant = grant.id
        if request is not None and not grant.scope.allows(request.method, request.path, port):
            raise Refusal(f"outside the scope of grant {grant.id} ({grant.scope.describe()})",
                          "grant")
        if request is None and grant.scope.ports and port not in grant.scope.ports:
            raise Refusal(f"port {port} is outside the scope of grant {grant.id}", "grant")
        self.grants.track(grant, flow.client_conn)

    def _watched(self, name: str) -> None:
        """A quarantined cage reaches the model's hosts alone (Refusal)."""
        if self.watcher is not None and (why := self.watcher.refusal(name)) is not None:
            raise Refusal(why, "watcher")

    def _inspect(self, flow: http.HTTPFlow, phase: Phase, body: bytes | None = None,
                 armour: Armour | None = None,
                 headers: tuple[tuple[str, str], ...] | None = None) -> Decision | None:
        st = state(flow)
        assert st.target is not None
        req = flow.request
        if headers is None:
            headers = tuple(req.headers.items(multi=True))
        view = RequestView(method=req.method, scheme=req.scheme, host=st.target[0],
                           port=st.target[1], path=req.path, headers=headers,
                           body=body if phase == "body" else None)
        ctx = InspectionContext(self.policy(), self.clock())
        decisions = run_chain((armour or self.armour).chain, view, ctx, phase=phase)
        st.decisions.extend(d.as_record() for d in decisions)
        return first_block(decisions)

    def _refuse(self, flow: http.HTTPFlow, reason: str, by: str, status: int = 403,
                host: str | None = None) -> None:
        """Answer for the upstream (it is never asked) and audit the refusal; a name the
        policy refused says how to ask for it, when the cage has a policy API."""
        shown = host or host_name(flow.request.host) or ""
        ask = (how_to_ask(shown) if self.grants is not None and by in ASKABLE and shown
               else None)
        flow.response = blocked_response(status, reason, shown, by, ask)
        self.records.request(flow, Verdict("blocked", reason, by), status=status, host=host,
                             must=False)

    def _timed_out(self, flow: http.HTTPFlow, reason: str) -> None:
        """The watchdog's verdict: cut the upstream (the cage gets a 502 or a broken body)."""
        st = state(flow)
        st.stopped, st.stopped_by = reason, "timeout"
        connections.close(flow, client=st.responded, server=True)
        self.records.outcome(flow, stopped(reason, "timeout"))

    def _fault(self, stage: str, subject: Any, error: Exception) -> None:
        fail_closed(stage, subject, error, self.records, self.watchdog)

    # ---- capture (never decides anything: failures are audited and swallowed) -------------

    def _finish_capture(self, flow: http.HTTPFlow, error: str | None = None) -> None:
        if self.recorder is not None:
            self.recorder.finish(flow, self.armour.redactor, error)

    def _capture_failed(self, reason: str) -> None:
        self.records.safely(AuditRecord("capture", "flagged", reason, by="capture"))
