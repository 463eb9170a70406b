"""The exported Pod run as containers, with podman's own pod commands (podman_pod.py says why
not `podman kube play`), in a network namespace linked to the fake internet: the agent's
container is a real container (its own root, the exported uid, no capability), beside the
gateway's sidecar, behind the netfilter init container's ruleset. What is asserted is what a
person running the pod would check: the key stays with the gateway, refusals are refused and
audited, ignoring the proxy changes nothing, and the probe run in the agent's container
(`podman exec`) measures what a cage on one host on the same image is held to.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentcage.config.load import load_config_text
from agentcage.kube.export import export
from tests.agentcage.kube.podman_pod import PodmanPod, ensure_gateway_image, exported_files
from tests.agentcage.kube.test_pod_world import ALLOWED, BLOCKED, ENV, cage_text
from tests.integration.podman_world import IMAGE, podman_world

pytestmark = pytest.mark.netns

VALUE = "cnry-" + secrets.token_hex(20)
# what a cage on one host on this image must not show (test_images_world.py)
FORBIDDEN = {"NET-001", "NET-002", "PRIV-001", "PRIV-002", "PRIV-003", "FS-001", "FS-002",
             "PERS-005", "SEC-001", "SEC-005"}


@pytest.fixture(scope="module")
def pod(net) -> Iterator[tuple[PodmanPod, dict[str, str]]]:
    from agentcage.secrets.placeholders import mint
    from agentcage.secrets.staging import StagedSecret

    with podman_world() as world:
        pass  # the base images, built if missing
    gateway_image = ensure_gateway_image(world)
    spec = load_config_text(cage_text(net, "podmancage", IMAGE)).spec()
    staged = (StagedSecret(ENV, mint(ENV), VALUE.encode()),)
    result = export(spec, "pod", base=Path("/"), staged=staged, gateway_image=gateway_image)
    (obj,) = [o for o in result.exported.objects if o["kind"] == "Pod"]
    env = {e["name"]: e["value"] for e in obj["spec"]["containers"][0]["env"]}
    netns = net.add_client().netns
    with podman_world() as world:
        running = PodmanPod(world, f"kp{secrets.token_hex(3)}", obj["spec"],
                            exported_files(result.exported.objects), netns, net.dns_address,
                            result.exported.node_files)
        try:
            running.start()
            yield running, env
        finally:
            running.close()


FETCH = """
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"x-api-key": sys.argv[2]})
try:
    status = urllib.request.urlopen(req, timeout=15).status
except Exception as e:
    status = getattr(e, "code", None) or type(e).__name__
print(json.dumps(status))
"""


def fetch(pod: PodmanPod, url: str, key: str) -> object:
    r = pod.exec("agent", "python3", "-c", FETCH, url, key)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_agents_container_is_confined_as_exported(pod):
    running, _env = pod
    r = running.exec("agent", "sh", "-c", "id -u; grep CapEff /proc/self/status; "
                     "touch /usr/x 2>&1; cat /run/agentcage/ca.pem | head -1; ls /run/secrets")
    lines = r.stdout.splitlines()
    assert lines[0] == "1000"
    assert lines[1].split()[1] == "0000000000000000"
    assert "Read-only file system" in lines[2]
    assert lines[3] == "-----BEGIN CERTIFICATE-----"
    assert "No such file" in r.stdout + r.stderr  # no Secret in the agent's container


def test_through_the_proxy_the_key_is_swapped_and_refusals_are_audited(pod, net):
    running, env = pod
    placeholder = env[ENV]
    marker = secrets.token_hex(6)
    assert fetch(running, f"https://{ALLOWED}/{marker}", placeholder) == 200
    (seen,) = [q for q in net.http_requests() if q["path"] == f"/{marker}"]
    assert seen["headers"].get("x-api-key") == VALUE
    assert fetch(running, f"https://{BLOCKED}/{marker}", placeholder) != 200
    assert not [q for q in net.http_requests() if q["host"] == BLOCKED and marker in q["path"]]
    def refusal_logged() -> bool:  # the audit, as `kubectl logs -c gateway` shows it
        r = running.world.podman("logs", f"{running.name}-gateway")
        return any(a.get("host") == BLOCKED and a["decision"] == "blocked"
                   for a in (json.loads(line) for line in r.stdout.splitlines()
                             if line.startswith("{")))

    deadline = time.monotonic() + 10
    while not refusal_logged() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert refusal_logged()


def test_without_the_proxy_the_gateway_still_decides(pod, net):
    running, env = pod
    marker = secrets.token_hex(6)
    code = f"""
import json, socket, ssl
ctx = ssl.create_default_context(cafile="/run/agentcage/ca-bundle.pem")
out = {{}}
for host in ({ALLOWED!r}, {BLOCKED!r}):
    try:
        raw = socket.create_connection(({net.address_of(ALLOWED)!r}, 443), timeout=10)
        tls = ctx.wrap_socket(raw, server_hostname=host)
        tls.sendall(("GET /{marker}-" + host + " HTTP/1.1\\r\\nHost: " + host +
                     "\\r\\nx-api-key: {env[ENV]}\\r\\nConnection: close\\r\\n\\r\\n").encode())
        out[host] = tls.recv(64).decode(errors="replace").split("\\r\\n")[0]
    except OSError as e:
        out[host] = type(e).__name__
s = socket.socket(); s.settimeout(2)
try:
    s.connect(({net.address_of(ALLOWED)!r}, 9999)); out["9999"] = "connected"
