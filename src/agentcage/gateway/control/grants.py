"""Runtime grants: what the agent asked for and was given, for a while, and what is in force.

A request names a domain (a name or `*.name`), a reason, and optionally a TTL and a scope
(methods, paths, ports). It is answered at once when it cannot be granted (malformed: 400;
already allowed: 409; outside the ceiling, or past `max_grants`: denied), else by the deciders,
in cage.yaml's order:
- `rules`: grants what the ceiling names, for the TTL asked (capped by `max_ttl_seconds`);
- `human`: the request waits (`pending`) until the operator approves or denies it
  (`agentcage cage grants NAME approve|deny ID`), or is denied after `human_timeout_seconds`.
A decider that does not decide passes to the next; the last one's silence is a denial.

A grant is a DomainRule of source `grant:<id>` in the policy the resolver, the connector and the
addon share (`LivePolicy`), so it applies to the next lookup and request. It ends when it
expires, or is revoked (by the operator; `promote` revokes it into a lasting rule): every
connection opened under it is cut then (keep-alive connections, CONNECT tunnels, WebSockets),
not only new ones refused. Every request, decision, grant, expiry, revocation and cut is an
audit record (direction `policy`).

State is in memory, on the gateway's event loop; `grants.json` in the cage's state directory is
its copy for the CLI (the gateway alone writes it; no value in it is secret). Grants in force
survive a restart of the gateway; pending requests do not. The copy is written off the event
loop (statecopy.py), one grant a line, each line made once: a decision among a thousand grants
costs what one among a few does (bench/policy_api.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from agentcage.domains import DomainMatcher, DomainPattern, DomainRule, parse_pattern
from agentcage.gateway.audit import AuditRecord, say
from agentcage.gateway.control.ceiling import (
    Ceiling,
    RequestError,
    Scope,
    requested_pattern,
)
from agentcage.gateway.control.llm import DeciderFailed, LlmDecider
from agentcage.gateway.control.settings import PolicyApiSettings
from agentcage.gateway.statecopy import StateCopy
from agentcage.policy import Policy

FILE_VERSION = 1
GRANT_SOURCE = "grant:"  # a DomainRule's source for a grant: grant:<id>
MAX_REASON = 1000
KEPT_REQUESTS = 100  # requests answered recently, listed and found by id
STATUSES = ("pending", "granted", "denied")


class AlreadyAllowed(Exception):
    """The domain is reachable already (409)."""


@dataclass(frozen=True)
class Grant:
    id: str
    pattern: DomainPattern
    scope: Scope
    granted_at: float
    expires_at: float
    decided_by: str
    request_id: str
    reason: str  # the agent's, untrusted: shown, never acted on

    @cached_property
    def _rule(self) -> DomainRule:
        return DomainRule(self.pattern, self.expires_at, GRANT_SOURCE + self.id)

    def rule(self) -> DomainRule:
        """Its rule in the policy in force (made once: the policy is remade at every change
        of the grants, from every grant's rule)."""
        return self._rule

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "domain": str(self.pattern), "scope": self.scope.as_dict(),
                "granted_at": self.granted_at, "expires_at": self.expires_at,
                "decided_by": self.decided_by, "request_id": self.request_id,
                "reason": self.reason}

    @cached_property
    def json_line(self) -> str:
        """Its entry in grants.json, made once (a grant never changes)."""
        return json.dumps(self.as_dict())

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Grant:
        return cls(str(doc["id"]), parse_pattern(doc["domain"]), Scope.from_dict(doc["scope"]),
                   float(doc["granted_at"]), float(doc["expires_at"]), str(doc["decided_by"]),
                   str(doc["request_id"]), str(doc.get("reason", "")))


@dataclass
class PolicyRequest:
    id: str
    domain: str
    reason: str
    ttl_seconds: int
    scope: Scope
    created_at: float
    status: str = "pending"
    decided_by: str | None = None
    decision: str = ""  # why it was decided so
    decided_at: float | None = None
    grant_id: str | None = None
    expires_at: float | None = None  # its grant's
    waiting_for: str | None = None  # while pending: the decider (human, llm)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "domain": self.domain, "reason": self.reason,
                "ttl_seconds": self.ttl_seconds, "scope": self.scope.as_dict(),
                "created_at": self.created_at, "status": self.status,
                "decided_by": self.decided_by, "decision": self.decision,
                "decided_at": self.decided_at, "grant_id": self.grant_id,
                "expires_at": self.expires_at, "waiting_for": self.waiting_for}


