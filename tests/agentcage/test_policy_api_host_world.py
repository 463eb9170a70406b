"""The policy API from the host's side: nothing there reaches it. The host is played by a
namespace of the fake internet (fakenet.FakeHost) where the CLI runs a service cage on the
`host` uplink with a published port, so the gateway does have a listener on the host's side.
From the host, the same knock (tests/api_knock.py) that reaches the API from inside the cage
tries the gateway's address and ports (the regular proxy, the transparent proxy, the ports the
cage's 80 and 443 are sent to, the resolver), the host's own loopback and address on the same
ports, every port the host listens on (the published one among them), and the name
agentcage.local through the host's resolver: nothing answers the API. The controls: from
inside the cage the same knock gets the API's answer at the gateway's ports, and from the host
it gets answers from the published port and from the fake internet."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.agentcage.conftest import make_project, needs_root
from tests.agentcage.hosted import OnHost

KNOCK = (Path(__file__).parent.parent / "api_knock.py").read_text()
PORT = 18790  # the service's, published on the host's loopback
SERVICE = """\
name: {name}
lifecycle: service
container:
  command: ["python3", "-m", "http.server", "{port}", "--bind", "0.0.0.0", "--directory",
            "/workspace"]
  ports: ["127.0.0.1:{port}:{port}"]
domains: {{mode: allowlist, allow: [allowed.example.test]}}
gateway:
  uplink: host
policy_api:
  grantable: [granted.example.test]
"""
HTTP_KINDS = ("https", "http", "proxy-http", "proxy-connect")


@pytest.fixture(scope="module")
def world():
    needs_root()
    from fakenet import FakeInternet

    with FakeInternet(extra_names={"granted.example.test": None}, catch_all=False) as net:
        yield net


@pytest.fixture
def on_host(world):
    from fakenet import FakeHost

    home = Path(tempfile.mkdtemp(prefix="agentcage-api-host-"))
    os.chmod(home, 0o755)
    try:
        with FakeHost(world) as host:
            cli = OnHost(host, home)
            try:
                yield cli
            finally:
                cli.destroy_all()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def knock(run, attempts: list[dict]) -> dict[str, str]:
    """The knock's verdict per attempt, run by `run(argv)` where it is to be tried from."""
    r = run(["python3", "-c", KNOCK, json.dumps(attempts)])
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def at(address: str, ports: tuple[int, ...], kinds: tuple[str, ...] = HTTP_KINDS) -> list[dict]:
    return [{"kind": k, "address": address, "port": p} for p in ports for k in kinds]


def listening(cli: OnHost, flags: str) -> set[tuple[str, int]]:
    """(address, port) of every socket the host listens on (`ss -H FLAGS`)."""
    out = cli.sh(f"ss -H {flags}").stdout
    found = set()
    for line in out.splitlines():
        local = line.split()[3]
        address, _, port = local.rpartition(":")
        found.add((re.sub(r"%.*$", "", address.strip("[]")).replace("*", "0.0.0.0"), int(port)))
    return found


@pytest.mark.netns
def test_nothing_on_the_hosts_side_reaches_the_policy_api(on_host, world):
    config = on_host.home / "svc.yaml"
    config.write_text(SERVICE.format(name="svc", port=PORT))
    project = make_project(on_host.home / "work" / "svc")
    r = on_host("cage", "create", "-c", str(config), "--project", str(project))
    assert r.returncode == 0, r.stderr
    # the gateway's address and ports, as it was started with them
    settings = json.loads((on_host.state / "cages" / "svc" / "gateway.json").read_text())
    gateway, dns_port = settings["gateway_address"], settings["dns_port"]
    proxy = settings["regular_port"]
    ports = (*settings["tcp_ports"], settings["transparent_port"], proxy)
    resolver = [{"kind": k, "address": gateway, "port": dns_port}
                for k in ("dns-udp", "dns-tcp")]

    # the control inside: the same knock reaches the API at the gateway's ports, and its
    # resolver answers the name with the gateway's address
    inside = knock(lambda argv: on_host("exec", "svc", "--", *argv), [
        {"kind": "https", "address": gateway, "port": 443},
        {"kind": "proxy-http", "address": gateway, "port": proxy},
        {"kind": "proxy-connect", "address": gateway, "port": proxy},
        *resolver])
    assert set(list(inside.values())[:3]) == {"api"}, inside
    assert list(inside.values())[3:] == [f"dns: {json.dumps([gateway])}"] * 2, inside

    # from the host: the gateway's address, the host's loopback and address, on every
    # port of the gateway's; every port the host listens on; the name
    tcp = listening(on_host, "-tln")
    assert ("127.0.0.1", PORT) in tcp  # the gateway's listener on the host's side
    attempts = [*at(gateway, ports), *resolver]
    for address in ("127.0.0.1", "::1", on_host.host.address):
        attempts += at(address, ports)
        attempts += [{"kind": k, "address": address, "port": dns_port}
                     for k in ("dns-udp", "dns-tcp")]
    for address, port in sorted(tcp):
        attempts += at("127.0.0.1" if address == "0.0.0.0" else address, (port,))
    for address, port in sorted(listening(on_host, "-uln")):
        attempts.append({"kind": "dns-udp", "port": port,
                         "address": "127.0.0.1" if address == "0.0.0.0" else address})
    attempts.append({"kind": "resolve", "address": "agentcage.local"})
    # the controls: the same client gets answers where something should answer
    allowed = world.address_of("allowed.example.test")
    attempts += [{"kind": "https", "address": allowed, "port": 443},
                 {"kind": "http", "address": "127.0.0.1", "port": PORT}]
    outside = on_host.host.run  # the host's network, mounts and PID namespace
    seen = knock(lambda argv: outside(argv, capture_output=True, text=True, timeout=120),
                 attempts)

    assert seen[f"https {allowed} 443"].startswith("answer: HTTP/1.1 200"), seen
    assert seen[f"http 127.0.0.1 {PORT}"].startswith("answer: HTTP/1.0 404"), seen  # the service
    assert "api" not in seen.values(), {k: v for k, v in seen.items() if v == "api"}
    assert not [k for k, v in seen.items() if v.startswith("dns: [") and v != "dns: []"], seen
    # the gateway's own address is not even reached from the host: it faces the cage alone
    assert all(v.startswith("no answer") for k, v in seen.items() if f" {gateway} " in k), seen
    assert seen["resolve agentcage.local"].startswith("no answer"), seen
