"""An exported pod's network, run for real: the pod played by a fake host (its own network, PID
and mount namespaces, a default route and a resolver in the fake internet, as a pod has its
node's network and the cluster's DNS), the init container's ruleset loaded into it, the gateway
started by its container's own entrypoint as the gateway's uid, and the agent's commands run as
the agent's uid with the exported container's environment. What Kubernetes would mount is put
where the exported pod names it: the ConfigMap's and Secret's files, an in-memory /run.

Every refusal has a control that must pass, so a harness that reaches nothing cannot pass.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentcage.config.load import load_config_text
from agentcage.kube import layout
from agentcage.kube.export import export
from fakenet.host import FakeHost
from tests.agentcage.conftest import AGENT_UID
from tests.agentcage.hosted import REPO, open_to_users

pytestmark = pytest.mark.netns

ENV = "CANARY_TOKEN"
VALUE = "cnry-" + secrets.token_hex(20)  # the real key: only the gateway's container has it
ALLOWED, BLOCKED = "api.example.test", "blocked.example.test"
GRANTABLE = "allowed.example.test"  # not in the allowlist; the policy API may grant it


def cage_text(net, name: str = "podcage", image: str = "localhost/agent:test") -> str:
    """The cage both pod tests export. No dns_servers: the gateway takes the pod's resolver,
    as in a cluster."""
    return f"""
name: {name}
container:
  image: {image}
  user: "{AGENT_UID}:{AGENT_UID}"
  command: ["/bin/sh"]
domains: {{mode: allowlist, allow: [{ALLOWED}]}}
gateway:
  trusted_networks: [10.200.0.0/16]
  upstream_ca_files: [{net.ca_cert_path}]
secret_injection:
  - env: {ENV}
    inject_to: [{ALLOWED}]
