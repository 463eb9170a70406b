"""The one writer of capture.jsonl: it assembles each flow's line from both sides of the gateway.

The addon tells it what happened, in order: the cage's request (`request`, taken before
injection changes the flow), the server's response (`server_response`, before redaction), each
WebSocket message, and the end of the flow (`finish`, once the cage's side is final). The
snapshots that hold real values (the outbound view) stay in this object's own table, keyed by
the flow and gone with it; never in `flow.metadata`. Capture never decides: every failure is
reported (audited by the caller) and swallowed, and the flow goes on as it would have.
"""

from __future__ import annotations

import base64
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentcage.gateway.capture import CaptureLog
from agentcage.gateway.destination import described_host
from agentcage.gateway.flowstate import state
from agentcage.gateway.snapshots import (
    WebSocketCapture,
    body_doc,
    request_doc,
    response_doc,
)
from agentcage.gateway.streaming import ResponseStream
from agentcage.secrets.redact import Redactor

_UNSET: Any = object()


@dataclass
class _Pending:
    inbound_request: Any = _UNSET  # the doc; None when its snapshot failed
    outbound_response: dict[str, Any] | None = None
    stream: ResponseStream | None = None
    server_headers: tuple[tuple[str, str], ...] = ()
    websocket: WebSocketCapture | None = None


def _as_bytes(data: bytes | str) -> bytes:
    return data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)


class FlowRecorder:
    def __init__(self, log: CaptureLog, report: Callable[[str], None]):
        self.log = log
        self.settings = log.config
        self.report = report
        self._flows: weakref.WeakKeyDictionary[Any, _Pending] = weakref.WeakKeyDictionary()

    # ---- what the addon asks ---------------------------------------------------------------

    def host_of(self, flow: Any) -> tuple[str, int]:
        target = state(flow).target
        return target if target else described_host(flow)

    def wants(self, flow: Any) -> bool:
        """Whether this flow is captured (never raises: a failure is reported, and no)."""
        try:
            return self.settings.wants(self.host_of(flow)[0])
        except Exception as e:
            self._failed("deciding whether to capture a flow", e)
            return False

    def body_cap(self, flow: Any) -> int:
        """Bytes of a streamed body to keep for this flow's line (0: not captured)."""
        return self.settings.max_body_size if self.wants(flow) else 0

    def _pending(self, flow: Any) -> _Pending:
        found = self._flows.get(flow)
        if found is None:
            found = self._flows[flow] = _Pending()
        return found

    # ---- events ----------------------------------------------------------------------------

    def request(self, flow: Any, host: str, port: int, body: bytes, redactor: Redactor) -> None:
        """The request as the cage sent it, before injection changes the flow."""
        pending = self._pending(flow)
        pending.inbound_request = None  # whatever fails below, never re-read after injection
        try:
            if self.settings.wants(host):
                pending.inbound_request = self._inbound_request(flow, host, port, body,
                                                                redactor)
        except Exception as e:
            self._failed("capture of the inbound request", e)

    def server_response(self, flow: Any, stream: ResponseStream | None,
                        server_headers: tuple[tuple[str, str], ...] = ()) -> None:
        """The response as the server sent it, before redaction changes it."""
        if flow.response is None or not self.wants(flow):
            return
        try:
            cap = self.settings.max_body_size
            pending = self._pending(flow)
            if stream is not None:
                pending.stream, pending.server_headers = stream, server_headers
                doc = response_doc(flow.response, cap, headers=server_headers)
                doc["body"] = self._streamed_body(stream, outbound=True)
            else:
                doc = response_doc(flow.response, cap)
            pending.outbound_response = doc
        except Exception as e:
            self._failed("capture of the upstream response", e)

    def websocket_message(self, flow: Any, message: Any, *, inbound: Any, outbound: Any,
                          redactor: Redactor | None = None, blocked: str | None = None) -> None:
        """One message. `redactor`: the cage sent `inbound`, and any real value in it (however
        it got into the cage) becomes its placeholder in the inbound view."""
        if not self.wants(flow):
            return
        try:
            if redactor is not None and not redactor.empty:
                inbound = redactor.redact(inbound).data
            pending = self._pending(flow)
            if pending.websocket is None:
                pending.websocket = WebSocketCapture(self.settings.max_body_size)
            pending.websocket.add(
                from_client=message.from_client, ts=message.timestamp, text=message.is_text,
                inbound=_as_bytes(inbound),
                outbound=None if outbound is None else _as_bytes(outbound), blocked=blocked)
        except Exception as e:
            self._failed("capture of a WebSocket message", e)

    def finish(self, flow: Any, redactor: Redactor, error: str | None = None) -> None:
        """Write the flow's line (once), now that the cage's side is final."""
        st = state(flow)
        if st.captured:
            return
        st.captured = True
        pending = self._pending(flow)
        try:
            host, port = self.host_of(flow)
            if not self.settings.wants(host):
                return
            record = self._record(flow, pending, host, port, error, redactor)
        except Exception as e:
            self._failed("capture of a flow", e)
            return
        finally:
            self._flows.pop(flow, None)
        self.log.write(record)

    # ---- the line ----------------------------------------------------------------------------

    def _inbound_request(self, flow: Any, host: str, port: int, body: bytes | None,
                         redactor: Redactor) -> dict[str, Any]:
        """The request as the cage sent it; any real value in it (however it got into the
        cage) replaced by its placeholder, so the inbound view never holds one."""
        doc = request_doc(flow.request, host, port, self.settings.max_body_size, body=body,
                          path=state(flow).path)
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

    def _record(self, flow: Any, pending: _Pending, host: str, port: int, error: str | None,
                redactor: Redactor) -> dict[str, Any]:
        cap = self.settings.max_body_size
        st = state(flow)
        req, resp = flow.request, flow.response
        if pending.inbound_request is _UNSET:
            # the flow never reached injection: flow.request is still the cage's
            inbound_request = self._inbound_request(flow, host, port, None, redactor)
        else:
            inbound_request = pending.inbound_request
        ws = pending.websocket
        outbound: dict[str, Any] | None = None
        if st.forwarded:
            outbound = {"request": request_doc(req, host, port, cap),
                        "response": pending.outbound_response}
            if ws is not None:
                outbound["websocket"] = ws.outbound
        inbound_response = None
        if resp is not None:
            inbound_response = response_doc(resp, cap)
            if pending.stream is not None:
                inbound_response["body"] = self._streamed_body(pending.stream, outbound=False)
        verdict = st.verdict
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
            "decision": verdict.decision if verdict else None,
            "by": verdict.by if verdict else None,
            "reason": verdict.reason if verdict else None,
            "error": error,
            "secrets_injected": list(st.injected),
            "secrets_redacted": list(st.redacted),
            "inbound": {
                "request": inbound_request,
                "response": inbound_response,
                **({"websocket": ws.inbound} if ws is not None else {}),
            },
            "outbound": outbound,
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

    def _failed(self, what: str, error: Exception) -> None:
        self.report(f"{what} failed: {type(error).__name__}: {error}")
