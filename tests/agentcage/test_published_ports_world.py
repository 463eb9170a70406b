"""Published ports (`container.ports`): a service in a cage reached from the host's loopback,
through the gateway, audited, and from nowhere else. The host is played by a namespace of the
fake internet (fakenet.FakeHost) where the CLI runs, as root and as an ordinary user (a
rootless cage, whose uplink is slirp4netns's network); the cage's service is Python's own
HTTP server serving the project."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.agentcage.conftest import AGENT_UID, make_project, needs_root
from tests.agentcage.hosted import AsUser, OnHost, open_to_users

PORT = 18789
SERVICE = f"""\
name: {{name}}
lifecycle: service
container:
  command: ["python3", "-m", "http.server", "{PORT}", "--bind", "0.0.0.0", "--directory",
            "/workspace"]
  ports: ["127.0.0.1:{{host_port}}:{PORT}"]
domains: {{{{mode: allowlist, allow: []}}}}
gateway:
  uplink: host
"""


@pytest.fixture(scope="module")
def world():
    needs_root()
    from fakenet import FakeInternet

    with FakeInternet(catch_all=False) as net:
        yield net


@pytest.fixture(scope="module")
def host(world):
    from fakenet import FakeHost

    home = Path(tempfile.mkdtemp(prefix="agentcage-ports-"))
    os.chmod(home, 0o755)
    try:
        with FakeHost(world) as fake_host:
            cli = OnHost(fake_host, home)
            yield cli
            cli.destroy_all()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def create(cli: OnHost, name: str, host_port: int = PORT):
    project = make_project(cli.home / "work" / name)
    config = cli.home / f"{name}.yaml"
    config.write_text(SERVICE.format(name=name, host_port=host_port))
    return cli("cage", "create", "-c", str(config), "--project", str(project))


def fetch(cli: OnHost, url: str) -> tuple[int, str]:
    """curl on the fake host: (exit status, body)."""
    r = cli.host.run(["curl", "-sS", "--max-time", "5", url], capture_output=True, text=True,
                     timeout=30)
    return r.returncode, r.stdout + r.stderr


def wait_served(cli: OnHost, name: str, url: str) -> str:
    """The body at `url` once the cage's service answers (it starts in the background)."""
    deadline = time.monotonic() + 20
    while True:
        code, body = fetch(cli, url)
        if code == 0:
            return body
        if time.monotonic() > deadline:
            cage = cli.state / "cages" / name
            raise AssertionError(f"{url}: {body}\naudit: {audit(cli, name)[-4:]}\n"
                                 f"workload: {(cage / 'workload.log').read_text()[-800:]}")
        time.sleep(0.3)


def audit(cli: OnHost, name: str) -> list[dict]:
    path = cli.state / "cages" / name / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_published_port_reaches_the_service_from_the_hosts_loopback_only(host, world):
    r = create(host, "svc")
    assert r.returncode == 0, r.stderr
    try:
        assert wait_served(host, "svc", f"http://127.0.0.1:{PORT}/README") == "hello\n"
        # the connection's end is audited once the gateway has seen both sides close, which
        # may come just after curl has its answer
        deadline = time.monotonic() + 10
        while True:
            records = [rec for rec in audit(host, "svc") if rec["direction"] == "published"]
            closed = [rec for rec in records if rec["reason"] == "closed"]
            if closed or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert closed and all(rec["decision"] == "allowed" and rec["port"] == PORT
                              for rec in closed), records
        assert closed[-1]["cage_port"] == PORT
        assert closed[-1]["bytes_out"] > len("hello\n")
        # from another machine of the fake internet, the host's own address: nothing there
        other = world.add_client()
        reach = other.run(["curl", "-sS", "--max-time", "3",
                           f"http://{host.host.address}:{PORT}/README"],
                          capture_output=True, text=True, timeout=30)
        assert reach.returncode != 0 and "hello" not in reach.stdout
        # stopped, the port is gone with the cage
        assert host("stop", "svc").returncode == 0
        code, _ = fetch(host, f"http://127.0.0.1:{PORT}/README")
        assert code == 7  # curl: could not connect
    finally:
        host("destroy", "-y", "svc")


def test_a_port_the_host_already_uses_refuses_the_start_in_one_line(host):
    first = create(host, "one")
    assert first.returncode == 0, first.stderr
    try:
        wait_served(host, "one", f"http://127.0.0.1:{PORT}/README")
        second = create(host, "two")
        assert second.returncode == 1
        assert f"cannot publish 127.0.0.1:{PORT} on the host: Address already in use" \
            in second.stderr, second.stderr
        assert "Traceback" not in second.stderr
        # the first cage's service is untouched
        assert wait_served(host, "one", f"http://127.0.0.1:{PORT}/README") == "hello\n"
    finally:
        host("destroy", "-y", "one")
        host("destroy", "-y", "two")


def test_a_connection_the_cage_does_not_answer_is_ended_and_flagged(host):
    """A host port published to a cage port nothing listens on (the service is elsewhere)."""
    project = make_project(host.home / "work" / "deaf")
    config = host.home / "deaf.yaml"
    config.write_text(SERVICE.format(name="deaf", host_port=PORT + 1).replace(
        f":{PORT}\"]", f":{PORT + 2}\"]"))
    r = host("cage", "create", "-c", str(config), "--project", str(project))
    assert r.returncode == 0, r.stderr
    try:
        code, _ = fetch(host, f"http://127.0.0.1:{PORT + 1}/")
        assert code != 0
        flagged = [rec for rec in audit(host, "deaf")
                   if rec["direction"] == "published" and rec["decision"] == "flagged"]
        assert flagged and "does not answer" in flagged[0]["reason"], flagged
    finally:
        host("destroy", "-y", "deaf")


