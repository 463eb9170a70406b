"""A client whose only way out is a gateway linked to nothing: the worst network a probe meets.

client ns --veth-- gateway ns (no other link). The gateway either drops every packet (so each
connect and lookup runs into its timeout) or refuses each one (NXDOMAIN for every name, TCP
reset, ICMP unreachable), which shows how fast a probe gives up when told "no".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fakenet import firewall
from fakenet.process import ServerProcess
from fakenet.serverconfig import Listener
from fakenet.topology import Topology
from fakenet.zone import link_addresses

BlackholeMode = Literal["drop", "reject"]
DNS_PORT = 53


@dataclass(frozen=True)
class Blackhole:
    mode: BlackholeMode
    client_netns: str
    gateway_netns: str
    client_address: str
    client_address6: str | None
    gateway_address: str  # the client's default route and resolver


def build_blackhole(topology: Topology, k: int, client_ifname: str, mode: BlackholeMode, *,
                    ipv6: bool, workdir: Path, start_timeout: float,
                    servers: list[ServerProcess]) -> Blackhole:
    """Make the pair on link k. A server it starts is appended to `servers` before it starts,
    so whoever owns that list stops it even when starting fails."""
    if mode not in ("drop", "reject"):
        raise ValueError(f"mode must be 'drop' or 'reject', not {mode!r}")
    client = topology.add_namespace(f"bh{k}")
    gateway = topology.add_namespace(f"bhgw{k}")
    gw_if = f"bg{k}"
    gw_addr, client_addr, gw_addr6, client_addr6 = link_addresses(k)
    # The firewall goes in before any interface is up: not one packet gets an answer early.
    topology.nft(gateway, firewall.blackhole_drop_ruleset() if mode == "drop"
                 else firewall.blackhole_reject_ruleset(gw_addr))
    topology.add_veth(gateway, gw_if, client, client_ifname)

    gw_cmds = [f"addr add {gw_addr}/30 dev {gw_if}"]
    client_cmds = [f"addr add {client_addr}/30 dev {client_ifname}"]
    if ipv6:
        gw_cmds.append(f"addr add {gw_addr6}/64 dev {gw_if} nodad")
        client_cmds.append(f"addr add {client_addr6}/64 dev {client_ifname} nodad")
    gw_cmds.append(f"link set {gw_if} up")
    client_cmds += [f"link set {client_ifname} up", f"route add default via {gw_addr}"]
    if ipv6:
        client_cmds.append(f"route add default via {gw_addr6}")
    topology.ip_batch(gateway, gw_cmds)
    topology.ip_batch(client, client_cmds)
    topology.write_resolv_conf(client, gw_addr)

    if mode == "reject":
        server = ServerProcess(
            gateway, workdir,
            (Listener("dns", "udp", gw_addr, DNS_PORT), Listener("dns", "tcp", gw_addr, DNS_PORT)),
            zone={}, catch_all=None,  # no names at all: NXDOMAIN for every question
        )
        servers.append(server)
        server.start(start_timeout)
    return Blackhole(mode, client, gateway, client_addr, client_addr6 if ipv6 else None, gw_addr)
