"""The audit records of a flow: what was decided about the request, and what came of it.

- `request` writes the `outbound` record, once per flow: the decision, the inspectors' answers,
  the secrets injected (names), the path as the cage sent it. For a request about to go
  upstream it must be written (`must`): a record that cannot be written raises, and the caller
  refuses the request.
- `outcome` writes the `response` record, once per forwarded flow: served, closed by the
  client, timed out, cut by the gateway, upstream failed (`outcome.py`), with the status and
  the secrets redacted (names). When it cannot be written, a response not yet sent to the cage
  is withheld.
Records about something refused anyway are written when they can be, and said on stderr (the
gateway log) when they cannot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mitmproxy import http

from agentcage.gateway.audit import AuditRecord, say
from agentcage.gateway.destination import host_name
from agentcage.gateway.flowstate import Verdict, state
from agentcage.gateway.messages import blocked_response
from agentcage.gateway.outcome import Outcome


class FlowAudit:
    def __init__(self, audit: Callable[[AuditRecord], None]):
        self.audit = audit  # raises when a record cannot be written

    def request(self, flow: http.HTTPFlow, verdict: Verdict, status: int | None = None,
                host: str | None = None, must: bool = True) -> None:
        st = state(flow)
        if st.request_verdict is not None:
            return
        host, port, path = _where(flow, host)
        record = AuditRecord(
            "outbound", verdict.decision, verdict.reason, host=host, method=flow.request.method,
            port=port, path=path, url=f"{flow.request.scheme}://{host}:{port}{path}",
            by=verdict.by, status=status, inspectors=tuple(st.decisions),
            secrets_injected=st.injected,
            extra={"flow": flow.id, **({"grant_id": st.grant} if st.grant else {})})
        if must:
            self.audit(record)
        else:
            self.safely(record)
        st.request_verdict = verdict

    def outcome(self, flow: http.HTTPFlow, outcome: Outcome, withhold: bool = False) -> None:
        """`withhold`: the response is still held back (buffered), so when its record cannot
        be written it is replaced by a refusal instead of reaching the cage."""
        st = state(flow)
        if st.outcome_verdict is not None:
            return
        st.outcome_verdict = Verdict(outcome.decision, outcome.reason, outcome.by)
        host, port, path = _where(flow)
        status = flow.response.status_code if flow.response is not None else None
        record = AuditRecord(
            "response", outcome.decision, outcome.reason, host=host, method=flow.request.method,
            port=port, path=path, url=f"{flow.request.scheme}://{host}:{port}{path}",
            by=outcome.by, status=status, inspectors=tuple(st.decisions),
            secrets_injected=st.injected, secrets_redacted=st.redacted,
            extra={"flow": flow.id, "outcome": outcome.name})
        if self.safely(record) or not withhold:
            return
        reason = "response withheld: the audit log cannot record it"
        flow.response = blocked_response(503, reason, host, "audit")
        st.outcome_verdict = Verdict("blocked", reason, "audit")

    def upstream(self, data: Any, reason: str, by: str) -> None:
        host, port = data.server.address or ("", None)
        self.safely(AuditRecord("upstream", "blocked", reason, host=str(host), port=port, by=by))

    def safely(self, record: AuditRecord) -> bool:
        """Audit a record whose subject is refused (or over) anyway; on failure, say it."""
        try:
            self.audit(record)
            return True
        except Exception as e:
            say(f"cannot audit ({e}): {record.direction} {record.decision} by {record.by}")
            return False


def _where(flow: http.HTTPFlow, host: str | None = None) -> tuple[str, int, str]:
    st = state(flow)
    req = flow.request
    name, port = st.target or (host_name(req.host) or "", req.port)
    return host or name, port, st.path if st.path is not None else req.path