@dataclass
class _Tracked:
    """The client connections that used a grant (cut when it ends)."""

    connections: dict[str, Any] = field(default_factory=dict)  # connection id -> connection


class Grants:
    def __init__(self, settings: PolicyApiSettings, path: Path | None,
                 audit: Callable[[AuditRecord], object],
                 cut: Callable[[Iterable[Any]], int] = lambda conns: 0,
                 clock: Callable[[], float] = time.time, llm: LlmDecider | None = None,
                 denials: Callable[[], list[dict[str, Any]]] = list):
        """`llm`: the `llm` decider (llm.py), when cage.yaml configures one; `denials`: the
        cage's recent refusals, which that decider is shown."""
        self.settings = settings
        self.llm, self._denials = llm, denials
        self._tasks: set[asyncio.Task[None]] = set()
        self.ceiling = Ceiling(settings)
        self.path = path
        self._audit, self._cut, self._clock = audit, cut, clock
        self._grants: dict[str, Grant] = {}
        self._requests: OrderedDict[str, PolicyRequest] = OrderedDict()
        self._tracked: dict[str, _Tracked] = {}
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self.version = 0  # changes with every change of the grants in force
        self._copy = None if path is None else StateCopy(
            path, self._render, lambda e: self._record(AuditRecord(
                "policy", "flagged", f"cannot write {path}: {e}", by="policy-api")))
        self._load()

    # ---- what is in force ----------------------------------------------------------------

    def rules(self) -> tuple[DomainRule, ...]:
        return tuple(g.rule() for g in self._grants.values())

    def active(self) -> list[Grant]:
        return sorted(self._grants.values(), key=lambda g: g.granted_at)

    def grant_of(self, rule: DomainRule | None) -> Grant | None:
        if rule is None or not rule.source.startswith(GRANT_SOURCE):
            return None
        return self._grants.get(rule.source[len(GRANT_SOURCE):])

    def grant(self, grant_id: str) -> Grant | None:
        return self._grants.get(grant_id)

    def requests(self, pending_only: bool = False) -> list[PolicyRequest]:
        return [r for r in self._requests.values() if not pending_only or r.status == "pending"]

    def request(self, request_id: str) -> PolicyRequest | None:
        return self._requests.get(request_id)

    # ---- asking --------------------------------------------------------------------------

    def ask(self, body: Any, cage_ports: tuple[int, ...],
            allowed_now: Callable[[str], bool]) -> PolicyRequest:
        """A request from the cage (its parsed JSON body), decided as far as it can be now.
        RequestError: malformed (400); AlreadyAllowed: nothing to grant (409)."""
        if not isinstance(body, dict):
            raise RequestError("the body: a JSON object {\"domain\": ..., \"reason\": ...}")
        unknown = set(body) - {"domain", "reason", "ttl_seconds", "methods", "paths", "ports"}
        if unknown:
            raise RequestError(f"unknown field(s): {', '.join(sorted(unknown))[:100]}")
        pattern = requested_pattern(body.get("domain"))
        reason = body.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise RequestError("reason: say in a sentence why the task needs it")
        if len(reason) > MAX_REASON:
            raise RequestError(f"reason: at most {MAX_REASON} characters")
        ttl = self.ceiling.ttl(body.get("ttl_seconds"))
        scope = Scope.requested(body.get("methods"), body.get("paths"), body.get("ports"),
                                cage_ports)
        if not pattern.wildcard and allowed_now(pattern.name):
            raise AlreadyAllowed(f"{pattern} is allowed already (GET /v1/allowlist: how far)")
        now = self._clock()
        req = PolicyRequest(os.urandom(8).hex(), str(pattern), "".join(
            ch if ch.isprintable() else "?" for ch in reason), ttl, scope, now)
        self._keep(req)
        self._record(AuditRecord("policy", "flagged", f"requested: {req.reason[:200]}",
                                 host=req.domain, by="policy-api",
                                 extra={"request_id": req.id, "scope": scope.as_dict(),
                                        "ttl_seconds": ttl}))
        refusal = self.ceiling.refusal(pattern)
        if refusal is None and len(self._grants) >= self.settings.max_grants:
            refusal = f"the cage holds {self.settings.max_grants} grants already (max_grants)"
        if refusal is not None:
            self._decide(req, "denied", "ceiling", refusal)
            return req
        for decider in self.settings.deciders:
            if decider == "rules":
                self._decide(req, "granted", "rules", "within policy_api.grantable")
                return req
            if decider == "human":
                req.waiting_for = "human"
                self._record(AuditRecord("policy", "flagged", "waiting for the operator "
                                         f"(agentcage cage grants CAGE approve {req.id})",
                                         host=req.domain, by="human",
                                         extra={"request_id": req.id}))
                self._save()
                return req
            if decider == "llm" and self.llm is not None:
                req.waiting_for = "llm"
                task = asyncio.get_running_loop().create_task(self._ask_llm(req, self.llm))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return req
        self._decide(req, "denied", "deciders", "no decider granted it")
        return req

    async def _ask_llm(self, req: PolicyRequest, llm: LlmDecider) -> None:
        """The `llm` decider's answer; its failure, whatever it is, is a denial."""
        try:
            verdict = await llm.decide(req.domain, req.reason, req.ttl_seconds,
                                       req.scope.as_dict(), self._denials())
        except DeciderFailed as e:
            verdict = None
            why = str(e)
        except Exception as e:  # a defect of ours: still a denial, and said
            verdict = None
            why = f"the decider failed ({type(e).__name__})"
        if req.status != "pending":
            return  # the operator answered meanwhile
        if verdict is None:
            self._decide(req, "denied", "llm", why)
            return
        if not verdict.grant:
            self._decide(req, "denied", "llm", f"the model: {verdict.reason}")
            return
        refusal = self.ceiling.refusal(parse_pattern(req.domain))  # still within it?
        if refusal is None and len(self._grants) >= self.settings.max_grants:
            refusal = f"the cage holds {self.settings.max_grants} grants already (max_grants)"
        if refusal is not None:
            self._decide(req, "denied", "ceiling", refusal)
            return
        if verdict.ttl_seconds is not None:
            req.ttl_seconds = max(1, min(req.ttl_seconds, verdict.ttl_seconds))
        self._decide(req, "granted", "llm", f"the model: {verdict.reason}")

    # ---- the operator -------------------------------------------------------------------

    def approve(self, request_id: str) -> PolicyRequest:
        req = self._pending(request_id)
        refusal = self.ceiling.refusal(parse_pattern(req.domain))
        if refusal is None and len(self._grants) >= self.settings.max_grants:
            refusal = f"the cage holds {self.settings.max_grants} grants already (max_grants)"
        if refusal is not None:  # the operator approves within the ceiling too
            raise RequestError(f"cannot approve {req.domain}: {refusal}")
        self._decide(req, "granted", "human", "approved by the operator")
        return req

    def deny(self, request_id: str, why: str = "denied by the operator") -> PolicyRequest:
        req = self._pending(request_id)
        self._decide(req, "denied", "human", why)
        return req

    def _pending(self, request_id: str) -> PolicyRequest:
        req = self._requests.get(request_id)
        if req is None:
            raise RequestError(f"no request {request_id!r}; see `agentcage cage grants CAGE "
                               "list --pending`")
        if req.status != "pending":
            raise RequestError(f"request {request_id} is {req.status} already")
        return req

    def revoke(self, target: str, by: str = "operator", why: str = "revoked",
               cut: bool = True) -> list[Grant]:
        """End the grants named by `target` (a grant id, or a domain as granted), cutting
        their connections (unless `cut` is false: a grant promoted to a lasting rule). The
        grants ended."""
        ended = [g for g in self._grants.values() if target in (g.id, str(g.pattern))]
        for grant in ended:
            self._end(grant, by, why, cut)
        if ended:  # on disk before anything else: a restart never brings a revoked grant back
            self._save()
            self.flush()
        return ended

    def reinstate(self, grant: Grant, by: str = "operator") -> None:
        """A grant revoked before (by the watcher), in force again until it was to expire."""
        if grant.expires_at <= self._clock():
            raise RequestError(f"grant {grant.id} has expired meanwhile; the agent can ask again")
        if self.ceiling.refusal(grant.pattern) is not None:
            raise RequestError(f"grant {grant.id} is outside the ceiling now")
        self._grants[grant.id] = grant
        self.version += 1
        self._record(AuditRecord("policy", "allowed", "grant restored", host=str(grant.pattern),
                                 by=by, extra={"grant_id": grant.id,
                                               "expires_at": grant.expires_at}))
        self._save()

    # ---- time -----------------------------------------------------------------------------

    def tick(self) -> None:
        """Expire what is due: grants past their time (their connections cut), requests that
        waited for the operator too long. Called four times a second."""
        now = self._clock()
        changed = False
        for grant in [g for g in self._grants.values() if g.expires_at <= now]:
            self._end(grant, "expiry", "expired")
            changed = True
        timeout = self.settings.human_timeout_seconds
        for req in [r for r in self._requests.values()
                    if r.status == "pending" and now - r.created_at >= timeout]:
            self._decide(req, "denied", "human", f"no answer from the operator in {timeout:g} s")
            changed = True
        if changed:
            self._save()

    async def wait(self, request_id: str, seconds: float) -> PolicyRequest | None:
        """The request once it is decided, or as it is after `seconds`."""
        req = self._requests.get(request_id)
        if req is None or req.status != "pending" or seconds <= 0:
            return req
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(request_id, []).append(future)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(future), seconds)
        waiting = self._waiters.get(request_id, [])
        if future in waiting:
            waiting.remove(future)
        return self._requests.get(request_id)

    # ---- connections opened under a grant ---------------------------------------------

    def track(self, grant: Grant, connection: Any) -> None:
        self._tracked.setdefault(grant.id, _Tracked()).connections[connection.id] = connection

    def forget_connection(self, connection: Any) -> None:
        for tracked in self._tracked.values():
            tracked.connections.pop(connection.id, None)

    # ---- inner steps -----------------------------------------------------------------------

    def _decide(self, req: PolicyRequest, status: str, by: str, why: str) -> None:
        now = self._clock()
        extra: dict[str, Any] = {"request_id": req.id}
        grant = None
        if status == "granted":
            grant = Grant(os.urandom(8).hex(), parse_pattern(req.domain), req.scope, now,
                          now + req.ttl_seconds, by, req.id, req.reason)
            extra.update(grant_id=grant.id, expires_at=grant.expires_at,
                         scope=grant.scope.as_dict())
            try:  # a grant the audit log cannot record is not made
                self._audit(AuditRecord("policy", "allowed", f"granted: {why}",
                                        host=req.domain, by=by, extra=extra))
            except Exception as e:
                grant, status, by = None, "denied", "audit"
                why = f"the audit log cannot record a grant ({type(e).__name__})"
        req.status, req.decided_by, req.decision, req.decided_at = status, by, why, now
        req.waiting_for = None
        if grant is not None:
            self._grants[grant.id] = grant
            self.version += 1
            req.grant_id, req.expires_at = grant.id, grant.expires_at
        else:
            self._record(AuditRecord("policy", "blocked", f"{status}: {why}", host=req.domain,
                                     by=by, extra=extra))
        for future in self._waiters.pop(req.id, []):
            if not future.done():
                future.set_result(None)
        self._save()

    def _end(self, grant: Grant, by: str, why: str, cut_connections: bool = True) -> None:
        self._grants.pop(grant.id, None)
        self.version += 1
        tracked = self._tracked.pop(grant.id, None)
        cut = self._cut(tracked.connections.values()) if tracked and cut_connections else 0
        self._record(AuditRecord("policy", "blocked", f"grant {why}; {cut} connection(s) cut",
                                 host=str(grant.pattern), by=by,
                                 extra={"grant_id": grant.id, "cut": cut}))

    def _keep(self, req: PolicyRequest) -> None:
        self._requests[req.id] = req
        while len(self._requests) > KEPT_REQUESTS:
            oldest = next(iter(self._requests))
            if self._requests[oldest].status == "pending":
                break  # never forget one the operator may still answer
            del self._requests[oldest]

    def _record(self, record: AuditRecord) -> None:
        """A record of what happened anyway (a denial, an expiry): written, or said."""
        try:
            self._audit(record)
        except Exception as e:
            say(f"cannot audit ({e}): policy {record.decision}: {record.reason}")

    # ---- grants.json -----------------------------------------------------------------------

    def document(self) -> dict[str, Any]:
        return {"version": FILE_VERSION, "updated_at": self._clock(),
                "grants": [g.as_dict() for g in self.active()],
                "requests": [r.as_dict() for r in self._requests.values()]}

    def _render(self) -> str:
        """document() as grants.json holds it: a grant or a request a line, the grants' lines
        made once each (so a thousand grants cost a join, not a thousand encodings)."""
        head = json.dumps({"version": FILE_VERSION, "updated_at": self._clock()})[:-1]
        grants = ",\n".join(g.json_line for g in self.active())
        requests = ",\n".join(json.dumps(r.as_dict()) for r in self._requests.values())
        return f'{head}, "grants": [\n{grants}\n], "requests": [\n{requests}\n]}}\n'

    def _save(self) -> None:
        """The grants and requests changed: grants.json follows (statecopy.py). A write that
        fails is audited; the grants are in force either way, and the CLI's listing lags."""
        if self._copy is not None:
            self._copy.changed()

    async def persisted(self) -> None:
        """Until grants.json holds every change made so far, the loop serving other flows
        meanwhile (the agent's answer is sent after it)."""
        if self._copy is not None:
            await self._copy.written()

    def flush(self) -> None:
        """grants.json as the state is now, before returning (the operator's channel answers
        after it; the gateway's last act)."""
        if self._copy is not None:
            self._copy.flush()

    def _load(self) -> None:
        """Grants in force from a previous run of the gateway (requests are not kept)."""
        if self.path is None or not self.path.exists():
            return
        now = self._clock()
        try:
            doc = json.loads(self.path.read_text())
            grants = [Grant.from_dict(g) for g in doc.get("grants", [])]
        except (OSError, ValueError, KeyError, TypeError) as e:
            self._record(AuditRecord("policy", "flagged", f"grants.json unreadable ({e}); "
                                     "no grant kept", by="policy-api"))
            return
        for grant in grants:
            if grant.expires_at > now and self.ceiling.refusal(grant.pattern) is None:
                self._grants[grant.id] = grant
        self.version += 1
        self._save()


