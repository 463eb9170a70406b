"""The names of the fake internet and its address plan.

Every address fakenet assigns lies in 10.200.0.0/16 (IPv6: fd0a:200::/32):

- 10.200.1.0 .. 10.200.127.0   one /30 link per attached namespace (k = 1..127); the internet
                               side is .1, the far side .2; IPv6 fd0a:200:<k>::1 and ::2 (/64).
- 10.200.128.0/17              never used by fakenet: free for cages and other test helpers.
- 10.200.254.0/23              service addresses, held on the internet namespace's loopback; each
                               name has its own, so a test can tell destinations apart by address.

A service's IPv6 address repeats its IPv4 address's last two octets in decimal-looking groups
(10.200.254.10 -> fd0a:200:ffff::254:10) so the two read as one.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

NETWORK = ipaddress.IPv4Network("10.200.0.0/16")
NETWORK6 = ipaddress.IPv6Network("fd0a:200::/32")
SERVICE_NETWORK = ipaddress.IPv4Network("10.200.254.0/23")
FIRST_LINK, LAST_LINK = 1, 127

DNS_ADDRESS = "10.200.255.53"
METADATA_ADDRESS = "10.200.255.169"
CATCH_ALL_ADDRESS = "10.200.255.254"
# Names added without an address get one from here, in the order given.
_AUTO_FIRST, _AUTO_LAST = "10.200.254.100", "10.200.254.250"

# The probe's fixed hosts (so its default target names resolve here) and the test names.
ZONE: Mapping[str, str] = MappingProxyType({
    "dns.google": "10.200.254.8",
    "pypi.org": "10.200.254.10",
    "github.com": "10.200.254.11",
    "example.com": "10.200.254.12",
    "metadata.google.internal": METADATA_ADDRESS,
    "api.example.test": "10.200.254.20",
    "allowed.example.test": "10.200.254.21",
    "blocked.example.test": "10.200.254.22",
    "evil.example.test": "10.200.254.23",
    "files.example.test": "10.200.254.24",
})

_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")

# Names the test CA's server certificate covers besides the zone's own.
CERT_WILDCARDS = ("*.example.test",)


def service_address6(address: str) -> str:
    """The IPv6 twin of a service address (see the module docstring)."""
    octets = ipaddress.IPv4Address(address).packed
    return str(ipaddress.IPv6Address(f"fd0a:200:ffff::{octets[2]}:{octets[3]}"))


def inside_plan(network: str) -> bool:
    """Is `network` (a CIDR) inside fakenet's address space?"""
    parsed = ipaddress.ip_network(network)
    if isinstance(parsed, ipaddress.IPv4Network):
        return parsed.subnet_of(NETWORK)
    return parsed.subnet_of(NETWORK6)


def link_addresses(k: int) -> tuple[str, str, str, str]:
    """(internet side, far side, internet side v6, far side v6) of link k, without prefix length."""
    if not FIRST_LINK <= k <= LAST_LINK:
        raise ValueError(f"link number {k} outside {FIRST_LINK}..{LAST_LINK}")
    return f"10.200.{k}.1", f"10.200.{k}.2", f"fd0a:200:{k}::1", f"fd0a:200:{k}::2"


@dataclass(frozen=True)
class Service:
    """One address of the fake internet and the names that resolve to it."""

    address: str
    address6: str | None


@dataclass(frozen=True)
class Zone:
    """What the fake internet's DNS answers, and which addresses its loopback holds."""

    names: Mapping[str, Service]
    catch_all: Service | None  # answer for names not in `names`; None means NXDOMAIN

    def lookup(self, name: str) -> Service | None:
        return self.names.get(normalize_name(name), self.catch_all)

    def services(self) -> list[Service]:
        """Every distinct service address (the DNS address excluded), in a stable order."""
        seen: dict[str, Service] = {}
        for service in self.names.values():
            seen.setdefault(service.address, service)
        if self.catch_all is not None:
            seen.setdefault(self.catch_all.address, self.catch_all)
        return list(seen.values())


def normalize_name(name: str) -> str:
    return name.strip().rstrip(".").lower()


def build_zone(
    extra_names: Mapping[str, str | None] | None = None,
    *,
    catch_all: bool = True,
    ipv6: bool = True,
) -> Zone:
    """ZONE plus `extra_names` (name -> service address, or None to have one assigned).

    Raises ValueError for an address outside SERVICE_NETWORK (fakenet would not hold it) or one
    of the reserved DNS and catch-all addresses.
    """
    wanted: dict[str, str | None] = {normalize_name(n): a for n, a in ZONE.items()}
    for name, address in (extra_names or {}).items():
        name = normalize_name(name)
        if not _NAME.fullmatch(name):
            # Wildcards too: the DNS server matches names exactly (the catch-all does the rest).
            raise ValueError(f"not a DNS name: {name!r}")
        wanted[name] = address

    taken = {a for a in wanted.values() if a is not None}
    free = (
        str(ipaddress.IPv4Address(i))
        for i in range(int(ipaddress.IPv4Address(_AUTO_FIRST)),
                       int(ipaddress.IPv4Address(_AUTO_LAST)) + 1)
        if str(ipaddress.IPv4Address(i)) not in taken
    )
    names: dict[str, Service] = {}
    for name, address in wanted.items():
        if address is None:
            address = next(free, None)
            if address is None:
                raise ValueError("no free service address left for extra names")
        names[name] = _service(address, ipv6)
    for name, service in names.items():
        if service.address in (DNS_ADDRESS, CATCH_ALL_ADDRESS):
            raise ValueError(f"{name}: {service.address} is reserved")
    return Zone(
        names=MappingProxyType(names),
        catch_all=_service(CATCH_ALL_ADDRESS, ipv6) if catch_all else None,
    )


def _service(address: str, ipv6: bool) -> Service:
    parsed = ipaddress.IPv4Address(address)
    if parsed not in SERVICE_NETWORK:
        raise ValueError(f"service address {address} is outside {SERVICE_NETWORK}")
    return Service(str(parsed), service_address6(str(parsed)) if ipv6 else None)
