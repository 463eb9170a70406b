"""How far the watcher narrows: findings escalate to a quarantine, quiet time steps back down.

- Every finding is counted for one window, the findings of one request (or name, or scan)
  once: repeated findings escalate, not one request's several. `escalate_after` counts within
  it quarantine the cage (everything refused but the model hosts) for `quarantine_seconds`,
  doubled for each quarantine before it that was not yet forgiven, up to
  `quarantine_max_seconds`.
- A quarantine ends by itself when its time is up (timed recovery), or when the operator
  releases it (`agentcage watcher release NAME`, which forgives every strike).
- A whole window without a finding forgives one strike: a host polled for ever yields one
  finding per window, which never reaches a quarantine, and even repeated quarantines decay.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from agentcage.gateway.watcher.settings import WatcherSettings


@dataclass(frozen=True)
class Change:
    """A change of the ladder's state, to audit: `quarantined` (until `until`), `recovered`
    (the time was up), `released` (by the operator), `forgiven` (a quiet window)."""

    what: str
    until: float | None = None
    strikes: int = 0


class Ladder:
    def __init__(self, settings: WatcherSettings):
        self.settings = settings
        self.window = settings.budgets.window_seconds
        self.recent: deque[float] = deque()  # times of the findings within a window
        self.strikes = 0  # quarantines not yet forgiven
        self.quarantined_until: float | None = None
        self.last_finding: float | None = None
        self.last_forgiven: float | None = None

    def quarantined(self, now: float) -> bool:
        return self.quarantined_until is not None and now < self.quarantined_until

    def finding(self, now: float) -> Change | None:
        """Count a finding (those of one request: once); the quarantine it starts, if it
        does."""
        self.last_finding = now
        self.recent.append(now)
        self._expire(now)
        wanted = self.settings.escalate_after
        if not wanted or len(self.recent) < wanted or self.quarantined(now):
            return None
        seconds = min(self.settings.quarantine_seconds * 2 ** self.strikes,
                      self.settings.quarantine_max_seconds)
        self.strikes += 1
        self.quarantined_until = now + seconds
        self.recent.clear()  # the next quarantine needs findings of its own
        return Change("quarantined", self.quarantined_until, self.strikes)

    def tick(self, now: float) -> Change | None:
        """The quarantine's end when it is due; a strike forgiven after a quiet window."""
        self._expire(now)
        if self.quarantined_until is not None and now >= self.quarantined_until:
            self.quarantined_until = None
            return Change("recovered", None, self.strikes)
        quiet_since = max(t for t in (self.last_finding, self.last_forgiven, 0.0)
                          if t is not None)
        if self.strikes and not self.quarantined(now) and now - quiet_since >= self.window:
            self.strikes -= 1
            self.last_forgiven = now
            return Change("forgiven", None, self.strikes)
        return None

    def release(self) -> Change:
        self.quarantined_until, self.strikes = None, 0
        self.recent.clear()
        return Change("released", None, 0)

    def _expire(self, now: float) -> None:
        while self.recent and self.recent[0] <= now - self.window:
            self.recent.popleft()

    def as_dict(self) -> dict[str, Any]:
        return {"strikes": self.strikes, "quarantined_until": self.quarantined_until,
                "recent_findings": len(self.recent), "last_finding": self.last_finding}

    def restore(self, doc: dict[str, Any], now: float) -> None:
        """The state a previous run of the gateway left (a quarantine outlives a restart)."""
        self.strikes = int(doc.get("strikes") or 0)
        until = doc.get("quarantined_until")
        self.quarantined_until = float(until) if until and float(until) > now else None
        last = doc.get("last_finding")
        self.last_finding = float(last) if last else None
