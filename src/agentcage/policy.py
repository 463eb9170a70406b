"""The cage's domain policy: the file the CLI writes (`domains.json`) and the gateway obeys.

One format, one decision function, used by the resolver and the proxy alike.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcage.domains import (
    DomainMatcher,
    DomainPatternError,
    DomainRule,
    host_refusal,
    parse_pattern,
)

POLICY_VERSION = 1
Mode = str | None  # "allowlist" | "blocklist" | None (deny everything)


class PolicyFileError(ValueError):
    """The policy file is unreadable or invalid; the gateway then blocks everything."""


@dataclass(frozen=True)
class DomainDecision:
    allowed: bool
    reason: str
    rule: DomainRule | None = None


@dataclass(frozen=True)
class Policy:
    """A compiled, immutable policy. `deny_reason` set means: block everything, say why."""

    mode: Mode
    allow: DomainMatcher = field(default_factory=lambda: DomainMatcher(()))
    block: DomainMatcher = field(default_factory=lambda: DomainMatcher(()))
    deny_reason: str | None = None
    # narrowed by the watcher's quarantine (allow: the model's hosts alone); what the policy
    # does not decide by name (the mail relays) is shut while it is
    quarantined: bool = False

    @classmethod
    def deny_all(cls, reason: str) -> Policy:
        return cls(mode=None, deny_reason=reason)

    def decide(self, host: str, now: float | None = None) -> DomainDecision:
        if self.deny_reason is not None:
            return DomainDecision(False, self.deny_reason)
        if (refusal := host_refusal(host)) is not None:
            return DomainDecision(False, refusal)
        if self.mode == "allowlist":
            rule = self.allow.match(host, now)
            if rule is None:
                return DomainDecision(False, "not in allowlist")
            return DomainDecision(True, f"allowlisted: {rule.pattern}", rule)
        if self.mode == "blocklist":
            rule = self.block.match(host, now)
            if rule is not None:
                return DomainDecision(False, f"blocklisted: {rule.pattern}", rule)
            return DomainDecision(True, "not in blocklist")
        return DomainDecision(False, "no domain mode configured (deny all)")


def _rule_entry(pattern: str, expires_at: float | None = None, source: str = "config") -> dict:
    return {"pattern": str(parse_pattern(pattern)), "expires_at": expires_at, "source": source}


def policy_document(mode: Mode, allow: list[dict], block: list[dict]) -> dict[str, Any]:
    return {"version": POLICY_VERSION, "mode": mode, "allow": allow, "block": block}


def document_from_domains(mode: Mode, allow: list[str], block: list[str]) -> dict[str, Any]:
    """The initial policy document of a cage, from the cage.yaml domains section."""
    return policy_document(
        mode, [_rule_entry(p) for p in allow], [_rule_entry(p) for p in block]
    )


def runtime_entries(doc: dict[str, Any]) -> dict[str, list[dict]]:
    """The rules added at run time (`domain add`), by list: what a new configuration keeps."""
    return {key: [r for r in doc.get(key, []) if r.get("source") == "cli"]
            for key in ("allow", "block")}


def with_entries(doc: dict[str, Any], entries: dict[str, list[dict]]) -> dict[str, Any]:
    """`doc` with `entries` added to the list its mode uses (a rule already there wins)."""
    key = "block" if doc.get("mode") == "blocklist" else "allow"
    have = {r["pattern"] for r in doc.get(key, [])}
    extra = [r for r in entries.get(key, []) if r["pattern"] not in have]
    return {**doc, key: [*doc.get(key, []), *extra]} if extra else doc


def add_rule(doc: dict[str, Any], pattern: str, expires_at: float | None) -> dict[str, Any]:
    """A new document with `pattern` added to the list the mode uses (allowlist if none)."""
    mode = doc.get("mode") or "allowlist"
    key = "block" if mode == "blocklist" else "allow"
    entry = _rule_entry(pattern, expires_at, source="cli")
    kept = [r for r in doc.get(key, []) if r["pattern"] != entry["pattern"]]
    return {**doc, "mode": mode, key: [*kept, entry]}


def remove_rule(doc: dict[str, Any], pattern: str) -> tuple[dict[str, Any], bool]:
    target = str(parse_pattern(pattern))
    out = dict(doc)
    found = False
    for key in ("allow", "block"):
        rules = doc.get(key, [])
        kept = [r for r in rules if r["pattern"] != target]
        found = found or len(kept) != len(rules)
        out[key] = kept
    return out, found


def compile_document(doc: Any) -> Policy:
    """Validate and compile a policy document; raise PolicyFileError on anything unexpected."""
    if not isinstance(doc, dict) or doc.get("version") != POLICY_VERSION:
        raise PolicyFileError(f"policy file must be a mapping with version {POLICY_VERSION}")
    mode = doc.get("mode")
    if mode not in ("allowlist", "blocklist", None):
        raise PolicyFileError(f"unknown mode {mode!r}")
    matchers = {}
    for key in ("allow", "block"):
        entries = doc.get(key, [])
        if not isinstance(entries, list):
            raise PolicyFileError(f"{key} must be a list")
        rules = []
        for entry in entries:
            try:
                expires = entry.get("expires_at")
                if expires is not None and not isinstance(expires, int | float):
                    raise PolicyFileError(f"{key}: expires_at must be a number")
                pattern = parse_pattern(entry["pattern"])
                rules.append(DomainRule(pattern, expires, str(entry.get("source", ""))))
            except (DomainPatternError, KeyError, TypeError, AttributeError) as e:
                raise PolicyFileError(f"{key}: invalid entry {entry!r}: {e}") from None
        matchers[key] = DomainMatcher(rules)
    return Policy(mode=mode, allow=matchers["allow"], block=matchers["block"])


def read_policy(path: Path) -> Policy:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PolicyFileError(f"cannot read {path}: {e}") from None
    return compile_document(doc)


def describe(doc: dict[str, Any], now: float | None = None) -> list[dict[str, Any]]:
    """Rows for `domain list`: pattern, list, source, expiry, active."""
    moment = time.time() if now is None else now
    rows = []
    for key in ("allow", "block"):
        for r in doc.get(key, []):
            exp = r.get("expires_at")
            rows.append(
                {
                    "pattern": r["pattern"],
                    "list": key,
                    "source": r.get("source", ""),
                    "expires_at": exp,
                    "active": exp is None or moment < exp,
                }
            )
    return rows
