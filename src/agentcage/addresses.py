"""Which IP addresses count as public: the anti-rebinding rule shared by config and gateway."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Address blocks that are never a public upstream, whatever `is_global` says.
_NEVER_PUBLIC = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/128",
        "::1/128",
        "::ffff:0:0/96",
        "64:ff9b::/96",
        "fc00::/7",
        "fe80::/10",
        "ff00::/8",
    )
)


NEVER_PUBLIC_V4: tuple[str, ...] = tuple(str(n) for n in _NEVER_PUBLIC if n.version == 4)


def parse_ip(text: str) -> IPAddress | None:
    """The address `text` spells (IPv6 brackets and zone ids tolerated), or None for a name."""
    candidate = text.strip().strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(candidate)
    except ValueError:
        return None


def is_public(addr: IPAddress) -> bool:
    """True for an address that may be dialled as an internet upstream."""
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return is_public(addr.ipv4_mapped)
    if any(addr in net for net in _NEVER_PUBLIC if net.version == addr.version):
        return False
    return addr.is_global


@dataclass(frozen=True)
class UpstreamAddressRule:
    """Public addresses are allowed; `trusted` networks count as public (test world only)."""

    trusted: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_strings(cls, networks: Iterable[str]) -> UpstreamAddressRule:
        return cls(tuple(ipaddress.ip_network(n, strict=False) for n in networks))

    def allows(self, addr: IPAddress | str) -> bool:
        ip = parse_ip(addr) if isinstance(addr, str) else addr
        if ip is None:
            return False
        if any(ip in net for net in self.trusted if net.version == ip.version):
            return True
        return is_public(ip)
