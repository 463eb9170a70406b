"""The watcher in the gateway: it tells the budgets of every request and name, turns what they
answer into findings, and acts on them, only ever narrowing (see the package's docstring).

Runs on the proxy's event loop; the resolver's thread tells it names too (under a lock), and
what those cross is acted on at the next tick, on the loop (a grant is revoked there).

Most requests are told to the budgets after they have left, with the answers that came back
(what the cage may send back as echoes): when the gateway runs it (`lazy`), at the next tick
(four times a second) or before the next request that cannot wait, whichever comes first, so
that a request costs no turn of the event loop of its own and the budgets work through
several at once. A request may wait when nothing the budgets could find would refuse it: it
came through no runtime grant the watcher would revoke, and no quarantine could begin with
it (a request counts once towards one, however many budgets it crosses). Every other request
is told at once, after what waits. Everything is told in the order it came, and before any
request whose fate it could change, so the findings, the amounts and the requests refused
are those of telling each at once. What the information budget may measure later (a request
that cannot cross it, an answer) waits too (budgets.Information). Its state for the CLI is
watcher.json in the cage's state directory (the gateway alone writes it; nothing in it is
secret: hosts, amounts, grant ids).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from agentcage.domains import DomainMatcher, DomainRule, parse_pattern
from agentcage.gateway.audit import AuditRecord, say
from agentcage.gateway.control.grants import Grant, Grants
from agentcage.gateway.watcher.budgets import Beacon, HostBytes, Information, NewHosts
from agentcage.gateway.watcher.events import Crossing, Sent
from agentcage.gateway.watcher.ladder import Change, Ladder
from agentcage.gateway.watcher.names import ZoneNames
from agentcage.gateway.watcher.reassembly import Reassembly
from agentcage.gateway.watcher.settings import WatcherSettings
from agentcage.gateway.watcher.windows import Once
from agentcage.inspect.patterns import PatternSet

FILE_VERSION = 1
SAVE_EVERY = 5.0  # seconds: how often the usage of the budgets is written, when it changed
KEPT_FINDINGS = 200
TRACKED_CONNECTIONS = 2048
MAX_WAITING = 64  # requests and answers told later, at most: past that, all are told at once
MAX_WAITING_ANSWERS = 1024 * 1024  # bytes of the answers told later, at most


def shipped_model_hosts() -> tuple[str, ...]:
    doc = json.loads(resources.files("agentcage").joinpath("data/model_hosts.json").read_text())
    return tuple(doc["hosts"])


class _Answer(NamedTuple):
    """A response, as the watcher is told it (see Watcher.answered)."""

    host: str
    body: bytes | Callable[[], bytes]
    size: int


@dataclass(frozen=True)
class Finding:
    id: str
    at: float
    budget: str
    host: str
    summary: str
    evidence: dict[str, Any]
    grant: str | None
    action: str  # what was done: recorded | revoked grant ID | ...
    flow: str = ""  # the flow that crossed the budget (its capture record's id), if one did

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "at": self.at, "budget": self.budget, "host": self.host,
                "summary": self.summary, "evidence": self.evidence, "grant_id": self.grant,
                "action": self.action, "flow": self.flow}


class Watcher:
    def __init__(self, settings: WatcherSettings, audit: Callable[[AuditRecord], object],
                 patterns: PatternSet, grants: Grants | None = None,
                 path: Path | None = None, cut: Callable[[Iterable[Any]], int] = lambda c: 0,
                 clock: Callable[[], float] = time.time):
        self.settings, self.grants, self.path = settings, grants, path
        self._audit, self._cut, self._clock = audit, cut, clock
        budgets = settings.budgets
        once = Once(budgets.window_seconds)
        self.information = Information(budgets, once)
        self.units: list[Any] = [HostBytes(budgets, once), self.information,
                                 Beacon(budgets, once), NewHosts(budgets, once)]
        if budgets.reassembly:
            self.units.append(Reassembly(patterns, once))
        self.names = ZoneNames(budgets, once)
        self.ladder = Ladder(settings)
        self._models = DomainMatcher(DomainRule(parse_pattern(h), None, "model")
                                     for h in (*shipped_model_hosts(), *settings.model_hosts))
        self._model_answers: dict[str, bool] = {}
        self._lock = threading.Lock()  # the units' state: the resolver's thread tells names
        # the crossings of each name looked up in the resolver's thread, acted on at tick
        self._later: list[list[Crossing]] = []
        # requests that left and answers that came back, not yet told (on the loop, in order)
        self._waiting: deque[Sent | _Answer] = deque()
        self._waiting_requests = 0
        self._waiting_bytes = 0  # of the answers
        self._revokes = settings.action == "revoke"
        # The gateway's: what may wait is told at the next tick, or before the next request
        # that cannot wait. Otherwise (tests, benches: no tick) at once.
        self.lazy = False
        self.findings: deque[Finding] = deque(maxlen=KEPT_FINDINGS)
        self.counts: dict[str, int] = {}
        self.revoked: dict[str, Grant] = {}  # grants the watcher revoked: the operator's undo
        self._connections: OrderedDict[str, Any] = OrderedDict()  # id -> client connection
        self._newest = ""  # the id of the connection tracked last
        self._dirty, self._saved_at = False, 0.0
        self._unsettled = False  # the last settle failed
        self.last_scan: dict[str, Any] | None = None  # the re-reader's (reread.py)
        self.reader: Any = None  # the re-reader, when there is one (set by the gateway)
        self._scans: set[asyncio.Task[Any]] = set()
        self._load()

    # ---- what the gateway asks ---------------------------------------------------------

    def is_model_host(self, host: str) -> bool:
        known = self._model_answers.get(host)
        if known is None:  # asked for every request and response: answered once per name
            if len(self._model_answers) > 4096:
                self._model_answers.clear()
            known = self._model_answers[host] = self._models.match(host) is not None
        return known

    def quarantined(self) -> bool:
        return self.ladder.quarantined(self._clock())

    def refusal(self, host: str) -> str | None:
        """Why a request to `host` is refused now (a quarantine), or None."""
        until = self.ladder.quarantined_until
        if until is None or not self.ladder.quarantined(self._clock()) or self.is_model_host(
                host):
            return None
        return (f"the cage is quarantined by the watcher until "
                f"{time.strftime('%H:%M:%S', time.localtime(until))} (only the model's hosts "
                "are reachable); the operator can release it: agentcage watcher release CAGE")

    # ---- what it is told -----------------------------------------------------------------

    def sent(self, s: Sent, connection: Any = None) -> str | None:
        """A request about to leave; why it must not, if the findings it made narrowed the
        cage so far that its host is out (its grant revoked, or a quarantine begun)."""
        if connection is not None and not s.model_host:
            self._track(connection)
        self._dirty = True
        if self._may_wait(s):
            self._waiting.append(s)
            self._waiting_requests += 1
            if not self.lazy:
                self.settle()
            return self.refusal(s.host)
        self._tell_waiting()  # in order, and they may narrow what this one may do
        with self._lock:
            crossings = self._crossings(s)
        if crossings:
            self._acted(crossings, s.flow, at=s.at)
        if not self.lazy:
            self.settle()
        # revoked by its own findings, or by those of a request told just now (the policy
        # judged this one before they were)
        if s.grant is not None and s.grant in self.revoked:
            return f"the watcher revoked grant {s.grant}: it carried too much"
        return self.refusal(s.host)

    def _may_wait(self, s: Sent) -> bool:
        """Whether `s` may be told to the budgets once it has left: no finding could refuse
        it. One refuses the request that made it by revoking its runtime grant, or by a
        quarantine that begins with it (the model's hosts are spared one); each request told
        counts once towards a quarantine, so the findings of those waiting and of this one
        cannot begin one if fewer than `escalate_after` would be counted in all."""
        if self._unsettled or len(self._waiting) >= MAX_WAITING:
            return False
        if s.grant is not None and self._revokes:
            return False
        wanted = self.settings.escalate_after
        return (not wanted or s.model_host
                or len(self.ladder.recent) + self._waiting_requests + 1 < wanted)

    def _crossings(self, s: Sent) -> list[Crossing]:
        crossings = [c for unit in self.units for c in unit.sent(s)]
        crossings += self.names.named(s.host, s.at, s.grant)
        return crossings

    def _tell_waiting(self) -> None:
        """Tell the budgets what waits, in order, and act on what they find. The last settle
        failed: everything owed settled first (failing again, if it does). Each is taken off
        once told: one whose telling fails stays, and fails again."""
        if self._unsettled:
            self.settle()
            return
        waiting = self._waiting
        while waiting:
            event = waiting[0]
            with self._lock:
                if isinstance(event, Sent):
                    crossings = self._crossings(event)
                else:
                    self.information.received(*event)
                    crossings = []
            waiting.popleft()
            if isinstance(event, Sent):
                self._waiting_requests -= 1
                if crossings:
                    self._acted(crossings, event.flow, at=event.at)
            else:
                self._waiting_bytes -= event.size

    def relayed(self, host: str, port: int, command: str, data: bytes) -> str | None:
        """What the cage sends a mail server through a relay (a command, a message), told as
        a request of its own to `host`: a mail is as good a way out as a POST. Why it must not
        go, as `sent` says."""
        return self.sent(Sent(host, port, command, "", (), data, self._clock(),
                              self.is_model_host(host)))

    def received(self, host: str, body: bytes) -> None:
        """A response of `host` (what the cage may echo back to it without sending anything)."""
        if body:
            self.answered(host, body, len(body))

    def answered(self, host: str, body: bytes | Callable[[], bytes], size: int) -> None:
        """A response of `host`, as `received`; `body` may be a function that reads it (of
        `size` bytes, or about that), called once the response has gone to the cage: when
        it is told, after the requests sent before it (what it teaches matters to the
        requests after it, which are measured after it)."""
        if self.is_model_host(host):
            return
        self._waiting.append(_Answer(host, body, size))
        self._waiting_bytes += size
        if (not self.lazy or len(self._waiting) >= MAX_WAITING
                or self._waiting_bytes > MAX_WAITING_ANSWERS):
            self._tell_waiting()

    @property
    def owed(self) -> bool:
        """Whether something is left to tell or measure (see `settle`)."""
        return bool(self._waiting) or self.information.owed

    def settle(self) -> None:
        """Everything owed told and measured, in order."""
        self._unsettled = False
        try:
            self._tell_waiting()
            with self._lock:
                self.information.settle()
        except BaseException:
            self._unsettled = True
            raise

    def _settle_or_flag(self) -> None:
        """Settle at a tick: a failure is audited (once, not at every tick while it lasts),
        and the next request waits for it (it is told at once, after everything owed, which
        fails again: the gateway refuses it)."""
        failing = self._unsettled
        try:
            self.settle()
        except Exception as e:
            if failing:
                return
            self._record(AuditRecord("watcher", "flagged", "cannot tell the budgets what was "
                                     f"sent ({type(e).__name__}: {e}); the next request "
                                     "waits for it", by="watcher"))

    def close(self) -> None:
        """The gateway stops: what waits told, and watcher.json written."""
        if self.owed:
            self._settle_or_flag()
        self._save()

    def named(self, name: str) -> None:
        """A name the cage looked up (the resolver's thread)."""
        with self._lock:
            if crossings := self.names.named(name, self._clock()):
                self._later.append(list(crossings))

    def observe(self, record: dict[str, Any]) -> None:
        """An audit observer: the names of the cage's lookups."""
        if record.get("direction") == "dns" and record.get("decision") == "allowed":
            host = record.get("host")
            if isinstance(host, str) and host:
                self.named(host)

    def tick(self) -> None:
        """Four times a second, on the loop: act on what the resolver's thread found, settle
        what is owed, end a quarantine that is due, forgive after quiet."""
        with self._lock:
            later, self._later = self._later, []
        for crossings in later:
            self._acted(crossings)
        if self.owed:
            self._settle_or_flag()
        now = self._clock()
        change = self.ladder.tick(now)
        if change is not None:
            self._changed(change)
        elif self._dirty and now - self._saved_at >= SAVE_EVERY:
            self._save()  # the budgets' usage, for `agentcage watcher status`

    # ---- the re-reader's (reread.py) -----------------------------------------------------

    def reread_finding(self, summary: str, host: str, grant: str | None,
                       facts: dict[str, Any], narrow: bool) -> None:
        """A finding of the LLM re-reader: recorded; with `narrow` (auto_revoke), acted on as
        the budgets' are (the grant it names revoked, counted towards a quarantine)."""
        known = grant if grant and self.grants is not None and self.grants.grant(grant) else None
        crossing = Crossing("reread", host, f"the re-reader: {summary}",
                            {"scan_seed": facts.get("seed"), "window": facts.get("window")},
                            known)
        self._acted([crossing], narrow=narrow)

    def scan_now(self) -> dict[str, Any]:
        """The operator's `agentcage watcher scan`: a scan of the re-reader, begun now."""
        from agentcage.gateway.control.ceiling import RequestError

        if self.reader is None:
            raise RequestError("this cage has no re-reader (agents.watcher.enable: false)")
        started = self._clock()  # before: the task may run at once (an eager task factory)
        task = asyncio.get_running_loop().create_task(self.reader.scan())
        self._scans.add(task)
        task.add_done_callback(self._scans.discard)
        return {"started": started}

    def scanned(self, ok: bool, reason: str) -> None:
        self.last_scan = {"at": self._clock(), "ok": ok, "said": reason}
        self._save()

    # ---- the operator ----------------------------------------------------------------------

    def release(self) -> dict[str, Any]:
        self._changed(self.ladder.release(), by="operator")
        return self.status()

    def restore(self, grant_id: str) -> dict[str, Any]:
        """A grant the watcher revoked, in force again for the rest of its time."""
        from agentcage.gateway.control.ceiling import RequestError

        grant = self.revoked.get(grant_id)
        if grant is None:
            raise RequestError(f"the watcher revoked no grant {grant_id!r}; see `agentcage "
                               "watcher findings CAGE`")
        if self.grants is None:
            raise RequestError("this cage has no policy API, so no grants")
        self.grants.reinstate(grant)
        del self.revoked[grant_id]
        self._save()
        return {"restored": grant.as_dict()}

    def status(self) -> dict[str, Any]:
        now = self._clock()
        return {"enable": True, "quarantined": self.ladder.quarantined(now),
                **self.ladder.as_dict(), "findings": sum(self.counts.values()),
                "by_budget": dict(sorted(self.counts.items())),
                "revoked": sorted(self.revoked), "action": self.settings.action,
                "window_seconds": self.settings.budgets.window_seconds,
                "information_bytes": int(self.information.total.value(now)),
                "information_budget": self.settings.budgets.information_bytes,
                "reread": bool(self.settings.llm_provider), "last_scan": self.last_scan}

    # ---- acting ------------------------------------------------------------------------------

    def _acted(self, crossings: list[Crossing], flow: str = "", narrow: bool = True,
               at: float | None = None) -> None:
        """Record the findings of one thing told (a request, a name, a scan) at `at` (now,
        if None) and narrow as the settings say (never, unless `narrow`). However many
        budgets it crossed, it counts once towards a quarantine."""
        now = self._clock() if at is None else at
        for crossing in crossings:
            action = "recorded"
            grant = (self.grants.grant(crossing.grant)
                     if self.grants is not None and crossing.grant else None)
            if narrow and self._revokes and grant is not None:
                assert self.grants is not None
                self.grants.revoke(grant.id, by="watcher",
                                   why=f"revoked by the watcher ({crossing.budget})")
                self.revoked[grant.id] = grant
                action = f"revoked grant {grant.id}"
            finding = Finding(os.urandom(6).hex(), now, crossing.budget, crossing.host,
                              crossing.summary, crossing.evidence, crossing.grant, action, flow)
            self.findings.append(finding)
            self.counts[crossing.budget] = self.counts.get(crossing.budget, 0) + 1
            self._record(AuditRecord("watcher", "flagged", crossing.summary,
                                     host=crossing.host, by=crossing.budget,
                                     extra={"finding_id": finding.id,
                                            "evidence": crossing.evidence,
                                            "grant_id": crossing.grant, "action": action,
                                            "flow": flow}))
        change = self.ladder.finding(now) if narrow and crossings else None
        if change is not None:
            self._changed(change)
        else:
            self._save()

    def _changed(self, change: Change, by: str = "watcher") -> None:
        cut = 0
        if change.what == "quarantined":
            cut = self._cut(list(self._connections.values()))
            self._connections.clear()
            self._newest = ""
        reasons = {
            "quarantined": f"quarantined: everything but the model's hosts refused for "
                           f"{(change.until or 0) - self._clock():.0f} s "
                           f"(strike {change.strikes}); {cut} connection(s) cut",
            "recovered": "quarantine over (its time was up)",
            "released": "quarantine released by the operator; strikes forgiven",
            "forgiven": f"a quiet window: one strike forgiven ({change.strikes} left)",
        }
        decision = "blocked" if change.what == "quarantined" else "allowed"
        self._record(AuditRecord("watcher", decision, reasons[change.what], by=by,
                                 extra={"state": change.what, "until": change.until,
                                        "strikes": change.strikes}))
        self._save()

    def _track(self, connection: Any) -> None:
        if connection.id == self._newest:  # most requests: the connection of the last one
            return
        self._newest = connection.id
        self._connections[connection.id] = connection
        self._connections.move_to_end(connection.id)
        while len(self._connections) > TRACKED_CONNECTIONS:
            self._connections.popitem(last=False)

    def _record(self, record: AuditRecord) -> None:
        try:
            self._audit(record)
        except Exception as e:  # the narrowing stands either way
            say(f"cannot audit ({e}): watcher {record.decision}: {record.reason}")

    # ---- watcher.json ------------------------------------------------------------------------

    def document(self) -> dict[str, Any]:
        return {"version": FILE_VERSION, "updated_at": self._clock(), "status": self.status(),
                "findings": [f.as_dict() for f in self.findings],
                "revoked": [g.as_dict() for g in self.revoked.values()]}

    def _save(self) -> None:
        if self.path is None:
            return
        from agentcage.state import atomic_write

        self._dirty, self._saved_at = False, self._clock()
        try:
            atomic_write(self.path, json.dumps(self.document(), indent=1) + "\n")
        except OSError as e:  # in force either way; the CLI's view lags
            self._record(AuditRecord("watcher", "flagged", f"cannot write {self.path}: {e}",
                                     by="watcher"))

    def _load(self) -> None:
        """What a previous run of the gateway left: its findings, a quarantine in force."""
        if self.path is None or not self.path.exists():
            return
        try:
            doc = json.loads(self.path.read_text())
            findings = [Finding(str(f["id"]), float(f["at"]), str(f["budget"]), str(f["host"]),
                                str(f["summary"]), dict(f["evidence"]), f.get("grant_id"),
                                str(f["action"]), str(f.get("flow") or ""))
                        for f in doc.get("findings", [])]
            revoked = [Grant.from_dict(g) for g in doc.get("revoked", [])]
            status = dict(doc.get("status") or {})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            self._record(AuditRecord("watcher", "flagged", f"watcher.json unreadable ({e}); "
                                     "starting afresh", by="watcher"))
            return
        self.findings.extend(findings)
        counts = status.get("by_budget")
        if isinstance(counts, dict):  # all of them, not only the findings kept
            self.counts = {str(k): int(v) for k, v in counts.items()}
        now = self._clock()
        self.revoked = {g.id: g for g in revoked if g.expires_at > now}
        self.ladder.restore(status, now)