policy_api: {{grantable: [{GRANTABLE}], deciders: [rules]}}
"""


class Pod:
    def __init__(self, host: FakeHost, work: Path, agent_env: dict[str, str],
                 placeholder: str, gateway: subprocess.Popen, stdout: Path):
        self.host, self.work, self.agent_env = host, work, agent_env
        self.placeholder, self.gateway, self.stdout = placeholder, gateway, stdout

    def agent(self, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """`argv` as the agent's container runs it: its uid, its environment."""
        return self.host.run(["setpriv", f"--reuid={AGENT_UID}", f"--regid={AGENT_UID}",
                              "--clear-groups", "--", *argv], env=self.agent_env,
                             capture_output=True, text=True, timeout=timeout)

    def python(self, code: str) -> dict:
        r = self.agent([sys.executable, "-c", code])
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def audit(self) -> list[dict]:
        path = self.work / "audit" / "audit.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def counters(self) -> dict[str, int]:
        r = self.host.run(["nft", "-j", "list", "counters", "table", "inet", "agentcage"],
                          capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr
        return {i["counter"]["name"]: i["counter"]["packets"]
                for i in json.loads(r.stdout)["nftables"] if "counter" in i}


def _materialise(objects, config_dir: Path) -> dict:
    """The gateway ConfigMap's keys as files (what its volume shows); the agent's container."""
    (config,) = [o for o in objects if o["kind"] == "ConfigMap"
                 and o["metadata"]["name"].endswith("-gateway")]
    config_dir.mkdir()
    for key, text in config["data"].items():
        (config_dir / key).write_text(text)
    (pod,) = [o for o in objects if o["kind"] == "Pod"]
    (agent,) = pod["spec"]["containers"]
    return agent


@pytest.fixture(scope="module")
def pod(net) -> Iterator[Pod]:
    spec = load_config_text(cage_text(net)).spec()
    result = export(spec, "pod", base=Path("/"))
    work = Path(tempfile.mkdtemp(prefix="agentcage-pod-"))
    work.chmod(0o755)
    gateway = None
    try:
        agent = _materialise(result.exported.objects, work / "config")
        (work / "audit").mkdir()
        with FakeHost(net) as host:
            open_to_users(host)
            # what the kubelet mounts: /run in memory, the keys' Secret, the state and CA
            # volumes (the gateway's uid owns what it writes)
            keys, state, public = layout.KEYS_DIR, layout.STATE_DIR, layout.PUBLIC_DIR
            script = f"""set -e
mount -t tmpfs -o mode=0755 podrun /run
mkdir -p {keys} {state} {public}
printf '%s\\n' '{VALUE}' > {keys}/{ENV}
chmod 0444 {keys}/{ENV}
chown {layout.GATEWAY_UID}:{layout.GATEWAY_UID} {state} {public} {work}/audit
ln -s {public} {layout.AGENT_PUBLIC_DIR}
"""
            r = host.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stderr
            # the netfilter init container's command, on the ConfigMap's files
            r = host.run(["/bin/sh", str(work / "config" / layout.NETFILTER_KEY)],
                         capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stderr
            stdout = work / "gateway.out"
            with open(stdout, "wb") as out:
                gateway = host.popen(
                    ["setpriv", f"--reuid={layout.GATEWAY_UID}",
                     f"--regid={layout.GATEWAY_UID}", "--clear-groups", "--",
                     sys.executable, "-m", "agentcage.kube.sidecar",
                     "--config", str(work / "config"), "--audit", str(work / "audit")],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
                         "PYTHONPATH": str(REPO / "src")})
            ready = f"{state}/{layout.READY_FILE}"
            deadline = time.monotonic() + 60
            while host.run(["test", "-e", ready]).returncode != 0:
                assert gateway.poll() is None, stdout.read_text()[-2000:]
                assert time.monotonic() < deadline, stdout.read_text()[-2000:]
                time.sleep(0.1)
            env = {e["name"]: e["value"] for e in agent["env"]}
            yield Pod(host, work, env, env[ENV], gateway, stdout)
    finally:
        if gateway is not None:
            with contextlib.suppress(ProcessLookupError):
                gateway.kill()
            gateway.wait(timeout=10)
        subprocess.run(["rm", "-rf", str(work)], check=False)


CURL = ["curl", "-sS", "-m", "15", "-o", "/dev/null", "-w", "%{http_code}"]


def test_the_agent_holds_the_placeholder_and_the_upstream_receives_the_real_key(pod, net):
    assert pod.placeholder.startswith("agentcage:secret:") and VALUE not in pod.agent_env.values()
    marker = secrets.token_hex(6)
    r = pod.agent([*CURL, "-H", f"x-api-key: {pod.placeholder}",
                   f"https://{ALLOWED}/{marker}"])
    assert r.stdout == "200", r.stderr
    (seen,) = [q for q in net.http_requests() if q["path"] == f"/{marker}"]
    assert seen["headers"].get("x-api-key") == VALUE
    assert not net.received(pod.placeholder)


def test_a_refused_host_is_refused_audited_and_on_the_gateways_stdout(pod, net):
    marker = secrets.token_hex(6)
    r = pod.agent([*CURL, f"https://{BLOCKED}/{marker}"])
    assert r.stdout != "200"
    assert not [q for q in net.http_requests() if marker in q["path"]]
    control = pod.agent([*CURL, f"https://{ALLOWED}/{marker}"])
    assert control.stdout == "200", control.stderr
    refused = [a for a in pod.audit() if a.get("host") == BLOCKED and a["decision"] == "blocked"]
    assert refused, pod.audit()[-5:]
    deadline = time.monotonic() + 5
    while BLOCKED not in pod.stdout.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = [json.loads(line) for line in pod.stdout.read_text().splitlines()
             if line.startswith("{")]
    assert any(a.get("host") == BLOCKED and a["decision"] == "blocked" for a in lines)


def test_ignoring_the_proxy_still_goes_through_the_gateway(pod, net):
    allowed_ip, blocked_ip = net.address_of(ALLOWED), net.address_of(BLOCKED)
    marker = secrets.token_hex(6)
    direct = ["--noproxy", "*", "-H", f"x-api-key: {pod.placeholder}"]
    r = pod.agent([*CURL, *direct, "--resolve", f"{ALLOWED}:443:{allowed_ip}",
                   f"https://{ALLOWED}/{marker}"])
    assert r.stdout == "200", r.stderr  # redirected, intercepted, allowed: the key swapped
    (seen,) = [q for q in net.http_requests() if q["path"] == f"/{marker}"]
    assert seen["headers"].get("x-api-key") == VALUE
    assert any(a.get("host") == ALLOWED and a.get("path") == f"/{marker}" for a in pod.audit())
    r = pod.agent([*CURL, *direct, "--resolve", f"{BLOCKED}:443:{blocked_ip}",
                   f"https://{BLOCKED}/{marker}-x"])
    assert r.stdout != "200"
    assert not [q for q in net.http_requests() if f"{marker}-x" in q["path"]]


def test_dns_to_the_pods_resolver_is_the_gateways_and_to_any_other_server_dropped(pod, net):
    """A query to the pod's resolver (its resolv.conf's: here the fake internet's) is
    answered by the gateway: allowed names resolve to the gateway, a refused one to the
    sinkhole, and the resolver never hears of it. A query to any other server is dropped."""
    before = {name for name, _type in net.dns_queries()}
    name = f"q{secrets.token_hex(4)}.{BLOCKED}"
    counters = pod.counters()
    answers = pod.python(f"""
import json, socket
from dnslib import DNSRecord
def ask(name, server):
    try:
        reply = DNSRecord.parse(DNSRecord.question(name).send(server, 53, timeout=3))
    except OSError as e:
        return type(e).__name__
    return [str(r.rdata) for r in reply.rr]
print(json.dumps({{"allowed": ask({ALLOWED!r}, {net.dns_address!r}),
                  "blocked": ask({name!r}, {net.dns_address!r}),
                  "elsewhere": ask({ALLOWED!r}, {net.address_of(BLOCKED)!r})}}))
""")
    assert answers["allowed"] == [layout.LOOPBACK]
    assert answers["blocked"] != [net.address_of(BLOCKED)]
    assert not any(q.rstrip(".") == name for q, _type in net.dns_queries() if q not in before)
    # no answer: a locally made packet that the output hook drops fails its send (EPERM)
    assert answers["elsewhere"] in ("PermissionError", "TimeoutError"), answers
    assert pod.counters()["cage_udp"] > counters["cage_udp"]


def test_other_ports_and_protocols_never_leave_the_pod(pod, net):
    """TCP to a port the cage does not allow, UDP, and a connection to the gateway's
    transparent port that was not redirected: all refused, counted, and nothing arrives."""
    target = net.address_of(ALLOWED)
    canary = secrets.token_hex(8)
    before = pod.counters()
    result = pod.python(f"""
import json, socket
out = {{}}
s = socket.socket(); s.settimeout(2)
try:
    s.connect(({target!r}, 9999)); s.sendall({canary!r}.encode()); out["tcp"] = "connected"
except OSError as e:
    out["tcp"] = type(e).__name__
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto({canary!r}.encode(), ({target!r}, 9999)); out["udp"] = "sent"
except OSError as e:
    out["udp"] = type(e).__name__
t = socket.socket(); t.settimeout(2)
try:
    t.connect(("127.0.0.1", {layout.TRANSPARENT_PORT})); out["transparent"] = "connected"
except OSError as e:
    out["transparent"] = type(e).__name__
print(json.dumps(out))
""")
    assert result["tcp"] != "connected" and result["transparent"] != "connected"
    after = pod.counters()
    assert after["cage_tcp"] > before["cage_tcp"]
    if result["udp"] == "sent":  # the kernel took it: the ruleset must have dropped it
        assert after["cage_udp"] > before["cage_udp"]
    time.sleep(0.5)
    assert not net.received(canary)
    # the control: the gateway's own uid reaches that port (only its uid leaves the pod)
    r = pod.host.run(["setpriv", f"--reuid={layout.GATEWAY_UID}",
                      f"--regid={layout.GATEWAY_UID}", "--clear-groups", "--", sys.executable,
                      "-c", f"import socket; socket.create_connection(({target!r}, 9999), 3)"],
                     capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr


def test_the_agent_asks_the_policy_api_for_a_host_and_its_grant_holds_in_the_pod(pod, net):
    """As on one host: refused first; asked at agentcage.local (through the proxy, as the
    agent's environment sends it), granted by the rules within the ceiling, then reached;
    each step audited."""
    marker = secrets.token_hex(6)
    assert pod.agent([*CURL, f"https://{GRANTABLE}/{marker}-before"]).stdout != "200"
    r = pod.agent(["curl", "-sS", "-m", "15", "-X", "POST", "-H",
                   "content-type: application/json", "-d",
                   json.dumps({"domain": GRANTABLE, "reason": "tests fetch from it",
                               "ttl_seconds": 600}),
                   "https://agentcage.local/v1/allowlist/requests"])
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    assert answer["status"] == "granted" and answer["decided_by"] == "rules", answer
    after = pod.agent([*CURL, f"https://{GRANTABLE}/{marker}-after"])
    assert after.stdout == "200", after.stderr
    assert [q for q in net.http_requests() if q["path"] == f"/{marker}-after"]
    assert not [q for q in net.http_requests() if q["path"] == f"/{marker}-before"]
    policy = [a for a in pod.audit() if a["direction"] == "policy"]
    assert any(a.get("host") == GRANTABLE or GRANTABLE in json.dumps(a) for a in policy)


def test_the_operator_revokes_a_grant_from_the_gateways_container(pod, net):
    """`kubectl exec POD -c gateway -- python3 -m agentcage.kube.operator ...`: as the
    gateway's uid in its container, the operator lists the grants and revokes one; the host
    is refused again at once."""
    def operator(*args: str) -> subprocess.CompletedProcess[str]:
        return pod.host.run(
            ["setpriv", f"--reuid={layout.GATEWAY_UID}", f"--regid={layout.GATEWAY_UID}",
             "--clear-groups", "--", sys.executable, "-m", "agentcage.kube.operator", *args],
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(REPO / "src")},
            capture_output=True, text=True, timeout=60)

    pod.agent(["curl", "-sS", "-m", "15", "-X", "POST", "-H", "content-type: application/json",
               "-d", json.dumps({"domain": GRANTABLE, "reason": "tests", "ttl_seconds": 600}),
               "https://agentcage.local/v1/allowlist/requests"])
    listed = operator("list")
    assert listed.returncode == 0, listed.stderr
    (grant,) = [g for g in json.loads(listed.stdout)["grants"] if g["domain"] == GRANTABLE]
    assert pod.agent([*CURL, f"https://{GRANTABLE}/"]).stdout == "200"
    revoked = operator("revoke", grant["id"])
    assert revoked.returncode == 0, revoked.stderr
    assert [g["id"] for g in json.loads(revoked.stdout)["revoked"]] == [grant["id"]]
    assert pod.agent([*CURL, f"https://{GRANTABLE}/"]).stdout != "200"
    again = operator("revoke", grant["id"])
    assert again.returncode == 1
    (line,) = again.stderr.strip().splitlines()
    assert line.startswith("agentcage operator: no grant")
    # the agent's uid cannot reach the channel
    private = f"{layout.STATE_DIR}/private"
    r = pod.agent([sys.executable, "-c", f"import os; os.listdir({private!r})"])
    assert r.returncode != 0 and "PermissionError" in r.stderr
