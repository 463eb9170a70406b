"""What a cage's watcher had found when the cage was measured (`target.watcher` of a report).

The probe measures what a sandbox lets a process reach; agentcage's watcher judges what the
cage did send through the hosts it may reach, over time. `agentcage verify` fails a cage whose
watcher has findings, and hands them here so that the saved report says so too: a report of a
cage that alarmed is never mistaken for one of a clean cage.

The findings come from the cage's gateway, which wrote them about traffic the agent chose (the
host names are the agent's, a re-reader's summary is a model's reading of the agent's traffic):
their text is cleaned and cut here, at the one way into a report, and `--redact` keeps the
counts, budgets and actions but not the hosts or the summaries.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from agentsec.untrusted import clean_text

MAX_SHOWN = 20  # the most recent findings listed; the counts cover them all


@dataclass(frozen=True)
class WatcherFinding:
    at: float  # seconds since the epoch
    budget: str
    host: str
    summary: str
    action: str  # what the watcher did: "recorded", "revoked grant ID", ...

    def as_dict(self) -> dict[str, Any]:
        try:
            when = datetime.fromtimestamp(self.at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        except (OverflowError, OSError, ValueError):  # a time no clock gives
            when = "unknown"
        return {"at": when, "budget": clean_text(self.budget, 40),
                "host": clean_text(self.host, 255), "summary": clean_text(self.summary, 300),
                "action": clean_text(self.action, 120)}


@dataclass(frozen=True)
class CageWatcher:
    enabled: bool
    finding_count: int
    by_budget: tuple[tuple[str, int], ...] = ()
    quarantined: bool = False
    findings: tuple[WatcherFinding, ...] = ()  # the most recent, oldest first

    def as_dict(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "finding_count": self.finding_count,
                "by_budget": {clean_text(k, 40): n for k, n in self.by_budget},
                "quarantined": self.quarantined,
                "findings": [f.as_dict() for f in self.findings[-MAX_SHOWN:]]}

    def redacted(self) -> CageWatcher:
        """Counts, budgets and actions kept; each host numbered, summaries dropped."""
        numbers: dict[str, int] = {}
        kept = []
        for finding in self.findings:
            number = numbers.setdefault(finding.host, len(numbers) + 1)
            kept.append(replace(finding, host=f"[host {number}]", summary="[redacted]"))
        return replace(self, findings=tuple(kept))


def watcher_line(watcher: dict[str, Any]) -> str:
    """A report's target.watcher in words (the Markdown and the HTML report say it alike)."""
    if not watcher["enabled"]:
        return "The cage's watcher was off."
    count = watcher["finding_count"]
    if not count:
        return "The cage's watcher had no finding when it was measured."
    by = ", ".join(f"{budget} {n}" for budget, n in watcher["by_budget"].items())
    line = (f"The cage's watcher had {count} finding(s) when it was measured"
            + (f" ({by})" if by else "") + ": the cage alarmed")
    if watcher["quarantined"]:
        line += ", and was in quarantine"
    listed = len(watcher["findings"])
    return line + (f". The {listed} most recent:" if 0 < listed < count else ".")
