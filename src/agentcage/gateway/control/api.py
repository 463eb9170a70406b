"""The policy API: served by the gateway itself for `agentcage.local`, to the cage only.

    GET  /v1/health                          {ok, api_version, cage}
    GET  /v1/allowlist                       what the cage may reach now (each entry with its
                                             source: cage.yaml, operator or grant; its scope
                                             and expiry), what may be asked for, what is blocked
    POST /v1/allowlist/requests              {domain, reason, ttl_seconds?, methods?, paths?,
                                             ports?} -> {id, status, reason, expires_at, ...}:
                                             200 decided, 202 pending, 400 malformed, 409 allowed
                                             already, 413 too large, 429 too many
    GET  /v1/allowlist/requests/ID[?wait=S]  one request; `wait` holds a pending one until it
                                             is decided, at most 60 s
    GET  /v1/denials[?last=N]                the cage's recent refusals (denials.py)

It is an addon of its own, before the cage's (addon.py): a flow for the name is answered here
and marked, and the cage's steps leave it alone; nothing of it is forwarded, and the name is
never resolved upstream or dialled (reserved.py). The gateway's listeners face the cage alone,
so nothing else reaches it; it answers by name, so an IP literal never does. The request's
body is bounded (8 KiB) and untrusted: the reason is kept as text, shown, never acted on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mitmproxy import http

from agentcage.gateway.audit import AuditRecord
from agentcage.gateway.control.ceiling import RequestError
from agentcage.gateway.control.denials import Denials
from agentcage.gateway.control.grants import GRANT_SOURCE, AlreadyAllowed, Grants, LivePolicy
from agentcage.gateway.control.settings import PolicyApiSettings
from agentcage.gateway.destination import Refusal, host_name, target_of
from agentcage.gateway.ratelimit import HostRateLimiter
from agentcage.reserved import POLICY_API, is_policy_api

API_VERSION = 1
FLAG = "agentcage.policy_api"  # flow.metadata: this flow is the API's (a name, no credential)
MAX_BODY = 8 * 1024
MAX_WAIT = 60.0
MAX_DENIALS = 100
ASK_URL = f"https://{POLICY_API}/v1/allowlist/requests"
SOURCES = {"config": "cage.yaml", "cli": "operator"}


def is_api_flow(flow: Any) -> bool:
    return bool(flow.metadata.get(FLAG))


def how_to_ask(host: str) -> str:
    """One line for a refusal: how the agent can ask for `host`."""
    return (f"to ask for it: POST {ASK_URL} with {{\"domain\": \"{host}\", \"reason\": "
            f"\"why the task needs it\"}} (GET https://{POLICY_API}/v1/allowlist: what may be "
            "asked for)")


class PolicyApi:
    def __init__(self, settings: PolicyApiSettings, grants: Grants, policy: LivePolicy,
                 denials: Denials, tcp_ports: tuple[int, ...], cage: str,
                 audit: Callable[[AuditRecord], object], clock: Callable[[], float] = time.time):
        self.settings, self.grants, self.policy, self.denials = settings, grants, policy, denials
        self.tcp_ports, self.cage, self._audit, self._clock = tcp_ports, cage, audit, clock
        self.limiter = HostRateLimiter(settings.requests_per_second, settings.burst)

    # ---- mitmproxy hooks -----------------------------------------------------------------

    def http_connect(self, flow: http.HTTPFlow) -> None:
        if is_policy_api(host_name(flow.request.host)) and flow.request.port in self.tcp_ports:
            flow.metadata[FLAG] = True  # the tunnel's requests are the API's

    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or flow.request.method == "CONNECT":
            return
        try:
            name, port = target_of(flow)
        except Refusal:
            return  # the cage's steps refuse it, as any request they cannot place
        if not is_policy_api(name):
            return
        flow.metadata[FLAG] = True
        if port not in self.tcp_ports:
            self._answer(flow, 404, {"error": f"the policy API answers on the cage's ports "
                                              f"{', '.join(map(str, self.tcp_ports))}"})
        elif flow.request.method == "POST":
            declared = flow.request.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_BODY:
                self._answer(flow, 413, {"error": f"the body is larger than {MAX_BODY} bytes"})
            return  # answered once the body is read (`request`)
        else:
            await self._serve(flow, None)

    async def request(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or not is_api_flow(flow):
            return
        if flow.request.method == "CONNECT":
            return
        body = flow.request.raw_content or b""
        if len(body) > MAX_BODY:
            self._answer(flow, 413, {"error": f"the body is larger than {MAX_BODY} bytes"})
            return
        if flow.request.headers.get("content-encoding"):
            self._answer(flow, 400, {"error": "send the body as plain JSON (no encoding)"})
            return
        await self._serve(flow, body)

    def client_disconnected(self, client: Any) -> None:
        self.grants.forget_connection(client)

    # ---- endpoints ------------------------------------------------------------------------

    async def _serve(self, flow: http.HTTPFlow, body: bytes | None) -> None:
        req = flow.request
        url = urlsplit(req.path)
        query = parse_qs(url.query)
        path, method = url.path.rstrip("/") or "/", req.method
        self._audit(AuditRecord("policy", "allowed", f"{method} {path}", host=POLICY_API,
                                method=method, path=path, by="policy-api"))
        if path == "/v1/health" and method == "GET":
            self._answer(flow, 200, {"ok": True, "cage": self.cage})
        elif path == "/v1/allowlist" and method == "GET":
            self._answer(flow, 200, self._allowlist())
        elif path == "/v1/allowlist/requests" and method == "POST":
            await self._ask(flow, body or b"")
        elif path.startswith("/v1/allowlist/requests/") and method == "GET":
            wait = _number(query.get("wait"), 0.0, MAX_WAIT)
            found = await self.grants.wait(path.rsplit("/", 1)[1], wait)
            if found is None:
                self._answer(flow, 404, {"error": "no such request (requests are kept for a "
                                                  "while; the gateway forgets them on restart)"})
            else:
                self._answer(flow, 200, _shown(found.as_dict()))
        elif path == "/v1/denials" and method == "GET":
            last = int(_number(query.get("last"), 20, MAX_DENIALS))
            self._answer(flow, 200, {"denials": self.denials.last(last)})
        elif path in ("/v1/health", "/v1/allowlist", "/v1/allowlist/requests", "/v1/denials") \
                or path.startswith("/v1/allowlist/requests/"):
            self._answer(flow, 405, {"error": f"{method} is not served at {path}"})
        else:
            self._answer(flow, 404, {"error": "no such endpoint", "endpoints": [
                "GET /v1/health", "GET /v1/allowlist", "POST /v1/allowlist/requests",
                "GET /v1/allowlist/requests/ID?wait=SECONDS", "GET /v1/denials?last=N"]})

    async def _ask(self, flow: http.HTTPFlow, body: bytes) -> None:
        if not self.limiter.allow(POLICY_API):
            self._answer(flow, 429, {"error": "too many requests; wait a second and ask again"},
                         {"Retry-After": "1"})
            return
        try:
            doc = json.loads(body)
        except ValueError:
            self._answer(flow, 400, {"error": "the body is not JSON: send {\"domain\": ..., "
                                              "\"reason\": ...}"})
            return
        try:
            asked = self.grants.ask(doc, self.tcp_ports,
                                    lambda host: self.policy.current().decide(host).allowed)
        except RequestError as e:
            self._answer(flow, 400, {"error": str(e)})
            return
        except AlreadyAllowed as e:
            self._answer(flow, 409, {"error": str(e)})
            return
        if asked.waiting_for == "llm":  # a model call: answered when it is (bounded)
            asked = await self.grants.wait(asked.id, self.settings.llm_timeout_seconds + 2) \
                or asked
        await self.grants.persisted()  # what the answer says is in grants.json when it is read
        self._answer(flow, 202 if asked.status == "pending" else 200, _shown(asked.as_dict()))

    def _allowlist(self) -> dict[str, Any]:
        policy, now = self.policy.current(), self._clock()
        allowed = []
        for rule in policy.allow.rules:
            if not rule.active(now):
                continue
            entry: dict[str, Any] = {"domain": str(rule.pattern),
                                     "source": SOURCES.get(rule.source, rule.source),
                                     "expires_at": rule.expires_at}
            grant = self.grants.grant_of(rule)
            if rule.source.startswith(GRANT_SOURCE):
                entry["source"] = "grant"
                if grant is not None:
                    entry.update(grant_id=grant.id, scope=grant.scope.as_dict())
            allowed.append(entry)
        s = self.settings
        return {
            "mode": policy.mode if policy.deny_reason is None else None,
            "denied_all": policy.deny_reason,
            "allowed": allowed,
            "blocked": [str(r.pattern) for r in policy.block.rules if r.active(now)],
            "requestable": {"grantable": list(s.grantable), "max_ttl_seconds": s.max_ttl_seconds,
                            "max_grants": s.max_grants,
                            "grants_in_force": len(self.grants.active()),
                            "deciders": list(s.deciders)},
            "how_to_ask": {"method": "POST", "url": ASK_URL,
                           "body": {"domain": "NAME", "reason": "why the task needs it",
                                    "ttl_seconds": s.max_ttl_seconds}},
        }

    def _answer(self, flow: http.HTTPFlow, status: int, doc: dict[str, Any],
                headers: dict[str, str] | None = None) -> None:
        payload = json.dumps({"api_version": API_VERSION, **doc}).encode()
        flow.response = http.Response.make(status, payload, {
            "Content-Type": "application/json", "Cache-Control": "no-store", **(headers or {})})


def _number(values: list[str] | None, default: float, cap: float) -> float:
    try:
        value = float(values[0]) if values else default
    except ValueError:
        return default
    return max(0.0, min(value, cap))


def _shown(request: dict[str, Any]) -> dict[str, Any]:
    """A request as the API answers it: `reason` is the decision's (the agent's own reason is
    `asked_because`)."""
    shown = dict(request)
    shown["asked_because"] = shown.pop("reason")
    shown["reason"] = shown.pop("decision")
    shown["retryable"] = shown["status"] == "pending"
    return shown