# ---- rootless: the CLI as an ordinary user (uid 1000), the uplink slirp4netns's network ------

ROOTLESS_PORT = PORT + 10


@pytest.fixture(scope="module")
def user(world):
    """An ordinary user at a fake host of their own: rootless cages."""
    from fakenet import FakeHost

    home = Path(tempfile.mkdtemp(prefix="agentcage-ports-rootless-"))
    os.chmod(home, 0o755)
    try:
        with FakeHost(world) as fake_host:
            open_to_users(fake_host)
            cli = AsUser(fake_host, home, AGENT_UID)
            yield cli
            cli.destroy_all()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def create_rootless(cli: AsUser, name: str, host_port: int = ROOTLESS_PORT):
    project = make_project(cli.home / "work" / name)
    config = cli.home / f"{name}.yaml"
    config.write_text(SERVICE.format(name=name, host_port=host_port).replace(
        "lifecycle: service\ncontainer:\n", "lifecycle: service\ncontainer:\n  limits: none\n"))
    return cli("cage", "create", "-c", str(config), "--project", str(project))


def host_listeners(cli: OnHost) -> set[tuple[str, int, int]]:
    """Every TCP socket listening in the host's network namespace: (address, port, uid)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        r = cli.sh(f"cat {table}")
        for line in r.stdout.splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            address, port = fields[1].rsplit(":", 1)
            raw = bytes.fromhex(address)
            if len(raw) == 4:
                shown = socket.inet_ntop(socket.AF_INET, raw[::-1])
            else:
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                shown = socket.inet_ntop(socket.AF_INET6, words)
            found.add((shown, int(port, 16), int(fields[7])))
    return found


@pytest.mark.netns
def test_a_rootless_cages_published_port_is_the_hosts_loopback_and_nothing_else(user, world):
    """A rootless cage's service, reached from the host's 127.0.0.1 through its gateway's
    relay (audited, the host's peer named), on a socket the user's keeper made there: the one
    listener the cage adds to the host. Nothing of the holder's network, the gateway or the
    cage is forwarded to the host by slirp4netns: the cage's address is not reached, nor the
    service's port at the host's own address or from another machine."""
    before = host_listeners(user)
    r = create_rootless(user, "rl-svc")
    assert r.returncode == 0, r.stderr
    try:
        url = f"http://127.0.0.1:{ROOTLESS_PORT}/README"
        assert wait_served(user, "rl-svc", url) == "hello\n"
        added = host_listeners(user) - before
        assert added == {("127.0.0.1", ROOTLESS_PORT, AGENT_UID)}, added
        records = [rec for rec in audit(user, "rl-svc") if rec["direction"] == "published"]
        closed = [rec for rec in records if rec["reason"] == "closed"]
        assert closed and all(rec["decision"] == "allowed" and rec["port"] == ROOTLESS_PORT
                              and rec["cage_port"] == PORT for rec in closed), records
        assert closed[-1]["host"].startswith("127.0.0.1:")  # the host's own peer, not slirp's
        assert closed[-1]["bytes_out"] > len("hello\n")
        # the cage's port at its own address, and the port at the host's address: nothing
        runtime = json.loads((user.state / "cages" / "rl-svc" / "runtime.json").read_text())
        from agentcage.backends.netplan import NetPlan

        cage = NetPlan.from_dict(runtime["plan"]).cage_address
        for where in (f"{cage}:{PORT}", f"{user.host.address}:{ROOTLESS_PORT}",
                      f"127.0.0.1:{PORT}"):
            code, body = fetch(user, f"http://{where}/README")
            assert code != 0 and "hello" not in body, where
        other = world.add_client()
        reach = other.run(["curl", "-sS", "--max-time", "3",
                           f"http://{user.host.address}:{ROOTLESS_PORT}/README"],
                          capture_output=True, text=True, timeout=30)
        assert reach.returncode != 0 and "hello" not in reach.stdout
        # stopped, the port is gone with the cage's gateway
        assert user("stop", "rl-svc").returncode == 0
        assert fetch(user, url)[0] == 7  # curl: could not connect
        assert host_listeners(user) - before == set()
    finally:
        user("destroy", "-y", "rl-svc")


@pytest.mark.netns
def test_a_port_the_host_already_uses_refuses_a_rootless_start_in_one_line(user):
    """The host's own listener on the port (root's, here): the rootless gateway's keeper
    cannot bind it, and the start is refused with the host's reason, in one line; the host's
    listener is untouched."""
    taken = ROOTLESS_PORT + 1
    holder = user.host.popen(
        [sys.executable, "-c", "import socket,sys,time\ns=socket.create_server(('127.0.0.1', "
         f"{taken}))\nprint('up', flush=True)\ntime.sleep(600)"],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
        r = create_rootless(user, "rl-taken", host_port=taken)
        assert r.returncode == 1, r.stdout + r.stderr
        assert f"cannot publish 127.0.0.1:{taken} on the host: Address already in use" \
            in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert (("127.0.0.1", taken, 0) in host_listeners(user))
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
        user("destroy", "-y", "rl-taken")
