"""Injection rules: which secret may be swapped in, toward which hosts, in which parts.

Built from cage.yaml `secret_injection` entries. Host matching uses the project's one domain
matcher (agentcage.domains): a name in `inject_to` covers that name and its subdomains, a
`*.name` pattern the subdomains only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentcage.domains import (
    DomainMatcher,
    DomainPattern,
    DomainRule,
    is_public_suffix,
    parse_pattern,
)
from agentcage.secrets.placeholders import check_env_name

# Header names that carry credentials by convention; plus any name containing these words.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key"})
CREDENTIAL_WORDS = ("auth", "key", "token")


@dataclass(frozen=True)
class InjectionRule:
    env: str
    inject_to: tuple[DomainPattern, ...]
    inject_headers: bool = True
    inject_body: bool = False
    extra_headers: tuple[str, ...] = ()
    matcher: DomainMatcher = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_env_name(self.env)
        covered: list[DomainRule] = []
        for p in self.inject_to:
            covered.append(DomainRule(p, source=f"inject_to:{self.env}"))
            # A listed name also covers its subdomains, unless anyone can register those.
            if not p.wildcard and not is_public_suffix(p.name):
                covered.append(DomainRule(DomainPattern(p.name, wildcard=True)))
        object.__setattr__(self, "matcher", DomainMatcher(covered))
        object.__setattr__(self, "extra_headers", tuple(h.lower() for h in self.extra_headers))

    def allows_host(self, host: str) -> bool:
        return self.matcher.match(host) is not None

    def is_credential_header(self, name: str) -> bool:
        lower = name.lower()
        return (
            lower in CREDENTIAL_HEADERS
            or lower in self.extra_headers
            or any(word in lower for word in CREDENTIAL_WORDS)
        )


def rule_from_config(entry: Mapping[str, Any] | Any) -> InjectionRule:
    """One rule from a cage.yaml `secret_injection` entry (a dict or the pydantic model)."""
    get = entry.get if isinstance(entry, Mapping) else lambda k, d=None: getattr(entry, k, d)
    return InjectionRule(
        env=str(get("env")),
        inject_to=tuple(parse_pattern(p) for p in get("inject_to", ()) or ()),
        inject_headers=bool(get("inject_headers", True)),
        inject_body=bool(get("inject_body", False)),
        extra_headers=tuple(get("headers", ()) or get("extra_headers", ()) or ()),
    )


def rules_from_config(entries: Iterable[Mapping[str, Any] | Any]) -> tuple[InjectionRule, ...]:
    rules = tuple(rule_from_config(e) for e in entries)
    seen: set[str] = set()
    for r in rules:
        if r.env in seen:
            raise ValueError(f"secret_injection lists {r.env} twice; merge the rules")
        seen.add(r.env)
    return rules
