"""The console's guards, as pure functions the server applies to every request.

- Host: checked first. A web page cannot choose the Host header, but DNS rebinding lets a page
  at evil.example reach 127.0.0.1 under its own name; refusing every Host that is not an address
  of this console (or a name the user allowed) shuts that door.
- Token: 32 random bytes made at start. Every API call carries it (a header, or the run form's
  field). The page that holds it is served only to a browser holding the session cookie, and
  only under a valid Host, so no other origin can read it. No CORS header is ever sent.
- Headers: a strict CSP (nothing loads, no script runs, forms post only here), no framing,
  no referrer, no caching.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field

TOKEN_HEADER = "X-Agentsec-Token"
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = (
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(bind: str) -> bool:
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return bind == "localhost"


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Guard:
    bind: str
    port: int
    allow_remote_runs: bool = False
    extra_hosts: tuple[str, ...] = ()
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    session: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    @property
    def remote(self) -> bool:
        return not is_loopback(self.bind)

    @property
    def runs_allowed(self) -> bool:
        """Runs start containers: off loopback only when the user asked for it at start."""
        return not self.remote or self.allow_remote_runs

    @property
    def cookie_name(self) -> str:
        # Cookies are not kept apart by port: two consoles on one host need two names.
        return f"agentsec_ui_{self.port}"

    def host_allowed(self, host: str | None) -> bool:
        """Whether a Host header names this console. DNS rebinding needs a *name*, so besides
        loopback only the bind address, IP literals when bound to every address, and names the
        user listed with --allow-host pass."""
        if not host:
            return False
        name, sep, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
        if not sep:
            name, port = host, "80"
        if port != str(self.port) or not name:
            return False
        name = name.lower()
        allowed = {*LOOPBACK_NAMES, *(h.lower() for h in self.extra_hosts)}
        if self.remote:
            allowed.add(self.bind if ":" not in self.bind else f"[{self.bind}]")
            if self.bind in ("0.0.0.0", "::") and _is_ip_literal(name):
                return True
        return name in allowed

    def token_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented, self.token)

    def session_ok(self, cookie_header: str | None) -> bool:
        for part in (cookie_header or "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == self.cookie_name and hmac.compare_digest(value, self.session):
                return True
        return False

    def session_cookie(self) -> str:
        return f"{self.cookie_name}={self.session}; HttpOnly; SameSite=Strict; Path=/"
