"""What may be granted at run time, and how far a grant reaches.

The ceiling is the operator's: cage.yaml's `policy_api.grantable` (domain patterns, as in
domains.allow), `max_ttl_seconds` and `max_grants`. No decider grants outside it. Under it, and
whatever it says, some names are never granted (reserved.py: the policy API itself, special-use
and internal names, metadata services, paste sites and file drops), nor IP literals or names
that spell a private address (domains.host_refusal).

A grant's scope narrows it: methods, path patterns (`*` matches any run of characters, the
query string is not part of a path) and ports (within the cage's own `ports.tcp.allow`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentcage.domains import DomainPattern, DomainPatternError, host_refusal, parse_pattern
from agentcage.gateway.control.settings import PolicyApiSettings
from agentcage.reserved import never_granted

MAX_SCOPE_ITEMS = 16
MAX_PATH_CHARS = 256
_METHOD = re.compile(r"[A-Z]{1,16}")


class RequestError(ValueError):
    """A request the API refuses as malformed (400), with the reason the agent reads."""


@dataclass(frozen=True)
class Scope:
    methods: tuple[str, ...] = ()  # empty: every method
    paths: tuple[str, ...] = ()  # empty: every path
    ports: tuple[int, ...] = ()  # empty: every port the cage may use

    def allows(self, method: str, path: str, port: int) -> bool:
        if self.methods and method.upper() not in self.methods:
            return False
        if self.ports and port not in self.ports:
            return False
        bare = path.split("?", 1)[0] or "/"
        return not self.paths or any(fnmatch.fnmatchcase(bare, p) for p in self.paths)

    def as_dict(self) -> dict[str, Any]:
        return {"methods": list(self.methods), "paths": list(self.paths),
                "ports": list(self.ports)}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Scope:
        return cls(tuple(str(m) for m in doc.get("methods", ())),
                   tuple(str(p) for p in doc.get("paths", ())),
                   tuple(int(p) for p in doc.get("ports", ())))

    @classmethod
    def requested(cls, methods: Any, paths: Any, ports: Any,
                  cage_ports: Sequence[int]) -> Scope:
        """The scope a request asks for, checked (RequestError says what is wrong)."""
        def items(value: Any, what: str) -> list[Any]:
            if value is None:
                return []
            if not isinstance(value, list) or len(value) > MAX_SCOPE_ITEMS:
                raise RequestError(f"{what}: a list of at most {MAX_SCOPE_ITEMS}")
            return value

        checked_methods = []
        for m in items(methods, "methods"):
            if not isinstance(m, str) or not _METHOD.fullmatch(m.upper()):
                raise RequestError(f"methods: {str(m)[:20]!r} is not an HTTP method")
            checked_methods.append(m.upper())
        checked_paths = []
        for p in items(paths, "paths"):
            if (not isinstance(p, str) or not p.startswith("/") or len(p) > MAX_PATH_CHARS
                    or not p.isprintable() or "?" in p):
                raise RequestError("paths: each a path starting with / (no query string), "
                                   f"at most {MAX_PATH_CHARS} characters; * matches any run")
            checked_paths.append(p)
        checked_ports = []
        for port in items(ports, "ports"):
            if isinstance(port, bool) or not isinstance(port, int) or port not in cage_ports:
                raise RequestError(f"ports: each one of the cage's ports "
                                   f"{', '.join(map(str, cage_ports))}")
            checked_ports.append(port)
        return cls(tuple(dict.fromkeys(checked_methods)), tuple(dict.fromkeys(checked_paths)),
                   tuple(dict.fromkeys(checked_ports)))

    def describe(self) -> str:
        parts = [", ".join(self.methods) or "any method",
                 " ".join(self.paths) or "any path"]
        if self.ports:
            parts.append("port " + ", ".join(map(str, self.ports)))
        return "; ".join(parts)


def requested_pattern(text: Any) -> DomainPattern:
    """The domain a request names (a name, or `*.name`), checked as cage.yaml's are."""
    if not isinstance(text, str) or not text or len(text) > 253:
        raise RequestError("domain: a host name such as pypi.org")
    try:
        return parse_pattern(text)
    except DomainPatternError as e:
        raise RequestError(f"domain {text[:80]!r}: {e}") from None


class Ceiling:
    """The bounds every decider grants within."""

    def __init__(self, settings: PolicyApiSettings):
        self.settings = settings
        self.grantable = tuple(parse_pattern(p) for p in settings.grantable)

    def refusal(self, pattern: DomainPattern) -> str | None:
        """Why `pattern` may not be granted (None: it may be, as far as the ceiling goes)."""
        never = never_granted(pattern.name, wildcard=pattern.wildcard)
        if never is not None:
            return f"never granted: {never}"
        if not pattern.wildcard and (why := host_refusal(pattern.name)) is not None:
            return f"never granted: {why}"
        if not any(_covers(c, pattern) for c in self.grantable):
            return ("not grantable here: the operator has not listed it in policy_api.grantable"
                    " (they can allow it: agentcage domain add CAGE NAME)")
        return None

    def ttl(self, requested: Any) -> int:
        """The life of a grant: what was asked for, capped by max_ttl_seconds."""
        cap = self.settings.max_ttl_seconds
        if requested is None:
            return cap
        if isinstance(requested, bool) or not isinstance(requested, int) or requested <= 0:
            raise RequestError("ttl_seconds: a whole number of seconds above 0")
        return min(requested, cap)


def _covers(ceiling: DomainPattern, wanted: DomainPattern) -> bool:
    """Whether every name `wanted` matches is matched by `ceiling`."""
    if not ceiling.wildcard:
        return not wanted.wildcard and wanted.name == ceiling.name
    if wanted.wildcard:
        return wanted.name == ceiling.name or wanted.name.endswith("." + ceiling.name)
    return wanted.name.endswith("." + ceiling.name)
