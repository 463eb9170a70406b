"""Where a flow is going: the name, never the address the cage dialled, and whether it may.

- `target_of(flow)`: the name and port from SNI, Host or the request line; SNI must equal Host
  (domain fronting is refused) and the Host port must match.
- `Gate`: the stateless verdict on dialling host:port (not an IP literal, an allowed port, a
  name the policy allows), asked by the CONNECT hook, the upstream gate and the connector.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from mitmproxy.proxy.mode_specs import TransparentMode

from agentcage.addresses import parse_ip
from agentcage.policy import Policy
from agentcage.reserved import is_policy_api


class Refusal(Exception):
    """A policy refusal raised inside a stage; turned into a 4xx with a JSON body."""

    def __init__(self, reason: str, by: str, status: int = 403):
        super().__init__(reason)
        self.reason, self.by, self.status = reason, by, status


def host_name(value: str | None) -> str | None:
    """A host as compared everywhere: lower case, no trailing dot; None when empty."""
    if not value:
        return None
    return value.strip().rstrip(".").lower() or None


def split_host_header(value: str | None) -> tuple[str | None, int | None]:
    """('name', port) from a Host header value; IPv6 literals keep their brackets off."""
    if not value:
        return None, None
    text = value.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    try:
        return host_name(host), int(port) if port else None
    except ValueError:
        return host_name(host), -1


def target_of(flow: Any) -> tuple[str, int]:
    """The name and port a request is for; raises Refusal when they cannot be trusted."""
    req = flow.request
    sni = host_name(flow.client_conn.sni)
    header_host, header_port = split_host_header(req.host_header)
    if isinstance(flow.client_conn.proxy_mode, TransparentMode):
        name = sni or header_host
    else:
        name = host_name(req.host)
    if not name:
        raise Refusal("no SNI and no Host header: cannot tell the destination", "identity")
    if sni and header_host and sni != header_host:
        raise Refusal(f"SNI {sni!r} does not match Host {header_host!r}", "identity")
    if sni and sni != name:
        raise Refusal(f"SNI {sni!r} does not match target {name!r}", "identity")
    if header_host and header_host != name:
        raise Refusal(f"Host header {header_host!r} does not match {name!r}", "identity")
    if header_port is not None and header_port != req.port:
        raise Refusal(f"Host header port {header_port} does not match {req.port}", "identity")
    return name, req.port


def described_host(flow: Any) -> tuple[str, int]:
    """Best effort name and port of any flow, for records of flows refused before their
    target was known (a CONNECT, a request without a usable Host)."""
    req = flow.request
    if req.method != "CONNECT":
        header_host, header_port = split_host_header(req.host_header)
        if header_host:
            return header_host, header_port or req.port
    return host_name(req.host) or "", req.port


class Gate:
    """The stateless verdict on dialling host:port (None = allowed)."""

    def __init__(self, policy: Callable[[], Policy], tcp_ports: Iterable[int],
                 clock: Callable[[], float] = time.time):
        self.policy = policy
        self.tcp_ports = frozenset(tcp_ports)
        self.clock = clock

    def port_refusal(self, port: int) -> str | None:
        return None if port in self.tcp_ports else f"port {port} not allowed"

    def refusal(self, host: str, port: int) -> str | None:
        if parse_ip(host) is not None:
            return "IP literal"
        if is_policy_api(host):  # answered by the gateway itself, for the cage alone
            return f"{host} is the cage's policy API: never dialled"
        if (why := self.port_refusal(port)) is not None:
            return why
        verdict = self.policy().decide(host, self.clock())
        return None if verdict.allowed else verdict.reason
