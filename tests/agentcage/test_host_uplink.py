"""The `host` uplink, every scaffold's default, with the host played by a namespace (FakeHost:
its own network, PID and mount namespaces, a default route into the fake internet and a
resolv.conf of its own). The CLI runs on that host exactly as a user runs it on theirs. The cage
reaches the network through the host's own namespace and resolver, never reaches the host
itself, and leaves the host's network exactly as it found it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.agentcage.conftest import make_project, needs_root
from tests.agentcage.hosted import OnHost

# The named network namespaces mounted on the fake host: its own mount table (the file names in
# /run/netns are shared with the real host, where other runs come and go).
NAMESPACES_MOUNTED = "findmnt -rn -t nsfs -o TARGET | sort"
CURL = "curl -sS -m 10 -o /dev/null -w '%{http_code}'"


@pytest.fixture(scope="module")
def world():
    needs_root()
    from fakenet import FakeInternet

    with FakeInternet(extra_names={"selfhost.example.test": None}, catch_all=False) as net:
        yield net


@pytest.fixture
def home():
    root = Path(tempfile.mkdtemp(prefix="agentcage-host-"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def on_host(world, home):
    from fakenet import FakeHost

    with FakeHost(world) as host:
        cli = OnHost(host, home)
        yield cli
        cli.destroy_all()


def network_state(cli: OnHost) -> dict[str, str]:
    """Everything of the host's network a cage could change: links, addresses, routes, rules,
    the firewall (nftables and iptables), and forwarding."""
    commands = {
        "links": "ip -o link | sed 's/^[0-9]*: //'",
        "addresses": "ip -o addr",
        "routes": "ip route show table all",
        "rules": "ip rule",
        "nftables": "nft list ruleset",
        "iptables": "iptables-save 2>/dev/null | grep -v '^#'",
        "forwarding": "sysctl net.ipv4.ip_forward net.ipv6.conf.all.forwarding",
    }
    return {k: cli.sh(v).stdout for k, v in commands.items()}


def create_minimal(cli: OnHost, world, name: str, *allow: str) -> None:
    cli.create_from_scaffold(world, name, "minimal", *allow)
    text = (cli.home / f"{name}.yaml").read_text()
    assert "uplink: host" in text and "dns_servers" not in text  # the scaffold, unedited


def settled_network_state(cli: OnHost, timeout: float = 10) -> dict[str, str]:
    """The state once it stopped changing by itself (a fresh link gets its IPv6 multicast and
    local routes a moment after it comes up)."""
    deadline = time.monotonic() + timeout
    last = network_state(cli)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = network_state(cli)
        # IPv6 duplicate address detection still running ("tentative") changes it later
        if now == last and "tentative" not in now["addresses"]:
            return now
        last = now
    raise AssertionError("the fake host's network never settled")


@pytest.mark.netns
def test_host_uplink_reaches_the_internet_and_leaves_the_hosts_network_alone(on_host, world):
    before = settled_network_state(on_host)
    assert "default via" in before["routes"]  # control: the fake host is really routed
    world.reset_records()
    create_minimal(on_host, world, "hosted", "allowed.example.test")
    during = network_state(on_host)
    ok = on_host("exec", "hosted", "--", "sh", "-c", f"{CURL} https://allowed.example.test/")
    assert ok.stdout == "200", ok.stderr
    # through the proxy (the cage's default) the CONNECT is refused; without it, the request
    refused = on_host("exec", "hosted", "--", "sh", "-c",
                      "curl -sS -m 10 -o /dev/null -w '%{http_connect}' "
                      "https://blocked.example.test/; echo; "
                      f"{CURL} --noproxy '*' https://blocked.example.test/")
    assert refused.stdout.split() == ["403", "403"], refused
    # the gateway resolved the allowed name with the host's own resolver configuration
    assert ("allowed.example.test", "A") in world.dns_queries()
    assert not any("blocked" in q for q, _ in world.dns_queries())
    # the request came from the host's own address on its uplink
    peers = {r["peer"].rsplit(":", 1)[0].strip("[]") for r in world.http_requests()}
    assert peers == {on_host.host.address}, peers
    assert during == before  # no link, address, route, rule or firewall entry on the host
    assert on_host("destroy", "-y", "hosted").returncode == 0
    assert network_state(on_host) == before


@pytest.mark.netns
def test_an_allowed_name_that_resolves_to_the_host_itself_is_refused(on_host, world):
    self_address = world.address_of("selfhost.example.test")
    # the host has that address too (as a host may have any public address): it is local there
    assert on_host.sh(f"ip addr add {self_address}/32 dev lo").returncode == 0
    listener = on_host.host.popen(
        [sys.executable, "-c",
         "import socket,sys\ns=socket.create_server((sys.argv[1], 443))\nprint('up', flush=True)\n"
         "c,_=s.accept(); print('ACCEPTED', flush=True)", self_address],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert listener.stdout.readline().strip() == "up"
        create_minimal(on_host, world, "selfie", "selfhost.example.test", "allowed.example.test")
        r = on_host("exec", "selfie", "--", "sh", "-c",
                    f"{CURL} https://selfhost.example.test/; echo; "
                    f"{CURL} https://allowed.example.test/")
        first, second = r.stdout.split()
        assert first in ("502", "403") and second == "200", r.stdout
        audit = [json.loads(line) for line in
                 (on_host.home / "state" / "cages" / "selfie" / "audit.jsonl").read_text()
                 .splitlines()]
        refusals = [a for a in audit if a.get("direction") == "upstream"
                    and a.get("host") == "selfhost.example.test"]
        assert refusals and "routes as local" in refusals[0]["reason"], refusals
    finally:
        os.killpg(listener.pid, signal.SIGKILL)  # nsenter and the listener it forked
        out, _ = listener.communicate(timeout=10)
    assert "ACCEPTED" not in out  # nothing ever connected to the host's own service


@pytest.mark.netns
def test_a_resolver_on_the_hosts_loopback_works(world, home):
    from fakenet import FakeHost

    # systemd-resolved's stub: the host's resolv.conf names 127.0.0.53, which only the host
    # itself can reach
    with FakeHost(world, nameservers=["127.0.0.53"]) as host:
        cli = OnHost(host, home)
        stub = host.popen(["dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts",
                           "--conf-file=/dev/null", "--bind-interfaces",
                           "--listen-address=127.0.0.53", f"--server={world.dns_address}",
                           "--user=root", "--pid-file="],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.3)
            world.reset_records()
            create_minimal(cli, world, "stub", "allowed.example.test")
            r = cli("exec", "stub", "--", "sh", "-c", f"{CURL} https://allowed.example.test/")
            assert r.stdout == "200", r.stderr
            settings = json.loads((home / "state" / "cages" / "stub" / "gateway.json")
                                  .read_text())
            assert settings["dns_servers"] == ["127.0.0.53"]
            assert ("allowed.example.test", "A") in world.dns_queries()  # forwarded by the stub
        finally:
            cli("destroy", "-y", "stub")
            stub.kill()
            stub.wait()


@pytest.mark.netns
def test_a_host_without_resolvers_is_refused_before_anything_is_built(world, home):
    from fakenet import FakeHost

    with FakeHost(world, nameservers=()) as host:
        cli = OnHost(host, home)
        project = make_project(home / "work")
        before = cli.sh(NAMESPACES_MOUNTED).stdout
        assert cli("init", "nodns", "-o", "nodns.yaml").returncode == 0
        r = cli("cage", "create", "-c", "nodns.yaml", "--project", str(project))
        assert r.returncode == 1 and "no DNS server" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1
        # nothing was built (a namespace the real host deleted meanwhile leaves the table too)
        assert set(cli.sh(NAMESPACES_MOUNTED).stdout.split()) <= set(before.split())
        assert not (home / "state" / "cages" / "nodns").exists()


@pytest.mark.netns
def test_ephemeral_run_on_the_host_uplink(on_host, world):
    project = make_project(on_host.home / "work")
    before = on_host.sh(NAMESPACES_MOUNTED).stdout
    r = on_host("run", "minimal", "--project", str(project), "--trust-network", "10.200.0.0/16",
                "--upstream-ca", str(world.ca_cert_path), "--allow", "allowed.example.test",
                "--", "sh", "-c", f"{CURL} https://allowed.example.test/")
    assert (r.returncode, r.stdout) == (0, "200"), r.stderr
    assert set(on_host.sh(NAMESPACES_MOUNTED).stdout.split()) <= set(before.split())
