"""FakeInternet: the internet namespace, its servers, and the namespaces linked to it."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from fakenet import firewall
from fakenet.blackhole import BlackholeMode, build_blackhole
from fakenet.ca import write_test_pki
from fakenet.errors import FakeNetError
from fakenet.process import ServerProcess
from fakenet.records import RecordReader, SinkRecord
from fakenet.serverconfig import Kind, Listener, Proto
from fakenet.targets import write_probe_targets
from fakenet.topology import Topology, exec_prefix
from fakenet.zone import (
    CERT_WILDCARDS,
    DNS_ADDRESS,
    FIRST_LINK,
    LAST_LINK,
    METADATA_ADDRESS,
    NETWORK,
    NETWORK6,
    Zone,
    build_zone,
    inside_plan,
    link_addresses,
    service_address6,
)

DEFAULT_TCP_SINK_PORTS: tuple[int, ...] = (22, 25, 53, 2375, 3306, 8080, 8443, 9999)
DEFAULT_UDP_SINK_PORTS: tuple[int, ...] = (123, 443, 5353, 9999)
ECHO_PORT = 7
HTTP_PORT, HTTPS_PORT, DNS_PORT = 80, 443, 53
IMAPS_PORT, SMTPS_PORT, SUBMISSION_PORT = 993, 465, 587
INTERNET_LINK_GLOB = "il*"  # the internet's side of every link is il<k>

ClientKind = Literal["open", "blackhole-drop", "blackhole-reject", "isolated"]
_BLACKHOLE_KIND: dict[BlackholeMode, ClientKind] = {"drop": "blackhole-drop",
                                                    "reject": "blackhole-reject"}


@dataclass(frozen=True)
class Link:
    """A veth between the internet and another namespace (the far side is `netns`)."""

    netns: str
    interface: str  # in netns
    local_address: str  # in netns
    peer_address: str  # the internet's side: netns's default route goes via it
    local_address6: str | None
    peer_address6: str | None
    internet_interface: str


@dataclass(frozen=True)
class Client:
    """A namespace to run things in. `kind` says what it can reach:

    open: linked straight to the internet; blackhole-drop / blackhole-reject: its only route
    leads to `gateway_netns`, which drops / refuses everything; isolated: loopback only.
    """

    netns: str
    kind: ClientKind
    address: str | None
    address6: str | None
    gateway: str | None  # next hop of the default route
    gateway_netns: str | None  # for blackhole clients: the namespace that swallows the traffic
    probe_targets_file: Path

    @property
    def exec_prefix(self) -> list[str]:
        return exec_prefix(self.netns)

    def run(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """subprocess.run inside the namespace (with its /etc/netns resolv.conf)."""
        return subprocess.run([*self.exec_prefix, *cmd], **kwargs)


class FakeInternet:
    """A fake internet in its own network namespace. Use as a context manager (needs root).

    `extra_names` adds DNS names (name -> address in 10.200.254.0/23, or None for any free one).
    `catch_all`: names outside the zone resolve to one catch-all address (True, like the real
    internet) or get NXDOMAIN (False).
    """

    def __init__(
        self,
        extra_names: Mapping[str, str | None] | None = None,
        *,
        catch_all: bool = True,
        ipv6: bool = True,
        tcp_sink_ports: Iterable[int] = DEFAULT_TCP_SINK_PORTS,
        udp_sink_ports: Iterable[int] = DEFAULT_UDP_SINK_PORTS,
        start_timeout: float = 10.0,
        keep_workdir: bool = False,
    ) -> None:
        self.zone: Zone = build_zone(extra_names, catch_all=catch_all, ipv6=ipv6)
        self.ipv6 = ipv6
        self._suffix = secrets.token_hex(3)
        self.name_prefix = f"fn-{self._suffix}-"  # every namespace of this instance starts so
        self.netns = self.name_prefix + "inet"
        self.dns_address = DNS_ADDRESS
        self.metadata_address = METADATA_ADDRESS
        self._tcp_sink_ports = tuple(tcp_sink_ports)
        self._udp_sink_ports = tuple(udp_sink_ports)
        self._start_timeout = start_timeout
        self._keep_workdir = keep_workdir
        self._topology = Topology(self.name_prefix)
        self._servers: list[ServerProcess] = []
        self._next_link = FIRST_LINK
        self._workdir: Path | None = None
        self._records: RecordReader | None = None
        self._ca_cert: Path | None = None
        self._targets: Path | None = None
        self._state: Literal["new", "running", "closed"] = "new"

    # --- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        if self._state != "new":
            raise FakeNetError(f"FakeInternet already {self._state}")
        self._state = "running"
        try:
            self._workdir = Path(tempfile.mkdtemp(prefix=f"fakenet-{self._suffix}-"))
            pki_dir = self._workdir / "pki"
            pki_dir.mkdir()
            services = self.zone.services()
            cert_ips = [s.address for s in services] + [s.address6 for s in services if s.address6]
            pki = write_test_pki(pki_dir, self._suffix,
                                 [*self.zone.names, *CERT_WILDCARDS], cert_ips)
            self._ca_cert = pki.ca_cert
            self._build_internet()
            server = ServerProcess(
                self.netns, self._workdir / "internet", self._listeners(),
                zone={name: _records_of(s.address, s.address6)
                      for name, s in self.zone.names.items()},
                catch_all=(_records_of(self.zone.catch_all.address, self.zone.catch_all.address6)
                           if self.zone.catch_all else None),
                cert_file=str(pki.cert), key_file=str(pki.key),
                model_script=str(self._workdir / "model-script.json"),
                sites_dir=str(self._workdir / "sites"),
                mail_accounts=str(self._workdir / "mail-accounts.json"),
            )
            self._servers.append(server)
            server.start(self._start_timeout)
            self._records = RecordReader(server.records_dir)
            self._targets = write_probe_targets(self._workdir / "probe-targets.json", self.zone)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop every server, delete every namespace, link and file we made. Safe to repeat."""
        if self._state == "closed":
            return
        self._state = "closed"
        errors = []
        for server in reversed(self._servers):
            try:
                server.stop()
            except Exception as exc:
                errors.append(f"stop servers in {server.netns}: {exc}")
        errors += self._topology.close()
        if self._workdir is not None and not self._keep_workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
        if errors:
            raise FakeNetError("fakenet teardown incomplete: " + "; ".join(errors))

    # --- what the internet is -----------------------------------------------------------------

    @property
    def ca_cert_path(self) -> Path:
        return self._running(self._ca_cert)

    @property
    def probe_targets_file(self) -> Path:
        return self._running(self._targets)

    @property
    def workdir(self) -> Path:
        return self._running(self._workdir)

    @property
    def pids(self) -> list[int]:
        """Process ids of the server processes started so far (for leak checks)."""
        return [pid for s in self._servers if (pid := s.pid) is not None]

    def address_of(self, name: str) -> str:
        """The IPv4 address DNS gives for `name` (the catch-all one for names outside the zone)."""
        service = self.zone.lookup(name)
        if service is None:
            raise KeyError(f"{name} does not resolve (no catch-all)")
        return service.address

    def address6_of(self, name: str) -> str | None:
        service = self.zone.lookup(name)
        if service is None:
            raise KeyError(f"{name} does not resolve (no catch-all)")
        return service.address6

    # --- linking namespaces -------------------------------------------------------------------

    def add_client(self) -> Client:
        """A fresh namespace linked straight to the internet: an open sandbox."""
        self._require_running()
        k = self._take_link()
        netns = self._topology.add_namespace(f"c{k}")
        link = self._link(netns, k, foreign=False, default_route=True, return_routes=(),
                          ipv6=self.ipv6)
        self._topology.write_resolv_conf(netns, DNS_ADDRESS)
        return Client(netns, "open", link.local_address, link.local_address6, link.peer_address,
                      None, self.probe_targets_file)

    def attach(self, netns: str, *, ipv6: bool | None = None, default_route: bool = True,
               return_routes: Iterable[str] = ()) -> Link:
        """Link an existing namespace (a cage's gateway, say) to the internet.

        Its default route goes via the internet unless `default_route` is False.
        `return_routes`: networks behind `netns` (inside 10.200.0.0/16 or fd0a:200::/32) that
        the internet should route back through it. The link is removed on close.
        """
        self._require_running()
        ipv6 = self.ipv6 if ipv6 is None else ipv6
        for network in return_routes:
            if not inside_plan(network):
                raise ValueError(f"return route {network} is outside {NETWORK} / {NETWORK6}")
            if ":" in network and not ipv6:
                raise ValueError(f"return route {network} needs an IPv6 link")
        k = self._take_link()
        return self._link(netns, k, foreign=True, default_route=default_route,
                          return_routes=tuple(return_routes), ipv6=ipv6)

    def add_blackhole_client(self, mode: BlackholeMode = "drop") -> Client:
        """A namespace whose only route leads to a gateway that is linked to nothing.

        drop: the gateway silently discards every packet, DNS to it included (timeouts).
        reject: its DNS answers NXDOMAIN to every name; TCP gets a reset, anything else an ICMP
        unreachable (fast failures).
        """
        self._require_running()
        k = self._take_link()
        bh = build_blackhole(self._topology, k, self._far_ifname(k), mode, ipv6=self.ipv6,
                             workdir=self.workdir / f"bhgw{k}",
                             start_timeout=self._start_timeout, servers=self._servers)
        return Client(bh.client_netns, _BLACKHOLE_KIND[bh.mode], bh.client_address,
                      bh.client_address6, bh.gateway_address, bh.gateway_netns,
                      self.probe_targets_file)

    def add_isolated_client(self) -> Client:
        """A namespace with only loopback: no route anywhere."""
        self._require_running()
        k = self._take_link()  # only for a unique name
        netns = self._topology.add_namespace(f"iso{k}")
        # Point the resolver at an address it cannot reach, not at whatever the host uses.
        self._topology.write_resolv_conf(netns, DNS_ADDRESS)
        return Client(netns, "isolated", None, None, None, None, self.probe_targets_file)

    def script_decider(self, steps: Sequence[Mapping[str, Any]]) -> None:
        """How the fake model answers the policy API's `llm` decider (fakenet.models): e.g.
        [{"decide": {"decision": "grant", "reason": "docs"}}], [{"status": 500}],
        [{"hang": 30}], [{"say": "no tool call"}]."""
        path = self.workdir / "decider-script.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([dict(s) for s in steps]))
        tmp.replace(path)

    def script_model(self, steps: Sequence[Mapping[str, str]]) -> None:
        """The session the fake model provider plays (fakenet.models): steps such as
        {"shell": "echo hi > f"} (the agent's shell tool runs it) and {"say": "done"}."""
        path = self.workdir / "model-script.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([dict(s) for s in steps]))
        tmp.replace(path)

    def set_mail_account(self, user: str, password: str) -> None:
        """An account of the mail servers (fakenet.mailstore), in force at the next login:
        IMAPS on 993, SMTPS on 465 and submission on 587 at every address."""
        path = self.workdir / "mail-accounts.json"
        accounts = json.loads(path.read_text()) if path.exists() else {}
        accounts[user] = password
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(accounts))
        tmp.replace(path)

    def site_dir(self, host: str) -> Path:
        """The directory `host` is served from (fakenet.sites), made empty if it was not there:
        whatever is written into it is served at once, e.g. a registry from fakenet.packages.
        The host must be one of the zone's names, so that it resolves and the test CA's
        certificate covers it."""
        if host not in self.zone.names:
            raise FakeNetError(f"{host} is not a name of this fake internet: add it to "
                               "extra_names")
        site = self.workdir / "sites" / host
        site.mkdir(parents=True, exist_ok=True)
        return site

    # --- what the servers saw -----------------------------------------------------------------

    def sink_records(self, port: int | None = None) -> list[SinkRecord]:
        """(proto, port, peer, data) per connection or datagram any server received, in order."""
        return self._reader().sink_records(port)

    def dns_queries(self) -> list[tuple[str, str]]:
        """(qname, qtype) of every question the DNS server got, e.g. ("pypi.org", "A")."""
        return self._reader().dns_queries()

    def http_requests(self) -> list[dict[str, Any]]:
        """{method, host, path, headers, body, tls, sni, peer, port} per HTTP(S) request."""
        return self._reader().http_requests()

    def mail_records(self) -> list[dict[str, Any]]:
        """{proto, port, peer, sni, event, ...} per login ({mechanism, user, password, ok}) and
        message ({user, data, and for SMTP mail_from, rcpt_to}) the mail servers saw."""
        return self._reader().mail_records()

    def received(self, needle: bytes | str) -> bool:
        """Did `needle` reach the internet at all: in any bytes, DNS name or HTTP request?"""
        raw = needle.encode() if isinstance(needle, str) else needle
        text = raw.decode("latin-1").lower()
        return (any(raw in r.data for r in self.sink_records())
                or any(text in qname for qname, _ in self.dns_queries()))

    def packet_counts(self) -> dict[str, int]:
        """Packets that arrived from links, by protocol: tcp, udp, icmp, icmpv6, nd, other.

        "nd" is IPv6 neighbour discovery and multicast listener housekeeping, which every
        link produces by itself; "icmpv6" is everything else ICMPv6.
        """
        self._require_running()
        return firewall.read_counters(self.netns)

    def reset_records(self) -> None:
        self._reader().reset()
        firewall.reset_counters(self.netns)

    # --- internals ----------------------------------------------------------------------------

    def _build_internet(self) -> None:
        self._topology.add_namespace("inet")
        commands = []
        for service in self.zone.services():
            commands.append(f"addr add {service.address}/32 dev lo")
            if service.address6:
                commands.append(f"addr add {service.address6}/128 dev lo")
        commands.append(f"addr add {DNS_ADDRESS}/32 dev lo")
        if self.ipv6:
            commands.append(f"addr add {service_address6(DNS_ADDRESS)}/128 dev lo")
        self._topology.ip_batch(self.netns, commands)
        self._topology.nft(self.netns, firewall.counting_ruleset(INTERNET_LINK_GLOB)
                           + firewall.quiet_links_ruleset(INTERNET_LINK_GLOB))

    def _listeners(self) -> tuple[Listener, ...]:
        wildcards = ["0.0.0.0", "::"] if self.ipv6 else ["0.0.0.0"]
        services = self.zone.services()
        # Port 53 on the DNS address belongs to the DNS server, and a wildcard socket would
        # clash with it; UDP echo must answer from the address it was sent to. Both therefore
        # listen on each service address rather than on the wildcard.
        per_service = [s.address for s in services] + [s.address6 for s in services
                                                         if s.address6]
        dns_hosts = [DNS_ADDRESS] + ([service_address6(DNS_ADDRESS)] if self.ipv6 else [])
        plan: list[tuple[Kind, Proto, int, list[str]]] = [
            ("dns", "udp", DNS_PORT, dns_hosts),
            ("dns", "tcp", DNS_PORT, dns_hosts),
            ("http", "tcp", HTTP_PORT, wildcards),
            ("https", "tcp", HTTPS_PORT, wildcards),
            ("echo", "tcp", ECHO_PORT, wildcards),
            ("echo", "udp", ECHO_PORT, per_service),
            ("imaps", "tcp", IMAPS_PORT, wildcards),
            ("smtps", "tcp", SMTPS_PORT, wildcards),
            ("submission", "tcp", SUBMISSION_PORT, wildcards),
        ]
        plan += [("sink", "tcp", p, per_service if p == DNS_PORT else wildcards)
                 for p in self._tcp_sink_ports]
        plan += [("sink", "udp", p, per_service if p == DNS_PORT else wildcards)
                 for p in self._udp_sink_ports]
        return tuple(Listener(kind, proto, host, port)
                     for kind, proto, port, hosts in plan for host in hosts)

    def _link(self, netns: str, k: int, *, foreign: bool, default_route: bool,
              return_routes: tuple[str, ...], ipv6: bool) -> Link:
        inet_if, far_if = f"il{k}", self._far_ifname(k)
        inet_addr, far_addr, inet_addr6, far_addr6 = link_addresses(k)
        self._topology.add_veth(self.netns, inet_if, netns, far_if, foreign_b=foreign)
        inet_cmds = [f"addr add {inet_addr}/30 dev {inet_if}"]
        far_cmds = [f"addr add {far_addr}/30 dev {far_if}"]
        if ipv6:
            # nodad: usable at once, instead of a second of duplicate address detection.
            inet_cmds.append(f"addr add {inet_addr6}/64 dev {inet_if} nodad")
            far_cmds.append(f"addr add {far_addr6}/64 dev {far_if} nodad")
        inet_cmds.append(f"link set {inet_if} up")
        far_cmds.append(f"link set {far_if} up")
        inet_cmds += [f"route add {net} via {far_addr6 if ':' in net else far_addr}"
                      for net in return_routes]
        if default_route:
            far_cmds.append(f"route add default via {inet_addr}")
            if ipv6:
                far_cmds.append(f"route add default via {inet_addr6}")
        self._topology.ip_batch(self.netns, inet_cmds)
        self._topology.ip_batch(netns, far_cmds)
        return Link(netns, far_if, far_addr, inet_addr, far_addr6 if ipv6 else None,
                    inet_addr6 if ipv6 else None, inet_if)

    def _far_ifname(self, k: int) -> str:
        # Carries our suffix: never collides with names in a namespace someone else owns.
        return f"fn{self._suffix}-{k}"

    def _take_link(self) -> int:
        if self._next_link > LAST_LINK:
            raise FakeNetError(f"no more than {LAST_LINK - FIRST_LINK + 1} links per FakeInternet")
        k, self._next_link = self._next_link, self._next_link + 1
        return k

    def _reader(self) -> RecordReader:
        return self._running(self._records)

    def _require_running(self) -> None:
        if self._state != "running":
            raise FakeNetError(f"FakeInternet is {self._state}, not running")

    def _running[T](self, value: T | None) -> T:
        self._require_running()
        if value is None:
            raise FakeNetError("FakeInternet has not finished starting")
        return value

    def __repr__(self) -> str:
        return f"<FakeInternet {self.netns} {self._state}>"


def _records_of(address: str, address6: str | None) -> dict[str, list[str]]:
    return {"A": [address], "AAAA": [address6] if address6 else []}
