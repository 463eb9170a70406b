"""The relays' TLS, terminated at the gateway: toward the cage, a certificate for each relay host
signed by the cage's CA (which the cage trusts), chosen by the name the cage asks for (SNI);
toward the server, a new TLS connection verified against the upstream CA bundle, as every
upstream of the proxy is.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Collection, Iterable
from pathlib import Path

from agentcage.gateway.ca import load_ca, make_leaf


def _server_context(pem: bytes) -> ssl.SSLContext:
    """A server context holding one key and certificate, loaded from memory (a memfd: the
    leaf's key is never written to a disk)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    fd = os.memfd_create("agentcage-relay-leaf", os.MFD_CLOEXEC)
    try:
        os.write(fd, pem)
        context.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    return context


class RelayTls:
    def __init__(self, confdir: Path, hosts: Iterable[str], upstream_ca: str):
        ca_key, ca_cert = load_ca(confdir)
        self._leaves = {host: _server_context(make_leaf(ca_key, ca_cert, host))
                        for host in sorted(set(hosts))}
        self.upstream = ssl.create_default_context(cafile=upstream_ca)
        self.upstream.minimum_version = ssl.TLSVersion.TLSv1_2

    def for_cage(self, hosts: Collection[str]) -> tuple[ssl.SSLContext, dict[str, str | None]]:
        """A server context for one connection from the cage, which shows the certificate of
        the host the cage names among `hosts` (a port's relays; with one, a ClientHello without
        a name gets it), and refuses the handshake for any other name. The dict it returns
        holds, once the handshake ran, the name asked (`asked`) and the host chosen (`host`)."""
        seen: dict[str, str | None] = {}
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2

        def pick(ssl_object: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> int | None:
            seen["asked"] = name
            host = name.lower().rstrip(".") if name else (
                next(iter(hosts)) if len(hosts) == 1 else None)
            if host is None or host not in hosts:
                return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
            seen["host"] = host
            ssl_object.context = self._leaves[host]
            return None

        context.sni_callback = pick
        return context, seen
