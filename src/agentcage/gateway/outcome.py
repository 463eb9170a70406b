"""What happened to a flow after the gateway let it go upstream, said plainly for the audit.

The `outbound` record says what the gateway decided about a request, before it left; the
`response` record says what came of it. Only the gateway stopping a flow, or the upstream
failing to answer it, is `blocked`; a client that closes a stream it was served (HTTP/2 clients
often cancel after the final event) was served, and is `allowed`.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentcage.gateway.flowstate import FlowState

SERVED = "served"
CLIENT_CLOSED = "client-closed"
UPSTREAM_FAILED = "upstream-failed"
TIMEOUT = "timeout"
CUT = "cut"  # the gateway stopped the response (redaction, a decoding bound, a fault)
REFUSED = "refused"  # the gateway refused the request while it was still arriving

_CLIENT_GONE = ("stream reset by client", "client disconnected", "client closed")
_TIMED_OUT = ("timed out", "timeout")


@dataclass(frozen=True)
class Outcome:
    name: str
    decision: str  # allowed | flagged | blocked
    reason: str
    by: str


def served(st: FlowState) -> Outcome:
    return Outcome(SERVED, "flagged" if st.flagged else "allowed", "upstream answered",
                   "upstream")


def stopped(reason: str, by: str) -> Outcome:
    return Outcome(TIMEOUT if by == "timeout" else CUT, "blocked", reason, by)


def of_error(message: str, st: FlowState, client_gone: bool = False) -> Outcome:
    """The outcome of a forwarded flow that ended in mitmproxy's `error` hook with `message`;
    `client_gone`: the cage's side of the connection had closed."""
    text = message.lower()
    if st.stopped is not None:
        return stopped(st.stopped, st.stopped_by)
    if "body_size_limit" in text:
        return Outcome(REFUSED, "blocked", f"body over the size limit: {message}", "body-size")
    if client_gone or any(marker in text for marker in _CLIENT_GONE):
        if st.responded:
            return Outcome(CLIENT_CLOSED, "flagged" if st.flagged else "allowed",
                           f"served; then the client closed: {message}", "client")
        return Outcome(CLIENT_CLOSED, "allowed",
                       f"the client closed before the upstream answered: {message}", "client")
    if any(marker in text for marker in _TIMED_OUT):
        return Outcome(TIMEOUT, "blocked", f"upstream error: {message}", "timeout")
    return Outcome(UPSTREAM_FAILED, "blocked", f"upstream error: {message}", "upstream")


def never_sent(message: str) -> Outcome:
    """Why a request that never went upstream ended in mitmproxy's `error` hook."""
    text = message.lower()
    if "body_size_limit" in text:
        return Outcome(REFUSED, "blocked", f"body over the size limit: {message}", "body-size")
    if any(marker in text for marker in _CLIENT_GONE):
        return Outcome(REFUSED, "blocked", f"the request never arrived whole: {message}",
                       "client")
    return Outcome(REFUSED, "blocked", f"upstream error: {message}", "upstream")
