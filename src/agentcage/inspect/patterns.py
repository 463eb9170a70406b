"""Provider credential patterns, loaded from data/secret_patterns.json (data, not code).

Each pattern names where its credential may go. Names listed there are curated provider
domains, so each covers its subdomains even when it is a public suffix (`amazonaws.com`):
an AWS key belongs on `sts.amazonaws.com` and every regional endpoint.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import ModuleType
from typing import Any, Literal

from agentcage.domains import DomainMatcher, DomainPattern, DomainRule, parse_pattern
from agentcage.inspect.runs import WIDE_BYTES, WIDE_MIN

PATTERNS_VERSION = 1
_LARGE = 64 * 1024
_SMALL = 1536  # texts this size or less go through the combined prefilter first
LONG_TOKEN = 32  # patterns whose matches are token runs this long scan only such runs


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


def _regex_parser() -> ModuleType | None:
    """The standard library's own regex parser: private, so typeshed does not declare it, and
    a future Python may not have it (then the shortcuts that use it are skipped)."""
    try:
        return importlib.import_module("re._parser")
    except ImportError:  # pragma: no cover - a future Python without it
        return None


def _min_width(regex: re.Pattern[bytes]) -> int:
    """The fewest bytes `regex` can match (0 when that cannot be told: no shortcut then)."""
    parser = _regex_parser()
    if parser is None:
        return 0
    try:
        return int(parser.parse(regex.pattern, regex.flags).getwidth()[0])
    except Exception:  # pragma: no cover - the private parser changed
        return 0


def required_punctuation(regex: re.Pattern[bytes]) -> frozenset[int]:
    """Non-alphanumeric bytes every match of `regex` contains (a safe under-approximation:
    whatever the analysis cannot follow contributes nothing)."""
    _parser = _regex_parser()
    if _parser is None:
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


class _NotTokens(Exception):
    """Raised inside `token_min_len`: some part of the regex can match other bytes."""


def token_min_len(regex: re.Pattern[bytes]) -> int | None:
    """The shortest match of `regex` when every byte it can match or look at (lookarounds
    included) is a token byte (runs.WIDE_BYTES); else None, as when the analysis cannot tell.

    Such a match lies inside one maximal token run, and next to the run is a non-token byte,
    or the edge of the data: either makes any token-only lookaround fail or pass alike. So in
    the runs joined by a non-token byte (`ByteIndex.tokens`) the regex finds the same matches.
    """
    if regex.flags:  # case folding, verbose, dot-all...: not followed here
        return None
    _parser = _regex_parser()
    if _parser is None:
        return None
    repeats = {_parser.MAX_REPEAT, _parser.MIN_REPEAT, getattr(_parser, "POSSESSIVE_REPEAT", None)}

    def one_byte(items: Any) -> None:
        for op, arg in items:
            if op is _parser.LITERAL and arg in WIDE_BYTES:
                continue
            if op is _parser.RANGE and set(range(arg[0], arg[1] + 1)) <= WIDE_BYTES:
                continue
            raise _NotTokens  # NEGATE, CATEGORY (\s, \w...) or a non-token byte

    def width(items: Any) -> int:
        total = 0
        for op, arg in items:
            if op is _parser.LITERAL:
                one_byte([(op, arg)])
                total += 1
            elif op is _parser.IN:
                one_byte(arg)
                total += 1
            elif op is _parser.SUBPATTERN and not arg[1] and not arg[2]:  # no scoped flags
                total += width(arg[3])
            elif op in repeats:
                total += arg[0] * width(arg[2])
            elif op is _parser.BRANCH:
                total += min(width(alt) for alt in arg[1])
            elif op in (_parser.ASSERT, _parser.ASSERT_NOT):
                width(arg[1])  # looks at bytes, consumes none
            elif op is getattr(_parser, "ATOMIC_GROUP", None):
                total += width(arg)
            else:  # ANY, AT (^ $ \b), group references, conditionals...
                raise _NotTokens
        return total

    try:
        return width(_parser.parse(regex.pattern, regex.flags))
    except _NotTokens:
        return None
    except Exception:  # any surprise only disables an optimisation
        return None


def _token_bucket(regex: re.Pattern[bytes]) -> int | None:
    """The shortest token runs a pattern must be scanned in (None: the whole text)."""
    least = token_min_len(regex)
    if least is None or least < WIDE_MIN:
        return None
    return LONG_TOKEN if least >= LONG_TOKEN else WIDE_MIN


def any_of(patterns: Sequence[ProviderPattern]) -> re.Pattern[bytes] | None:
    """One regex matching wherever any of `patterns` matches (None when it cannot be built).
    Patterns with groups or global flags are left out: embedded, a backreference would point
    elsewhere and a flag would apply to all; `PatternSet` always runs those on their own."""
    parts = [b"(?:" + p.regex.pattern + b")" for p in patterns]
    if not parts:
        return None
    try:
        return re.compile(b"|".join(parts))
    except re.error:  # any surprise only disables an optimisation
        return None


class PatternSet:
    """All patterns, matched over a text one after the other."""

    def __init__(self, patterns: Sequence[ProviderPattern]):
        self.patterns = tuple(patterns)
        if len({p.id for p in self.patterns}) != len(self.patterns):
            raise PatternError("secret pattern ids must be unique")
        self.anchors = tuple(a for p in self.patterns for a in p.anchors)
        self._needs = tuple(required_punctuation(p.regex) for p in self.patterns)
        self._punctuation = bytes(sorted(set().union(*self._needs)))
        self._buckets = tuple(_token_bucket(p.regex) for p in self.patterns)
        self.shortest = min((_min_width(p.regex) for p in self.patterns), default=0)
        self._prefilter()

    def _prefilter(self) -> None:
        """Combined regexes for small texts (see `scan`): one over the text for the patterns
        that need it, one over the token runs for those that only match long token runs."""
        combinable = [p for p in self.patterns if p.regex.flags == 0 and p.regex.groups == 0]
        bucket = dict(zip((p.id for p in self.patterns), self._buckets, strict=True))
        in_text = [p for p in combinable if bucket[p.id] is None]
        in_tokens = [p for p in combinable if bucket[p.id] is not None]
        regexes = (any_of(combinable), any_of(in_text), any_of(in_tokens))
        # any_of gives None for no patterns, and for patterns that will not compile together:
        # then no prefilter at all, rather than patterns that nothing checks.
        if regexes[0] is None or (in_text and not regexes[1]) or (in_tokens and not regexes[2]):
            regexes, combinable = (None, None, None), []
        self._any, self._any_text, self._any_tokens = regexes
        combined = {p.id for p in combinable}
        self._each = tuple(zip(self.patterns, self._needs, self._buckets, strict=True))
        self._uncombined = tuple(e for e in self._each if e[0].id not in combined)

    def _none_combined(self, text: bytes, tokens: Callable[[int], bytes] | None) -> bool:
        """True when no combinable pattern can match `text` (False: it may, or no prefilter)."""
        if self._any is None:
            return False
        if tokens is None:
            return self._any.search(text) is None
        for regex, where in ((self._any_text, text), (self._any_tokens, tokens(WIDE_MIN))):
            if regex is not None and regex.search(where) is not None:
                return False
        return True

    def scan(
        self, text: bytes, tokens: Callable[[int], bytes] | None = None
    ) -> Iterator[tuple[ProviderPattern, bytes]]:
        """(pattern, match) for every match in `text`. `tokens(n)`, when given, is the text's
        token runs of at least n bytes (`ByteIndex.tokens` of the data `text` was cut from):
        patterns that only match token runs that long scan those instead, a fraction of it."""
        # One regex per pattern, each starting with a literal: the engine jumps between
        # occurrences of that literal at memory speed. A combined alternation (or a hint
        # pre-check) loses that path and measured 2x to 20x slower. In a large text, a
        # pattern that needs a punctuation byte the text lacks is skipped (a memchr each).
        # A small text (a small request, each decoded view) mostly holds no key at all, and
        # there a search of the combined regexes says so for far less than 26 separate scans
        # (measured: 20x less at 32 bytes, 2x at 1.5 KiB; the separate scans win above that).
        prefiltered = len(text) <= _SMALL and self._none_combined(text, tokens)
        absent: frozenset[int] = frozenset()
        if len(text) > _LARGE:
            absent = frozenset(c for c in self._punctuation if c not in text)
        # prefiltered: only the patterns the prefilter does not cover (most often none)
        for pattern, needs, bucket in self._uncombined if prefiltered else self._each:
            if absent and not needs.isdisjoint(absent):
                continue
            where = text if tokens is None or bucket is None else tokens(bucket)
            for m in pattern.regex.finditer(where):
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
    if not extra:
        return _shipped_patterns()
    entries = [*load_document()["patterns"], *extra]
    return PatternSet([compile_pattern(e) for e in entries])


@cache
def _shipped_patterns() -> PatternSet:
    # One set per process, read-only once made: a gateway's inspectors and its audit log's
    # mask share it, and a gateway forked by the zygote inherits the one it made.
    return PatternSet([compile_pattern(e) for e in load_document()["patterns"]])