class LivePolicy:
    """The policy in force: domains.json's (from its holder) with the grants added, narrowed to
    the model's hosts while the watcher holds the cage in quarantine. Asked for every lookup
    and request, by the proxy's loop and the resolver's thread: the combination is made once
    per change of any of them and kept."""

    def __init__(self, base: Callable[[], Policy], grants: Grants | None,
                 watcher: Any = None):
        """`watcher`: the gateway's Watcher (watcher/watch.py), or None."""
        self._base, self._grants, self._watcher = base, grants, watcher
        self._made: tuple[Policy, int, bool, Policy] | None = None

    def current(self) -> Policy:
        base = self._base()
        if self._grants is None and self._watcher is None:
            return base
        version = self._grants.version if self._grants is not None else 0
        quarantined = self._watcher is not None and self._watcher.quarantined()
        made = self._made
        if made is not None and made[0] is base and made[1:3] == (version, quarantined):
            return made[3]
        combined = _with_grants(base, self._grants.rules() if self._grants else ())
        if quarantined:
            combined = _quarantined(combined, self._watcher)
        self._made = (base, version, quarantined, combined)
        return combined


def _with_grants(base: Policy, grants: tuple[DomainRule, ...]) -> Policy:
    if base.deny_reason is not None or not grants or base.mode == "blocklist":
        return base  # a broken policy blocks all; a blocklist allows what it does not name
    return Policy(mode="allowlist", allow=DomainMatcher((*base.allow.rules, *grants)),
                  block=base.block)


def _quarantined(policy: Policy, watcher: Any) -> Policy:
    """`policy` with what it allows narrowed to the model's hosts."""
    if policy.deny_reason is not None:
        return policy
    if policy.mode == "allowlist":
        kept = [r for r in policy.allow.rules if watcher.is_model_host(r.pattern.name)]
        return Policy(mode="allowlist", allow=DomainMatcher(kept), block=policy.block,
                      quarantined=True)
    return Policy.deny_all("quarantined by the watcher")
