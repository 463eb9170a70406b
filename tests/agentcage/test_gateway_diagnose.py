"""`agentcage gateway status|logs|firewall|exec NAME`: looking into a running cage's gateway
through the CLI, and proof that what runs there can read but change nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agentcage.conftest import start_cage

AGENTCAGE = str(Path(sys.executable).with_name("agentcage"))


@pytest.fixture(scope="module")
def caged(net):
    yield from start_cage(net, "looked-at", ["api.example.test"])


def cli(cage, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "AGENTCAGE_HOME": str(cage.service.store.root),
           "LANG": "C.UTF-8"}
    return subprocess.run([AGENTCAGE, "gateway", *args], env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.netns
def test_status_names_the_gateways_process_namespaces_and_addresses(caged):
    r = cli(caged, "status", caged.name, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "gateway" and doc["status"] == "running" and doc["mode"] == "root"
    assert doc["gateway_address"] == caged.gateway_address
    assert doc["pid"] == caged.runtime["gateway_pid"]
    assert doc["gateway_namespace"] in os.listdir("/run/netns")
    text = cli(caged, "status", caged.name).stdout
    assert f"{caged.gateway_address} (gateway)" in text and "rate limit:" in text
    assert all(len(line) <= 80 or line.startswith(("log:", "audit:"))
               for line in text.splitlines())


@pytest.mark.netns
def test_logs_and_firewall_are_read(caged):
    r = cli(caged, "logs", caged.name, "-n", "5")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) <= 5
    r = cli(caged, "firewall", caged.name)
    assert r.returncode == 0 and "table" in r.stdout and "policy drop" in r.stdout, r.stdout


@pytest.mark.netns
def test_exec_in_the_gateways_namespace_reads_and_changes_nothing(caged):
    r = cli(caged, "exec", caged.name, "--", "ip", "-br", "addr")
    assert r.returncode == 0, r.stderr
    assert caged.gateway_address in r.stdout and "cage0" in r.stdout  # its namespace, not ours
    r = cli(caged, "exec", caged.name, "--", "sh", "-c", "id -u; grep CapEff /proc/self/status")
    uid, caps = r.stdout.split("\n", 1)
    assert uid == "65534" and caps.split()[1] == "0000000000000000"
    before = cli(caged, "firewall", caged.name).stdout
    for change in (["nft", "flush", "ruleset"], ["ip", "addr", "flush", "dev", "cage0"],
                   ["ip", "route", "add", "default", "dev", "cage0"]):
        r = cli(caged, "exec", caged.name, "--", *change)
        assert r.returncode != 0, change  # refused by the kernel: no capability
    assert cli(caged, "firewall", caged.name).stdout == before
    r = cli(caged, "exec", caged.name, "--", "ip", "-br", "addr")
    assert caged.gateway_address in r.stdout
    # and the cage still works through it
    out = caged.service.exec_capture(caged.name, ["sh", "-c", "curl -sS -o /dev/null -w "
                                                  "'%{http_code}' https://api.example.test/"])
    assert out.stdout == "200", out.stdout + out.stderr


@pytest.mark.netns
def test_a_cage_that_is_not_running_is_refused_in_one_line(caged):
    r = cli(caged, "status", "nope")
    assert r.returncode == 1 and "no cage named 'nope'" in r.stderr
    r = cli(caged, "exec", caged.name)
    assert r.returncode != 0  # no command: click's usage error
