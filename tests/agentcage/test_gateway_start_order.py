"""A gateway arms before the cage's network is built and enters its namespace only after.

The backend hands the gateway its settings while it still makes the links and loads the
firewall (the gateway arms meanwhile: inspectors, audit log, policy, mitmproxy's options), and
marks the network complete afterwards (`network_path`). Until that mark the gateway must stay
in the namespace it started in with nothing open toward the cage: no listener, no ready mark.

Run for real: a gateway process (`python -m agentcage.gateway`) started in a private network
namespace of this test (`unshare --net`), its own namespace a named one the test makes (a
loopback with the gateway's address: no link anywhere), both removed afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from agentcage.gateway.settings import GatewaySettings
from agentcage.policy import document_from_domains
from agentcage.state import write_json
from fakenet import wait_until

ADDRESS = "10.200.201.1"


@pytest.fixture
def gateway_namespace():
    name = f"agt-order-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "-batch", "-"], check=True, text=True,
                       input=f"link set lo up\naddr add {ADDRESS}/32 dev lo\n")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            found += [int(c) for c in children]
            todo += [int(c) for c in children]
    return found


def _netns(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def test_the_gateway_arms_first_and_enters_its_namespace_only_once_the_network_is_marked(
        tmp_path, gateway_namespace):
    write_json(tmp_path / "policy.json", document_from_domains("allowlist", ["example.test"], []))
    (tmp_path / "upstream.pem").write_text("")
    settings = GatewaySettings(
        cage_name="order", netns=gateway_namespace, cage_iface="gw0", gateway_address=ADDRESS,
        cage_network=f"{ADDRESS}/32", uplink_netns="", dns_servers=(),
        policy_path=str(tmp_path / "policy.json"), audit_path=str(tmp_path / "audit.jsonl"),
        ready_path=str(tmp_path / "gateway.ready"), confdir=str(tmp_path / "ca"),
        upstream_ca_path=str(tmp_path / "upstream.pem"),
        network_path=str(tmp_path / "gateway.network"),
        policy_ack_path=str(tmp_path / "policy.ack"),
    )
    (tmp_path / "gateway.json").write_text(settings.to_json())
    with open(tmp_path / "gateway.log", "wb") as log:
        proc = subprocess.Popen(
            ["unshare", "--net", sys.executable, "-m", "agentcage.gateway",
             "--settings", str(tmp_path / "gateway.json"), "--wait", "10"],
            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    target = os.stat(f"/run/netns/{gateway_namespace}").st_ino
    try:
        # armed: the policy it read is acknowledged (written during arming, after the CA)
        assert wait_until(lambda: (tmp_path / "policy.ack").exists(), 30), \
            (tmp_path / "gateway.log").read_text()
        time.sleep(1.0)  # ample time to go further, if it would
        assert proc.poll() is None
        assert not (tmp_path / "gateway.ready").exists()
        processes = [proc.pid, *_descendants(proc.pid)]
        assert len(processes) >= 2 and all(_netns(p) != target for p in processes)

        (tmp_path / "gateway.network").write_text("")  # what the backend does once it is built
        assert wait_until(lambda: (tmp_path / "gateway.ready").exists(), 30), \
            (tmp_path / "gateway.log").read_text()
        assert any(_netns(p) == target for p in _descendants(proc.pid))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
