"""TLS made ready ahead (gateway/warmup.py): after it, the first connections to an allowed
host find their certificate and both TLS contexts made, and make none; with mitmproxy's own
TLS addon, in this process (the timing it buys is bench/cage_startup.py --interactive's)."""

from __future__ import annotations

import asyncio

import pytest
from mitmproxy import connection, tls
from mitmproxy.addons.tlsconfig import TlsConfig
from mitmproxy.net import tls as net_tls
from mitmproxy.proxy import context
from mitmproxy.test import taddons

from agentcage.domains import DomainPattern, DomainRule
from agentcage.gateway.warmup import MAX_HOSTS, exact_hosts, warm_in_turn, warm_tls

GATEWAY = "10.203.0.1"


def _connection(tctx, host: str, dialled: str) -> tls.TlsData:
    """What mitmproxy hands its TLS hooks for a real connection of the cage to `host`."""
    client = connection.Client(peername=("10.203.0.2", 40000), sockname=(GATEWAY, 3128),
                               sni=host, alpn_offers=[b"h2", b"http/1.1"])
    described = context.Context(client, tctx.options)
    described.server = connection.Server(address=(dialled, 443))
    return tls.TlsData(client, described)


@pytest.fixture
def tlsconfig(tmp_path):
    addon = TlsConfig()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, confdir=str(tmp_path))
        yield addon, tctx


@pytest.mark.parametrize("dialled", ["api.example.test", GATEWAY],
                         ids=["through the proxy port", "straight to the gateway"])
def test_a_first_connection_finds_its_certificate_made(tlsconfig, dialled):
    addon, tctx = tlsconfig
    assert warm_tls(tctx.master, ["api.example.test", "other.example.test"], GATEWAY) == 2
    made = dict(addon.certstore.certs)
    assert made  # the warm-up made certificates
    upstream_contexts = net_tls.create_proxy_server_context.cache_info().currsize
    assert upstream_contexts >= 1
    first = _connection(tctx, "api.example.test", dialled)
    addon.tls_start_client(first)
    assert dict(addon.certstore.certs) == made  # looked up, none made
    entry = addon.get_cert(first.context)
    assert any(entry is cached for cached in made.values())
    server = connection.Server(address=(dialled, 443), sni="api.example.test",
                               alpn_offers=[b"h2"])
    addon.tls_start_server(tls.TlsData(server, first.context))
    assert net_tls.create_proxy_server_context.cache_info().currsize == upstream_contexts


def test_without_the_warm_up_the_first_connection_makes_its_certificate(tlsconfig):
    """The control: the lookup above is a real one, which makes what it does not find."""
    addon, tctx = tlsconfig
    before = len(addon.certstore.certs)
    addon.tls_start_client(_connection(tctx, "api.example.test", "api.example.test"))
    assert len(addon.certstore.certs) == before + 1


def test_only_exact_allowed_names_are_made_ready_and_at_most_a_few():
    rules = [DomainRule(DomainPattern("example.test", wildcard=True), None, "cage.yaml"),
             *(DomainRule(DomainPattern(f"h{i}.example.test"), None, "cage.yaml")
               for i in range(MAX_HOSTS + 5)),
             DomainRule(DomainPattern("h0.example.test"), None, "grant")]
    hosts = exact_hosts(rules)
    assert hosts == [f"h{i}.example.test" for i in range(MAX_HOSTS)]


def test_a_master_without_the_tls_addon_is_left_alone():
    with taddons.context() as tctx:
        assert warm_tls(tctx.master, ["api.example.test"], GATEWAY) == 0


def test_a_failure_is_said_and_costs_nothing_else(tlsconfig, capsys):
    addon, tctx = tlsconfig
    addon.certstore = None  # the certificate store gone: every lookup fails
    assert warm_tls(tctx.master, ["api.example.test"], GATEWAY) == 0
    assert "TLS not made ready ahead" in capsys.readouterr().err


def test_hosts_are_made_ready_one_a_turn_of_the_loop(tlsconfig):
    """Each host in a turn of its own: what comes in meanwhile waits for one host at most."""
    addon, tctx = tlsconfig
    hosts = [f"h{i}.example.test" for i in range(4)]
    made_by_turn = []

    async def turns() -> None:
        loop = asyncio.get_running_loop()
        warm_in_turn(loop, tctx.master, hosts, GATEWAY)
        for _ in range(len(hosts) + 1):
            made_by_turn.append(len(addon.certstore.certs))
            await asyncio.sleep(0)  # one turn of the loop

    asyncio.run(turns())
    assert made_by_turn == [2, 4, 6, 8, 8]  # two certificates a host (both ways of reaching it)
