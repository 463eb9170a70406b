"""Fail closed: a hook that raised blocks what it was handling, whatever state it left, and the
block is audited. (mitmproxy itself logs an addon's exception and lets the flow go on.)"""

from __future__ import annotations

import contextlib
from typing import Any

from agentcage.gateway import connections
from agentcage.gateway.audit import AuditRecord
from agentcage.gateway.destination import host_name
from agentcage.gateway.flowaudit import FlowAudit
from agentcage.gateway.flowstate import Verdict, state
from agentcage.gateway.messages import blocked_response
from agentcage.gateway.outcome import stopped
from agentcage.gateway.timeouts import UpstreamWatchdog

# Hooks after which a 403 can still replace the request or the response.
RESPONDING_STAGES = ("requestheaders", "request", "http_connect", "response")


def fail_closed(stage: str, subject: Any, error: Exception, records: FlowAudit,
                watchdog: UpstreamWatchdog) -> None:
    reason = f"internal error in {stage}: {type(error).__name__}: {error}"
    if stage == "server_connect":
        subject.server.error = f"agentcage: {reason}"  # first: the connection never opens
        records.upstream(subject, reason, "fail-closed")
        return
    flow = subject
    st = state(flow)
    st.stopped, st.stopped_by = reason, "fail-closed"
    watchdog.done(flow)
    responded = False
    if stage in RESPONDING_STAGES:
        with contextlib.suppress(Exception):
            shown = host_name(flow.request.host) or ""
            flow.response = blocked_response(403, reason, shown, "fail-closed")
            responded = True
    if not responded:
        with contextlib.suppress(Exception):
            if stage == "websocket_message" and flow.websocket is not None:
                flow.websocket.messages[-1].drop()
        connections.close(flow)
    try:
        if st.forwarded:
            st.outcome_verdict = None  # whatever was recorded, this is what happened
            records.outcome(flow, stopped(reason, "fail-closed"))
        else:
            st.request_verdict = None
            records.request(flow, Verdict("blocked", reason, "fail-closed"),
                            status=403 if responded else None, must=False)
    except Exception:  # the flow's own state is what broke: a bare record then
        records.safely(AuditRecord("response" if st.forwarded else "outbound", "blocked",
                                   reason, by="fail-closed", extra={"flow": flow.id}))
