"""Provider credential patterns, loaded from data/secret_patterns.json (data, not code).

Each pattern names where its credential may go. Names listed there are curated provider
domains, so each covers its subdomains even when it is a public suffix (`amazonaws.com`):
an AWS key belongs on `sts.amazonaws.com` and every regional endpoint.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

from agentcage.domains import DomainMatcher, DomainPattern, DomainRule, parse_pattern

PATTERNS_VERSION = 1
_LARGE = 64 * 1024


class PatternError(ValueError):
    """The pattern data is invalid; the message names the pattern."""


@dataclass(frozen=True)
class ProviderPattern:
    id: str
    provider: str
    regex: re.Pattern[bytes]
    allowed: DomainMatcher
    action: Literal["block", "flag"] = "block"
    severity: str = "critical"
    anchors: tuple[bytes, ...] = ()

    def allows(self, host: str) -> bool:
        return self.allowed.match(host) is not None


def _matcher(names: Sequence[str], source: str) -> DomainMatcher:
    rules: list[DomainRule] = []
    for name in names:
        pattern = parse_pattern(name)
        rules.append(DomainRule(pattern, source=source))
        if not pattern.wildcard:
            rules.append(DomainRule(DomainPattern(pattern.name, wildcard=True), source=source))
    return DomainMatcher(rules)


_KEYS = frozenset({"id", "provider", "regex", "allowed", "action", "severity", "anchors"})


def compile_pattern(entry: Mapping[str, Any]) -> ProviderPattern:
    pid = str(entry.get("id", "?"))
    try:
        if unknown := sorted(set(entry) - _KEYS):
            raise ValueError(f"unknown keys {unknown}; known: {sorted(_KEYS)}")
        action = entry.get("action", "block")
        if action not in ("block", "flag"):
            raise ValueError(f"action must be block or flag, not {action!r}")
        return ProviderPattern(
            id=pid,
            provider=str(entry["provider"]),
            regex=re.compile(str(entry["regex"]).encode()),
            allowed=_matcher(entry.get("allowed", ()), f"pattern:{pid}"),
            action=action,
            severity=str(entry.get("severity", "critical")),
            anchors=tuple(str(a).encode() for a in entry.get("anchors", ())),
        )
    except (KeyError, TypeError, ValueError, re.error) as e:
        raise PatternError(f"secret pattern {pid}: {e}") from None


def required_punctuation(regex: re.Pattern[bytes]) -> frozenset[int]:
    """Non-alphanumeric bytes every match of `regex` contains (a safe under-approximation:
    whatever the analysis cannot follow contributes nothing)."""
    try:
        from re import _parser  # the standard library's own regex parser
    except ImportError:  # pragma: no cover - a future Python without it: skip the shortcut
        return frozenset()

    def walk(items: Any) -> set[int]:
        found: set[int] = set()
        for op, arg in items:
            if op is _parser.LITERAL:
                found.add(arg)
            elif op is _parser.SUBPATTERN:
                found |= walk(arg[-1])
            elif op in (_parser.MAX_REPEAT, _parser.MIN_REPEAT) and arg[0] >= 1:
                found |= walk(arg[2])
            elif op is _parser.BRANCH:
                found |= set.intersection(*(walk(alt) for alt in arg[1]))
        return found

    try:
        chars = walk(_parser.parse(regex.pattern.decode("latin-1")))
    except Exception:  # any surprise only disables an optimisation
        return frozenset()
    return frozenset(c for c in chars if not chr(c).isalnum())


class PatternSet:
    """All patterns, matched over a text one after the other."""

    def __init__(self, patterns: Sequence[ProviderPattern]):
        self.patterns = tuple(patterns)
        if len({p.id for p in self.patterns}) != len(self.patterns):
            raise PatternError("secret pattern ids must be unique")
        self.anchors = tuple(a for p in self.patterns for a in p.anchors)
        self._needs = tuple(required_punctuation(p.regex) for p in self.patterns)
        self._punctuation = bytes(sorted(set().union(*self._needs)))

    def scan(self, text: bytes) -> Iterator[tuple[ProviderPattern, bytes]]:
        # One regex per pattern, each starting with a literal: the engine jumps between
        # occurrences of that literal at memory speed. A combined alternation (or a hint
        # pre-check) loses that path and measured 2x to 20x slower. In a large text, a
        # pattern that needs a punctuation byte the text lacks is skipped (a memchr each).
        absent: frozenset[int] = frozenset()
        if len(text) > _LARGE:
            absent = frozenset(c for c in self._punctuation if c not in text)
        for pattern, needs in zip(self.patterns, self._needs, strict=True):
            if absent and not needs.isdisjoint(absent):
                continue
            for m in pattern.regex.finditer(text):
                yield pattern, m.group()


def load_document(text: str | None = None) -> dict[str, Any]:
    if text is None:
        text = resources.files("agentcage").joinpath("data/secret_patterns.json").read_text()
    doc = json.loads(text)
    if doc.get("version") != PATTERNS_VERSION:
        raise PatternError(f"secret patterns: unsupported version {doc.get('version')!r}")
    return doc


def load_patterns(extra: Sequence[Mapping[str, Any]] = ()) -> PatternSet:
    """The built-in patterns, plus `extra` ones (same shape) from configuration."""
    entries = [*load_document()["patterns"], *extra]
    return PatternSet([compile_pattern(e) for e in entries])
