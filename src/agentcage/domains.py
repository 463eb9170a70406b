"""Domain patterns: the ONE syntax and matcher used by config validation, resolver and proxy.

A pattern is either an exact name (`api.example.com`, matches only that name) or a wildcard
`*.example.com` (matches every name below `example.com`, not `example.com` itself). Refused:
`*` alone, wildcards over a public suffix (`*.com`, `*.co.uk`), schemes, paths, ports, IP
literals, and names that encode a private address (`169-254-169-254.nip.io`, `10.0.0.1.sslip.io`).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from agentcage.addresses import is_public, parse_ip
from agentcage.reserved import POLICY_API

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_DASHED_V4 = re.compile(r"(?:^|[^0-9])(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})(?:$|[^0-9])")
_HEX_V4 = re.compile(r"(?:^|-)([0-9a-f]{8})$")
# Services whose whole purpose is to resolve a name to the address it spells.
_IP_ECHO_SERVICES = ("nip.io", "sslip.io", "xip.io", "traefik.me", "localtest.me", "lvh.me")
_DURATION = re.compile(r"^(\d+)\s*([smhdw])$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class DomainPatternError(ValueError):
    """A pattern was refused; the message says why and how to fix it."""


@functools.cache
def _public_suffixes():
    try:
        import publicsuffix2
    except ImportError:  # the built-in single-label rule still applies
        return None
    return publicsuffix2.PublicSuffixList()


def is_public_suffix(name: str) -> bool:
    """True when anyone can register names under `name` (`com`, `co.uk`, `github.io`)."""
    if "." not in name:
        return True
    psl = _public_suffixes()
    return psl is not None and psl.get_tld(name, strict=True) == name


def normalize_host(host: str) -> str | None:
    """Lower-case IDNA form of a host name without trailing dot; None if it is not a valid name."""
    text = host.strip().rstrip(".").lower()
    if not text or len(text) > 253:
        return None
    try:
        text = text.encode("idna").decode("ascii")
    except UnicodeError:
        return None
    if not all(_LABEL.match(label) for label in text.split(".")):
        return None
    return text


def encoded_private_ip(name: str) -> ipaddress.IPv4Address | None:
    """The non-public IPv4 address a name spells in dotted, dashed or hex form, if any."""
    labels = name.split(".")
    candidates: list[str] = []
    for i in range(len(labels) - 3):
        window = labels[i : i + 4]
        if all(part.isdigit() for part in window):
            candidates.append(".".join(window))
    for label in labels:
        candidates.extend(".".join(m.groups()) for m in _DASHED_V4.finditer(label))
    if name.endswith(_IP_ECHO_SERVICES):
        for label in labels:
            if m := _HEX_V4.search(label):
                candidates.append(str(ipaddress.IPv4Address(int(m.group(1), 16))))
    for text in candidates:
        try:
            addr = ipaddress.IPv4Address(text)
        except ValueError:
            continue
        if not is_public(addr):
            return addr
    return None


def host_refusal(host: str) -> str | None:
    """Why a requested host can never be allowed by a name pattern (None if it can be)."""
    if parse_ip(host) is not None:
        return "IP literal"
    name = normalize_host(host)
    if name is None:
        return "invalid host name"
    if (addr := encoded_private_ip(name)) is not None:
        return f"name encodes private address {addr}"
    return None


@dataclass(frozen=True)
class DomainPattern:
    """A validated pattern: `name` is the exact name, or the suffix when `wildcard` is true."""

    name: str
    wildcard: bool = False

    def __str__(self) -> str:
        return f"*.{self.name}" if self.wildcard else self.name

    def matches(self, host: str) -> bool:
        if self.wildcard:
            return host.endswith("." + self.name)
        return host == self.name


def parse_pattern(text: str) -> DomainPattern:
    """Validate one pattern; raise DomainPatternError naming the problem and the fix."""
    raw = str(text).strip()
    if not raw:
        raise DomainPatternError("empty pattern; write a name like api.example.com")
    if "://" in raw:
        raise DomainPatternError("a scheme is not part of a domain; write only the host name")
    if "/" in raw:
        raise DomainPatternError("a path is not part of a domain; write only the host name")
    if parse_ip(raw) is not None:
        raise DomainPatternError("IP literals are refused; allow the host name instead")
    if ":" in raw:
        raise DomainPatternError("a port is not part of a domain; ports go under ports.tcp.allow")
    if raw == "*":
        raise DomainPatternError("'*' would allow everything; list the names you need")
    wildcard = raw.startswith("*.")
    body = raw[2:] if wildcard else raw
    if "*" in body:
        raise DomainPatternError("'*' is only allowed as the whole first label: *.example.com")
    name = normalize_host(body)
    if name is None:
        raise DomainPatternError("not a valid host name; use letters, digits, '-' and '.'")
    if (addr := encoded_private_ip(name)) is not None:
        raise DomainPatternError(f"the name encodes the private address {addr}; refused")
    if name == POLICY_API or (wildcard and POLICY_API.endswith("." + name)):
        raise DomainPatternError(f"{POLICY_API} is the cage's policy API, answered by its "
                                 "gateway: never a destination")
    if wildcard and is_public_suffix(name):
        raise DomainPatternError(
            f"*.{name} covers a whole public suffix; "
            f"name the registrable domain, e.g. *.example.{name}"
        )
    return DomainPattern(name=name, wildcard=wildcard)


@dataclass(frozen=True)
class DomainRule:
    """A pattern with an optional expiry (unix time) and where it came from."""

    pattern: DomainPattern
    expires_at: float | None = None
    source: str = "config"

    def active(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at


class DomainMatcher:
    """Immutable lookup over rules: `match(host)` gives the first active rule that covers it."""

    def __init__(self, rules: Iterable[DomainRule]):
        self._exact: dict[str, list[DomainRule]] = {}
        self._suffix: dict[str, list[DomainRule]] = {}
        for rule in rules:
            table = self._suffix if rule.pattern.wildcard else self._exact
            table.setdefault(rule.pattern.name, []).append(rule)
        self.rules: tuple[DomainRule, ...] = tuple(
            r for table in (self._exact, self._suffix) for rs in table.values() for r in rs
        )

    def match(self, host: str, now: float | None = None) -> DomainRule | None:
        if host_refusal(host) is not None:
            return None
        name = normalize_host(host)
        assert name is not None
        moment = time.time() if now is None else now
        for rule in self._exact.get(name, ()):
            if rule.active(moment):
                return rule
        labels = name.split(".")
        for i in range(1, len(labels)):
            for rule in self._suffix.get(".".join(labels[i:]), ()):
                if rule.active(moment):
                    return rule
        return None


MAX_DURATION = 366 * 24 * 3600  # a runtime grant is temporary


def parse_duration(text: str) -> int:
    """Seconds in a duration like `90s`, `30m`, `2h`, `1d`, `1w`."""
    m = _DURATION.match(str(text).strip().lower())
    if not m or len(m.group(1)) > 9 or int(m.group(1)) <= 0:
        raise ValueError(f"invalid duration {text!r}; write a number and a unit, e.g. 30m or 2h")
    seconds = int(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if seconds > MAX_DURATION:
        raise ValueError(f"{text!r} is longer than a year; a grant that long belongs in "
                         "cage.yaml's domains")
    return seconds
