"""The gateway namespace's nftables ruleset, rendered as text from the settings (pure).

The gateway namespace has one link, the veth to the cage, and no route anywhere else: upstream
sockets are made in the uplink namespace (uplink.py), so nothing created in this namespace can
reach the network, whatever a hook or a library does. On top of that, default deny in every
direction: nothing is forwarded; IPv6 is dropped; from the cage only DNS to the resolver and TCP
to the proxy (80/443/configured ports redirected to the transparent port, the regular proxy port
by address) and to the mail relays' ports on the gateway's address (relays/) are accepted;
everything else is counted and dropped. A self-loop guard refuses
connections from the gateway to its own proxy ports.
"""

from __future__ import annotations

from agentcage.gateway.relays.settings import relay_ports
from agentcage.gateway.settings import GatewaySettings

TABLE = "agentcage"
COUNTERS = (
    "cage_tcp",
    "cage_udp",
    "cage_icmp",
    "cage_other",
    "ipv6",
    "forward",
    "input",
    "output",
)


def _set(values) -> str:
    return "{ " + ", ".join(str(v) for v in values) + " }"


def render_ruleset(s: GatewaySettings) -> str:
    cage = f'"{s.cage_iface}"'
    ports = _set(sorted(set(s.tcp_ports)))
    proxy_ports = _set(s.proxy_ports)
    net, gw = s.cage_network, s.gateway_address
    counters = "\n".join(f"  counter {name} {{}}" for name in COUNTERS)
    # published ports (published.py): the gateway's relay may open a connection to the cage's
    # address, on those ports alone; nothing else in here ever dials the cage
    cage_ports = sorted({cage_port for _, _, cage_port in s.published_ports})
    published = (f"\n    oifname {cage} ip daddr {s.cage_address} tcp dport {_set(cage_ports)} "
                 "ct state new accept" if cage_ports and s.cage_address else "")
    # mail relays (relays/): their ports, on the gateway's own address alone
    relayed = relay_ports(s.relays)
    relay_in = (f"\n    ip daddr {gw} tcp dport {_set(relayed)} accept" if relayed else "")
    relay_input = (f"\n    iifname {cage} ip saddr {net} ip daddr {gw} tcp dport {_set(relayed)} "
                   "accept" if relayed else "")
    # Loaded once, into the gateway namespace just made, which holds no table: none is deleted
    # first (`table X; delete table X` before it made the kernel wait out an RCU grace
    # period in the commit, 8-20 ms of every start; nft alone takes 4)
    return f"""table inet {TABLE} {{
{counters}

  chain cage_ingress {{
    type filter hook prerouting priority mangle; policy accept;
    iifname != {cage} accept
    meta nfproto ipv6 counter name ipv6 drop
    ip saddr != {s.cage_network} jump cage_drop
    ct state established accept
    ip daddr {s.gateway_address} udp dport {s.dns_port} accept
    ip daddr {s.gateway_address} tcp dport {s.dns_port} accept
    ip daddr {s.gateway_address} tcp dport {s.regular_port} accept{relay_in}
    tcp dport {ports} accept
    jump cage_drop
  }}

  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname {cage} meta nfproto ipv4 tcp dport {ports} redirect to :{s.transparent_port}
  }}

  chain input {{
    type filter hook input priority filter; policy drop;
    iif "lo" accept
    meta nfproto ipv6 counter name ipv6 drop
    ct state invalid drop
    iifname {cage} ip saddr {net} ip daddr {gw} udp dport {s.dns_port} accept
    iifname {cage} ip saddr {net} ip daddr {gw} tcp dport {s.dns_port} accept
    iifname {cage} ip saddr {net} tcp dport {s.transparent_port} ct status dnat accept
    iifname {cage} ip saddr {net} ip daddr {gw} tcp dport {s.regular_port} accept{relay_input}
    iifname {cage} ct state established accept
    iifname {cage} jump cage_drop
    counter name input drop
  }}

  chain forward {{
    type filter hook forward priority filter; policy drop;
    meta nfproto ipv6 counter name ipv6 drop
    iifname {cage} jump cage_drop
    counter name forward drop
  }}

  chain cage_drop {{
    meta l4proto tcp counter name cage_tcp drop
    meta l4proto udp counter name cage_udp drop
    meta l4proto icmp counter name cage_icmp drop
    counter name cage_other drop
  }}

  chain output {{
    type filter hook output priority filter; policy drop;
    meta nfproto ipv6 counter name ipv6 drop
    tcp dport {proxy_ports} fib daddr type local reject with tcp reset
    oif "lo" accept
    oifname {cage} ct state established,related accept{published}
    counter name output drop
  }}
}}
"""


def sysctls() -> dict[str, str]:
    """Per-namespace kernel settings of the gateway (never the host's)."""
    return {
        "net.ipv4.ip_forward": "0",
        "net.ipv6.conf.all.disable_ipv6": "1",
        "net.ipv6.conf.default.disable_ipv6": "1",
    }
