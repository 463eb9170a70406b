"""The pod's nftables ruleset, loaded by its init container before any other container runs
(pure: rendered as text).

Every container of a pod shares one network namespace, so the fence is drawn by uid, as
Istio's init container does: the gateway's uid alone may send a packet anywhere but the
pod's own loopback. Everything else is redirected or dropped before it leaves:
- TCP to the cage's ports (80, 443, and those cage.yaml allows) is redirected to the gateway's
  transparent port, whatever its address (also when a program ignores the proxy variables);
- DNS (UDP and TCP 53) to the pod's resolvers (its /etc/resolv.conf: the cluster's DNS, added
  to the `resolvers` set by the init container's script, NETFILTER_SCRIPT) is redirected to the
  gateway's resolver; DNS to any other server is dropped, as any other packet;
- on loopback, the gateway's transparent port accepts only redirected connections (which
  the output hook still sees with their first interface: nft's `oif` is fixed before the
  redirect, so they are told by their new address and conntrack's dnat status);
- all other output of any other uid, and all of IPv6 but loopback, is counted and dropped;
- nothing reaches the pod from outside but answers to its own connections.
The counters have the gateway's names (gateway/firewall.py), so its packet summaries read
the same on one host and in a pod.
"""

from __future__ import annotations

from agentcage.gateway.firewall import COUNTERS, TABLE
from agentcage.kube import layout


def _set(values) -> str:
    return "{ " + ", ".join(str(v) for v in values) + " }"


def render_ruleset(tcp_ports: tuple[int, ...], gateway_uid: int = layout.GATEWAY_UID) -> str:
    ports = _set(sorted({*tcp_ports, 80, 443}))
    counters = "\n".join(f"  counter {name} {{}}" for name in COUNTERS)
    gw = gateway_uid
    return f"""table inet {TABLE}
delete table inet {TABLE}
table inet {TABLE} {{
{counters}

  set resolvers {{
    type ipv4_addr
  }}

  chain to_gateway {{
    type nat hook output priority -100; policy accept;
    meta skuid {gw} return
    ip daddr @resolvers udp dport 53 redirect to :{layout.DNS_PORT}
    ip daddr @resolvers tcp dport 53 redirect to :{layout.DNS_PORT}
    meta nfproto ipv4 tcp dport {ports} redirect to :{layout.TRANSPARENT_PORT}
  }}

  chain output {{
    type filter hook output priority filter; policy drop;
    oif "lo" tcp dport {layout.TRANSPARENT_PORT} meta skuid != {gw} ct status != dnat \\
      reject with tcp reset
    oif "lo" tcp dport {_set((layout.PROXY_PORT, layout.TRANSPARENT_PORT))} meta skuid {gw} \\
      reject with tcp reset
    oif "lo" accept
    ip daddr {layout.LOOPBACK} ct status dnat accept
    meta nfproto ipv6 counter name ipv6 drop
    meta skuid {gw} accept
    jump refused
  }}

  chain input {{
    type filter hook input priority filter; policy drop;
    iif "lo" accept
    meta nfproto ipv6 counter name ipv6 drop
    ct state established,related accept
    counter name input drop
  }}

  chain forward {{
    type filter hook forward priority filter; policy drop;
    counter name forward drop
  }}

  chain refused {{
    meta l4proto tcp counter name cage_tcp drop
    meta l4proto udp counter name cage_udp drop
    meta l4proto icmp counter name cage_icmp drop
    counter name cage_other drop
  }}
}}
"""


# The init container's command: the ruleset, then the pod's resolvers into its set. The pod's
# resolv.conf is known only in the pod (a cluster's DNS address is the cluster's), so it is
# read there. A resolv.conf naming none leaves the set empty: the agent's DNS then fails
# (closed), it never leaves.
NETFILTER_SCRIPT = f"""#!/bin/sh
set -eu
nft -f "$(dirname "$0")/{layout.RULESET_KEY}"
for server in $(awk '$1 == "nameserver" && $2 ~ /^[0-9.]+$/ {{ print $2 }}' /etc/resolv.conf)
do
  nft add element inet {TABLE} resolvers "{{ $server }}"
done
"""