except OSError as e:
    out["9999"] = type(e).__name__
print(json.dumps(out))
"""
    r = running.exec("agent", "python3", "-c", code)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out[ALLOWED].startswith("HTTP/1.1 200"), out
    (seen,) = [q for q in net.http_requests() if q["path"] == f"/{marker}-{ALLOWED}"]
    assert seen["headers"].get("x-api-key") == VALUE
    assert not out[BLOCKED].startswith("HTTP/1.1 200"), out
    assert not [q for q in net.http_requests() if q["path"] == f"/{marker}-{BLOCKED}"]
    assert out["9999"] != "connected"


def test_the_probe_in_the_agents_container_scores_as_a_cage_on_one_host(pod, net, tmp_path):
    """As docs/kubernetes.md says to measure a pod: `agentsec blast-radius command` with the
    exec of the agent's container (`kubectl exec -i POD -c agent -- python3 -` in a cluster;
    podman's own exec here), gated at the bound a cage on one host on this image is held to."""
    running, _env = pod
    # In a cluster the pod's resolver is the cluster's DNS, and the probe's UDP target a
    # public resolver; here the fake internet has one, the pod's: the probe is pointed at
    # another address of the fake internet (DNS to it must not be answered, as to 8.8.8.8)
    targets = json.loads(net.add_client().probe_targets_file.read_text())
    assert targets["udp_dns"] == f"{net.dns_address}:53"
    targets["udp_dns"] = f"{net.address_of(BLOCKED)}:53"
    template = shlex.join(["podman", "exec", "-i", "-e",
                           f"AGENTSEC_PROBE_TARGETS={json.dumps(targets)}", "-e",
                           f"HOSTNAME={running.name}", f"{running.name}-agent", "python3", "-"])
    r = subprocess.run([str(Path(sys.executable).parent / "agentsec"), "blast-radius",
                        "command", template, "--label", "pod", "--max-score", "8",
                        "--out", str(tmp_path), "--no-history"],
                       env={**os.environ, **running.world.env}, capture_output=True,
                       text=True, timeout=300)
    (path,) = tmp_path.glob("*.json")
    report = json.loads(path.read_text())
    found = {f["id"] for f in report["summary"]["findings"]}
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:] + str(sorted(found))
    axes = report["summary"]["axes"]
    assert all(axis["state"] != "not_measured" for axis in axes.values()), axes
    assert not found & FORBIDDEN, sorted(found)
    assert report["summary"]["score"] <= 8


def test_real_claude_code_in_the_exported_pod_reaches_its_provider_with_the_key_it_never_had(
        net, tmp_path):
    """The claude-code scaffold as shipped, exported with an image of the agent (the tests'
    Debian image with this machine's Claude Code binary, which needs only libc, bound in):
    Claude Code runs headless in the agent's container, its fake model has its Bash tool edit
    the workspace and try to send the key out; the provider gets the real key in every call,
    the container only ever held the placeholder, and nothing gets out."""
    from agentcage.config.load import apply_overrides
    from agentcage.config.scaffolds import scaffold_config
    from agentcage.demo_agents import AGENTS, fake_key, judge, session
    from agentcage.secrets.placeholders import mint
    from agentcage.secrets.staging import StagedSecret

    agent = AGENTS["claude-code"]
    claude = Path(shutil.which("claude") or "claude").resolve()
    assert claude.exists(), "Claude Code is not installed: run scripts/setup.sh"
    config = apply_overrides(scaffold_config("claude-code", "claudepod"),
                             trust=["10.200.0.0/16"], upstream_ca=[str(net.ca_cert_path)])
    real_key = fake_key(agent)
    staged = (StagedSecret(agent.key_env, mint(agent.key_env), real_key.encode()),)
    with podman_world() as world:
        pass  # the base images, built if missing
    gateway_image = ensure_gateway_image(world)  # (not while the cache is held)
    with podman_world() as world:
        result = export(config.spec(), "pod", base=Path("/"), staged=staged, image=IMAGE,
                        gateway_image=gateway_image)
        (obj,) = [o for o in result.exported.objects if o["kind"] == "Pod"]
        net.reset_records()
        net.script_model(session(agent))
        running = PodmanPod(world, f"kc{secrets.token_hex(3)}", obj["spec"],
                            exported_files(result.exported.objects), net.add_client().netns,
                            net.dns_address, result.exported.node_files,
                            binds={"agent": [(str(claude), "/usr/local/bin/claude")]})
        try:
            running.start()
            placeholder = running.exec("agent", "printenv", agent.key_env).stdout.strip()
            assert placeholder == str(staged[0].placeholder)
            run = running.exec("agent", *agent.command, timeout=300)
            audit_file = running.volume("audit") / "audit.jsonl"
            records = [json.loads(line) for line in audit_file.read_text().splitlines()
                       if line.strip()]
            workspace = next(running.volume(v["name"]) for v in obj["spec"]["volumes"]
                             if v["name"].startswith("dir-"))
            outcome = judge(agent, exit_code=run.returncode, project=workspace,
                            real_key=real_key, planted="ghp_" + "0" * 36,
                            placeholder=placeholder, requests=net.http_requests(),
                            dns_queries=net.dns_queries(), received=net.received,
                            audit=records)
        finally:
            running.close()
    assert real_key not in run.stdout + run.stderr
    assert outcome.exit_code == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert outcome.edited
    assert outcome.model_calls >= 5
    assert outcome.provider_got_key
    assert outcome.leaks == []
