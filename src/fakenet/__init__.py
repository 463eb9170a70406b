"""fakenet: a fake internet made of Linux network namespaces, for tests, benchmarks and demos.

Real DNS, HTTP(S) (with a WebSocket echo endpoint at /ws), mail (IMAPS 993, SMTPS 465,
submission 587, with the accounts `net.set_mail_account` sets), sink and echo servers in an
"internet" namespace, clients linked to it (open, blackholed, isolated), and records of
everything that arrived (WebSocket messages unmasked, so `received()` sees them). Needs root.
A host name can be given a static site instead of the echo (`net.site_dir(host)`,
fakenet.sites): fakenet.packages builds an npm registry and a Python index into them.

    with FakeInternet() as net:
        client = net.add_client()
        client.run(["curl", "--cacert", str(net.ca_cert_path), "https://api.example.test/"])
        assert net.http_requests()[0]["host"] == "api.example.test"

Addresses: see fakenet.zone (fakenet uses 10.200.1-127.x for links and 10.200.254.0/23 for
services; 10.200.128.0/17 is left free for cages and other helpers). Namespaces are named
`fn-<6 hex>-<role>`, so `leaked_namespaces(net.name_prefix)` checks one instance only.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fakenet.errors import FakeNetError
    from fakenet.host import FakeHost
    from fakenet.internet import Client, FakeInternet, Link
    from fakenet.records import SinkRecord
    from fakenet.topology import leaked_namespaces
    from fakenet.wait import wait_until
    from fakenet.zone import ZONE

# Exports are imported on first use: the server process (`python -m fakenet.servers`) then
# starts without loading the host side (cryptography alone costs ~0.1 s per start).
_EXPORTS = {
    "ZONE": "fakenet.zone",
    "Client": "fakenet.internet",
    "FakeInternet": "fakenet.internet",
    "FakeHost": "fakenet.host",
    "FakeNetError": "fakenet.errors",
    "Link": "fakenet.internet",
    "SinkRecord": "fakenet.records",
    "leaked_namespaces": "fakenet.topology",
    "wait_until": "fakenet.wait",
}
__all__ = [
    "ZONE",
    "Client",
    "FakeHost",
    "FakeInternet",
    "FakeNetError",
    "Link",
    "SinkRecord",
    "leaked_namespaces",
    "wait_until",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'fakenet' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
