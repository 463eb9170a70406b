"""nftables rulesets, each loaded inside one of our namespaces (never on the host).

- counting: counters, by protocol, of packets arriving in the internet from its links;
- quiet links: the internet's own link addresses (clients' gateways) run no services;
- blackhole drop: a gateway that silently discards everything;
- blackhole reject: a gateway that refuses everything (TCP reset, ICMP unreachable) except
  DNS to its own address, which its NXDOMAIN answerer handles.
"""

from __future__ import annotations

import json

from fakenet.topology import exec_prefix, run

COUNT_TABLE = "fakenet_counts"
COUNTERS = ("tcp", "udp", "icmp", "icmpv6", "nd", "other")
_PREFIX = "n_"  # nft refuses keywords such as "tcp" as counter names

# IPv6 housekeeping every link produces on its own (neighbour discovery, router solicitation,
# multicast listener reports): counted apart as "nd", so "icmpv6" means traffic someone sent.
_ND_TYPES = ("nd-router-solicit, nd-router-advert, nd-neighbor-solicit, nd-neighbor-advert, "
             "nd-redirect, mld-listener-query, mld-listener-report, mld-listener-done, "
             "mld2-listener-report")

# Neighbour discovery passes even a blackhole, as ARP does for IPv4 (nft inet never sees ARP):
# the gateway is there, it just swallows or refuses the traffic.
_ND_ACCEPT = ("icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } "
              "accept")


def counting_ruleset(link_glob: str) -> str:
    # prerouting sees every packet that arrives, whether addressed to the internet itself or
    # not (the internet does not forward, so such packets never reach a forward hook).
    match = f'iifname "{link_glob}"'
    counters = "\n".join(f"  counter {_PREFIX}{name} {{ }}" for name in COUNTERS)
    return f"""
table inet {COUNT_TABLE} {{
{counters}
  chain arrivals {{
    type filter hook prerouting priority -300; policy accept;
    {match} meta l4proto tcp counter name "{_PREFIX}tcp" accept
    {match} meta l4proto udp counter name "{_PREFIX}udp" accept
    {match} meta l4proto icmp counter name "{_PREFIX}icmp" accept
    {match} icmpv6 type {{ {_ND_TYPES} }} counter name "{_PREFIX}nd" accept
    {match} meta l4proto ipv6-icmp counter name "{_PREFIX}icmpv6" accept
    {match} counter name "{_PREFIX}other" accept
  }}
}}
"""


def quiet_links_ruleset(link_glob: str) -> str:
    # The servers listen on wildcard addresses, which would make the internet's side of every
    # link (a client's default gateway) look like a host running sshd, docker and the rest.
    # Real routers run none of that, and a probe must not report such an artifact: refuse.
    return f"""
table inet fakenet_links {{
  chain arrivals {{
    type filter hook input priority 0; policy accept;
    iifname "{link_glob}" fib daddr . iif type local jump link_address
  }}
  chain link_address {{
    meta l4proto tcp reject with tcp reset
    meta l4proto udp reject with icmpx port-unreachable
  }}
}}
"""


def read_counters(netns: str) -> dict[str, int]:
    out = run([*exec_prefix(netns), "nft", "-j", "list", "counters", "table", "inet",
               COUNT_TABLE]).stdout
    counts = dict.fromkeys(COUNTERS, 0)
    for item in json.loads(out).get("nftables", []):
        counter = item.get("counter") or {}
        name = str(counter.get("name", "")).removeprefix(_PREFIX)
        if name in counts:
            counts[name] = int(counter.get("packets", 0))
    return counts


def reset_counters(netns: str) -> None:
    run([*exec_prefix(netns), "nft", "reset", "counters", "table", "inet", COUNT_TABLE])


def blackhole_drop_ruleset() -> str:
    # Dropped at prerouting, before routing could answer with an ICMP error of its own.
    return f"""
table inet fakenet_blackhole {{
  chain arrivals {{
    type filter hook prerouting priority -300; policy drop;
    iifname "lo" accept
    {_ND_ACCEPT}
  }}
}}
"""


def blackhole_reject_ruleset(dns_address: str) -> str:
    # At prerouting, so packets to any address are refused here, not left to routing (which
    # would drop them silently: the gateway does not forward).
    return f"""
table inet fakenet_blackhole {{
  chain arrivals {{
    type filter hook prerouting priority -300; policy accept;
    iifname "lo" accept
    {_ND_ACCEPT}
    ip daddr {dns_address} meta l4proto {{ tcp, udp }} th dport 53 accept
    meta l4proto tcp reject with tcp reset
    meta l4proto udp reject with icmpx port-unreachable
    reject with icmpx admin-prohibited
  }}
}}
"""
