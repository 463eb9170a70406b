"""WebSocket messages: from the cage, inspected and injected; from the server, redacted.

The body-phase chain sees each message from the cage after the last `TAIL` bytes the cage sent
before it on the connection, so a key split across messages (or random material trickled out
in small ones) is still seen whole. A blocked message cuts the connection, both ends, at once;
anything already parsed behind it is dropped. The tail (what the cage sent) is kept in this
object's own table, keyed by the flow, never in `flow.metadata`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mitmproxy import http

from agentcage.gateway import connections
from agentcage.gateway.armour import Armour
from agentcage.gateway.audit import AuditRecord
from agentcage.gateway.destination import host_name
from agentcage.gateway.flowstate import state
from agentcage.gateway.recorder import FlowRecorder
from agentcage.inspect.chain import first_block, run_chain
from agentcage.inspect.protocol import Decision, InspectionContext, RequestView
from agentcage.policy import Policy

TAIL = 4096


@dataclass
class _Connection:
    tail: bytes = b""
    cut: bool = False  # a message was blocked: nothing more passes either way


class WebSocketGuard:
    def __init__(self, audit: Callable[[AuditRecord], None], policy: Callable[[], Policy],
                 clock: Callable[[], float], recorder: FlowRecorder | None,
                 finish: Callable[[http.HTTPFlow], None],
                 watch: Callable[[http.HTTPFlow, bytes], str | None] | None = None):
        """`watch`: tells the watcher's budgets of a frame about to leave; why it must not."""
        self.audit, self.policy, self.clock = audit, policy, clock
        self.watch = watch
        self.recorder = recorder
        self.finish = finish  # writes the flow's capture line (the connection is over)
        self._connections: weakref.WeakKeyDictionary[Any, _Connection]
        self._connections = weakref.WeakKeyDictionary()

    def message(self, flow: http.HTTPFlow, armour: Armour) -> None:
        assert flow.websocket is not None
        message = flow.websocket.messages[-1]
        conn = self._connections.setdefault(flow, _Connection())
        if conn.cut:
            # already parsed from the same read as the blocked one, before the close landed
            message.drop()
            return
        name, port = state(flow).target or (host_name(flow.request.host) or "",
                                             flow.request.port)
        if not message.from_client:
            self._from_server(flow, message, armour, name, port)
            return
        content = message.content
        view = RequestView(method="WEBSOCKET", scheme=flow.request.scheme, host=name, port=port,
                           path=flow.request.path, headers=(), body=conn.tail + content)
        decisions = run_chain(armour.chain, view, InspectionContext(self.policy(), self.clock()),
                              phase="body")
        blocker = first_block(decisions)
        if blocker is None and self.watch is not None and (why := self.watch(flow, content)):
            blocker = Decision("block", why, "watcher", "high")
        if blocker is None:
            text = armour.injector.inject_text(name, content)
            if text.blocked:
                blocker = Decision("block", text.blocked, "injection", "high")
            elif text.injected:
                # audited first: a record that cannot be written stops the frame (the hook's
                # fault handler drops it and cuts the connection)
                self._record(flow, name, port, "allowed", "frame injected", "injection",
                             injected=text.injected, decisions=decisions)
                message.content = text.value  # type: ignore[assignment]
        if blocker is not None:
            message.drop()
            conn.cut = True
            connections.close(flow)
            self._record(flow, name, port, "blocked", blocker.reason, blocker.inspector,
                         decisions=decisions)
            if self.recorder is not None:
                self.recorder.websocket_message(
                    flow, message, inbound=content, outbound=None, redactor=armour.redactor,
                    blocked=f"{blocker.inspector}: {blocker.reason}")
            self.finish(flow)  # the connection is cut: its capture line is written now
            return
        conn.tail = (conn.tail + content)[-TAIL:]
        if self.recorder is not None:
            self.recorder.websocket_message(flow, message, inbound=content,
                                            outbound=message.content, redactor=armour.redactor)

    def _from_server(self, flow: http.HTTPFlow, message: Any, armour: Armour, name: str,
                     port: int) -> None:
        sent = message.content
        if not armour.redactor.empty:
            redacted = armour.redactor.redact(message.content)
            if redacted.names:
                message.content = redacted.data
                self._record(flow, name, port, "allowed", "server frame redacted", "redaction",
                             redacted=tuple(sorted(redacted.names)))
        if self.recorder is not None:
            self.recorder.websocket_message(flow, message, inbound=message.content,
                                            outbound=sent)

    def _record(self, flow: http.HTTPFlow, host: str, port: int, decision: str, reason: str,
                by: str, injected: tuple[str, ...] = (), redacted: tuple[str, ...] = (),
                decisions: list[Decision] | tuple[Decision, ...] = ()) -> None:
        self.audit(AuditRecord(
            "websocket", decision, reason, host=host, method="WEBSOCKET", port=port,
            path=flow.request.path, url=f"{flow.request.scheme}://{host}:{port}{flow.request.path}",
            by=by, inspectors=tuple(d.as_record() for d in decisions),
            secrets_injected=injected, secrets_redacted=redacted,
            extra={"flow": flow.id},
        ))
