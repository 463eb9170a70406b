"""`agentcage demo`: a cage in a fake internet, tried from inside, then measured by agentsec.

Everything is built for the demo and removed after it: the fake internet (namespaces, DNS,
HTTPS servers), a state directory, a project directory and the cage. The cage's uplink is the
fake internet, so no packet can reach an address the demo did not assign.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentcage.backends.namespace import NamespaceBackend
from agentcage.cages import CageService
from agentcage.config.load import load_config_text
from agentcage.errors import AgentcageError
from agentcage.state import HOME_ENV, StateStore
from agentcage.verify import verify_cage
from agentsec import service
from fakenet import FakeInternet, FakeNetError

CAGE_NAME = "demo"
ALLOWED = "api.example.test"
BLOCKED = "evil.example.test"
# Run inside the cage: the status code an HTTPS request gets, or the error that stopped it.
FETCH = (
    "import sys, urllib.request, urllib.error\n"
    "try:\n"
    "    print(urllib.request.urlopen(sys.argv[1], timeout=10).status)\n"
    "except urllib.error.HTTPError as e:\n"
    "    print(e.code, e.read().decode()[:200])\n"
    "except Exception as e:\n"
    "    print('failed:', getattr(e, 'reason', e))\n"
)


@dataclass(frozen=True)
class DemoResult:
    requests: list[tuple[str, str]]  # (url, what the cage got)
    verified: service.SavedReport


def _config_text(net: FakeInternet) -> str:
    return f"""
name: {CAGE_NAME}
domains: {{mode: allowlist, allow: [{ALLOWED}]}}
dns_servers: [{net.dns_address}]
gateway:
  uplink: "netns:{net.netns}"
  trusted_networks: ["10.200.0.0/16"]
  upstream_ca_files: ["{net.ca_cert_path}"]
"""


def run_demo(out_dir: Path, say: Callable[[str], None]) -> DemoResult:
    if os.geteuid() != 0:
        raise AgentcageError("the demo builds network namespaces: run it as root")
    scratch = Path(tempfile.mkdtemp(prefix="agentcage-demo-"))
    os.chmod(scratch, 0o755)  # the workload's unprivileged uid must reach the project
    try:
        say("building the fake internet (namespaces, DNS, HTTPS servers)")
        with FakeInternet(catch_all=False) as net:
            return _in_a_cage(net, scratch, out_dir.resolve(), say)
    except FakeNetError as exc:
        raise AgentcageError(f"the fake internet failed: {exc}") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _in_a_cage(
    net: FakeInternet, scratch: Path, out_dir: Path, say: Callable[[str], None]
) -> DemoResult:
    store = StateStore(scratch / "home")
    backend = NamespaceBackend(store, attach_uplink=lambda ns: net.attach(ns, ipv6=False).interface)
    cages = CageService(store, backend)
    project = scratch / "project"
    project.mkdir()
    (project / "README").write_text("a project the agent may work on\n")
    os.chown(project, 65534, 65534)
    say(f"creating cage {CAGE_NAME!r}: only {ALLOWED} is allowed")
    cages.create(load_config_text(_config_text(net)), project)
    try:
        requests = []
        for host in (ALLOWED, BLOCKED):
            url = f"https://{host}/"
            got = cages.exec_capture(CAGE_NAME, ["python3", "-c", FETCH, url], timeout=60)
            requests.append((url, (got.stdout or got.stderr).strip()))
            say(f"inside the cage, GET {url} -> {requests[-1][1]}")
        say("measuring the cage from inside with agentsec's probe")
        env = {**os.environ, HOME_ENV: str(store.root)}
        verified = verify_cage(CAGE_NAME, label="demo-cage", out_dir=out_dir, redact=False, env=env)
        return DemoResult(requests, verified)
    finally:
        say(f"destroying cage {CAGE_NAME!r}")
        cages.destroy(CAGE_NAME)
