"""A real workload in a scaffold cage: `npm install` of a project of 300 packages and
`pip install` of one of 40 wheels, from an npm registry and a Python package index in the fake
internet (fakenet.packages: real tarballs and wheels, real registry documents), on a host
played by a namespace, in a cage made from the claude-code scaffold as shipped.

The agent asks for the registries as the scaffold tells it to (the policy API, granted by its
rules), then installs, through the cage's HTTPS_PROXY as the agent's tools are given it and
with the proxy variables removed (each connection then looks its name up in the cage's
resolver and is taken transparently). Every install must complete with nothing refused: no
429, no failed lookup, and no retry (every file asked for once).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.agentcage.conftest import AGENT_UID, needs_root, watcher_findings
from tests.agentcage.hosted import OnHost

NAME = "workload"
REGISTRY_HOSTS = ("registry.npmjs.org", "pypi.org", "files.pythonhosted.org")
NO_PROXY = "env -u HTTPS_PROXY -u https_proxy -u HTTP_PROXY -u http_proxy"


@pytest.fixture(scope="module")
def world():
    needs_root()
    from fakenet import FakeInternet
    from fakenet.packages import build_npm_registry, build_python_index

    names = {"registry.npmjs.org": None, "files.pythonhosted.org": None,
             "api.anthropic.com": None}
    with FakeInternet(extra_names=names, catch_all=False) as net:
        registries = {
            "npm": build_npm_registry(net.site_dir("registry.npmjs.org"), packages=300),
            "python": build_python_index(net.site_dir("pypi.org"),
                                         net.site_dir("files.pythonhosted.org"), wheels=40),
        }
        yield net, registries


@pytest.fixture(scope="module")
def caged(world):
    """The claude-code scaffold's cage on a fake host, its registries granted to the agent."""
    from fakenet import FakeHost

    net, registries = world
    home = Path(tempfile.mkdtemp(prefix="agentcage-workload-"))
    os.chmod(home, 0o755)
    try:
        with FakeHost(net) as host:
            cli = OnHost(host, home)
            project = cli.create_from_scaffold(net, NAME, "claude-code")
            for registry in registries.values():
                registry.write_project(project)
            for path in project.iterdir():
                os.chown(path, AGENT_UID, AGENT_UID)
            for domain in REGISTRY_HOSTS:  # what the scaffold's CLAUDE.md tells the agent
                ask = json.dumps({"domain": domain, "reason": "install the project's "
                                  "dependencies", "ttl_seconds": 3600})
                r = cli("exec", NAME, "--", "curl", "-sS", "-X", "POST",
                        "https://agentcage.local/v1/allowlist/requests", "-d", ask)
                assert json.loads(r.stdout)["status"] == "granted", r.stdout + r.stderr
            yield cli, project
            cli.destroy_all()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def audit_since(cli: OnHost, started: float) -> list[dict]:
    path = cli.state / "cages" / NAME / "audit.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if r.get("ts", 0) >= started]


@pytest.mark.netns
@pytest.mark.parametrize("kind", ["npm", "python"])
@pytest.mark.parametrize("path", ["proxy", "transparent"])
def test_a_package_install_completes_with_nothing_refused_and_no_retry(world, caged, kind,
                                                                        path):
    net, registries = world
    cli, project = caged
    registry = registries[kind]
    registry.remove_install(project)
    net.reset_records()
    started = time.time()
    script = registry.install_script("/workspace")
    if path == "transparent":
        script = script.replace("&& ", f"&& {NO_PROXY} ", 1)
    r = cli("exec", NAME, "--", "sh", "-c", script, timeout=600)
    assert r.returncode == 0, (r.stdout[-2000:] + r.stderr[-2000:]
                               + json.dumps(watcher_findings(cli.state, NAME)))

    assert registry.installed(project) == set(registry.names)
    fetches = registry.fetches(net.http_requests())
    assert set(fetches) == set(registry.files), set(fetches) ^ set(registry.files)
    retried = {file: n for file, n in fetches.items() if n > 1}
    assert retried == {}  # npm retries a 429 or a failed request: none was needed

    records = audit_since(cli, started)
    # Every dropped packet counts, IPv6 too: a cage's links come up with IPv6 already off, so
    # not even the kernel's own neighbour discovery leaves it.
    refused = [x for x in records if x.get("decision") == "blocked" or x.get("status") == 429]
    assert refused == [], json.dumps(refused[:3])
    served = [x for x in records if x.get("direction") == "response"]
    assert len(served) == len(registry.files)
    assert watcher_findings(cli.state, NAME, since=started) == []  # no false alarm
    usage = json.loads(cli("watcher", "status", NAME, "--json").stdout)
    print(f"information in the window: {usage['information_bytes']} bytes")
    assert {x.get("outcome") for x in served} <= {"served"}, served[:3]
    if path == "transparent":  # each connection looked its name up in the cage
        lookups = [x for x in records if x.get("direction") == "dns"]
        assert lookups and all(x["decision"] == "allowed" for x in lookups)
        assert {x["host"] for x in lookups} <= set(REGISTRY_HOSTS)
