"""TLS made ready for the cage's first connections, once the gateway is ready and the agent is
still starting.

A gateway's first connection to a host paid for what every later one finds cached: its leaf
certificate (made and signed on the spot), the TLS context towards the cage, and the one
towards the upstream (which loads the whole bundle of trusted CAs). A first connection took
≈ 20 ms in the gateway where later ones took ≈ 7 ms; an agent that asks its provider for its
settings before it shows its prompt (Claude Code does) waited for all of it. Here mitmproxy's
own TLS hooks (tlsconfig) are run once per exact host the policy allows, over connections that
are only descriptions: nothing is opened, resolved or sent, and nothing is audited. The entries
they leave in mitmproxy's caches are the ones a real connection looks up: one through the
proxy port (`CONNECT host:443`, how agents reach the gateway), and one made straight to the
address the cage's resolver gives every allowed name (the gateway's own), whose certificate
names that address too.

One host a turn of the event loop (`warm_in_turn`): a connection that comes meanwhile waits
for one host's certificates at most (≈ 1.5 ms), not for all of them. Best effort: a failure
here costs the first connection its time again, nothing else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from agentcage.gateway.audit import say

MAX_HOSTS = 16  # hosts made ready ahead, at most (two certificates each, ≈ 1 ms of CPU)
HTTPS_PORT = 443


def exact_hosts(allowed: Iterable[Any]) -> list[str]:
    """The exact names among the policy's allow rules (a wildcard names no host to make a
    certificate for), in order, at most MAX_HOSTS."""
    names = [rule.pattern.name for rule in allowed if not rule.pattern.wildcard]
    return list(dict.fromkeys(names))[:MAX_HOSTS]


def warm_tls(master: Any, hosts: Iterable[str], gateway_address: str) -> int:
    """Run mitmproxy's TLS hooks for the connections to each of `hosts` (through the proxy
    port, and straight to `gateway_address`, where the cage's resolver sends it); how many
    hosts were made ready."""
    from mitmproxy import connection, tls
    from mitmproxy.proxy import context

    tlsconfig = master.addons.get("tlsconfig")
    if tlsconfig is None:
        return 0
    made = 0
    try:
        for host in hosts:
            for dialled in (host, gateway_address):
                client = connection.Client(peername=("0.0.0.0", 0), sockname=("0.0.0.0", 0),
                                           sni=host)
                server = connection.Server(address=(dialled, HTTPS_PORT), sni=host)
                described = context.Context(client, master.options)
                described.server = server
                tlsconfig.tls_start_client(tls.TlsData(client, described))  # certificate
            # the context towards the upstream: one for every host (made by the first call,
            # found in mitmproxy's cache by the next)
            tlsconfig.tls_start_server(tls.TlsData(server, described))
            made += 1
    except Exception as e:  # best effort: the first real connection does it instead
        say(f"TLS not made ready ahead ({type(e).__name__}: {e}); first connections do it")
    return made


def warm_in_turn(loop: asyncio.AbstractEventLoop, master: Any, hosts: Sequence[str],
                 gateway_address: str) -> None:
    """`warm_tls` for the first of `hosts` now, and for the next one at the loop's next turn,
    after whatever came in meanwhile (the first one also makes the contexts: ≈ 13 ms)."""
    if hosts and warm_tls(master, hosts[:1], gateway_address) and len(hosts) > 1:
        loop.call_soon(warm_in_turn, loop, master, hosts[1:], gateway_address)
