"""Baselines hold across real runs: a count that moves with host activity (processes running,
keys held) passes; a new kind of exposure (a readable credential, a reachable host, a readable
key where there was none) fails. Every run is the real probe in a network namespace of its own.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentsec import gate
from tests.probe.test_findings_real import FRESH_SESSION, SANDBOX, finding, measure

pytestmark = pytest.mark.netns
AGENTSEC = str(Path(sys.executable).parent / "agentsec")


def diff(tmp_path: Path, old: dict, new: dict) -> subprocess.CompletedProcess:
    """`agentsec diff` on the two reports, as CI would run it."""
    paths = []
    for name, report in (("old", old), ("new", new)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({k: v for k, v in report.items() if k != "_stdout"}))
        paths.append(str(path))
    return subprocess.run([AGENTSEC, "diff", *paths], capture_output=True, text=True, timeout=60)


def test_more_processes_on_the_host_do_not_fail_the_baseline(tmp_path):
    baseline = measure(("unshare", "--net", "--"))  # the host's pid namespace: PROC-001
    busy = [subprocess.Popen(["sleep", "60"]) for _ in range(25)]
    try:
        later = measure(("unshare", "--net", "--"))
    finally:
        for process in busy:
            process.kill()
            process.wait()
    before, after = finding(baseline, "PROC-001"), finding(later, "PROC-001")
    assert before["detail"] != after["detail"]  # the count moved (25 more processes)
    assert before["evidence"] == after["evidence"]
    result = diff(tmp_path, baseline, later)
    assert result.returncode == 0, result.stdout


def test_a_new_readable_credential_fails_the_baseline(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    wrapper = (*SANDBOX, "--tmpfs", "/home", "--bind", str(home), "/home/agent", "--")
    env = {"HOME": "/home/agent"}
    (home / ".netrc").write_text("machine example.test login a password p\n")
    baseline = measure(wrapper, env=env)
    (home / ".git-credentials").write_text("https://a:p@example.test\n")
    later = measure(wrapper, env=env)
    result = diff(tmp_path, baseline, later)
    assert result.returncode == 2
    assert "SEC-003: evidence widened: ~/.git-credentials" in result.stdout


def keys_then_run(count: int) -> tuple[str, ...]:
    adds = " && ".join(
        f"keyctl add user agentsec-test-{i} {secrets.token_hex(8)} @s >/dev/null"
        for i in range(count)
    ) or "true"
    return (*FRESH_SESSION, "sh", "-c", adds + ' && exec "$@"', "sh", *SANDBOX, "--")


def test_more_keys_of_a_kind_already_readable_do_not_fail_the_baseline(tmp_path):
    baseline, later = measure(keys_then_run(1)), measure(keys_then_run(3))
    assert finding(baseline, "SEC-009")["detail"] != finding(later, "SEC-009")["detail"]
    result = diff(tmp_path, baseline, later)
    assert result.returncode == 0, result.stdout


def test_a_readable_key_where_there_was_none_fails_the_baseline(tmp_path):
    result = diff(tmp_path, measure(keys_then_run(0)), measure(keys_then_run(1)))
    assert result.returncode == 2
    assert "SEC-009" in result.stdout


def listener(netns: str, port: int) -> subprocess.Popen:
    """A TCP listener on loopback inside the test's own namespace, as a separate process."""
    code = ("import socket, sys, time\n"
            f"s = socket.create_server(('127.0.0.1', {port}))\n"
            "print('up', flush=True)\n"
            "time.sleep(120)\n")
    process = subprocess.Popen(["nsenter", f"--net=/run/netns/{netns}", sys.executable, "-c",
                                code], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "up"
    return process


def test_a_host_that_becomes_reachable_fails_the_baseline(tmp_path, local_services):
    late_port = 20000 + int.from_bytes(os.urandom(2), "big") % 10000
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({
        "egress": [f"127.0.0.1:{local_services.ports['tcp']}", f"127.0.0.1:{late_port}"],
        "metadata": [], "ipv6": [], "udp_dns": "127.0.0.1:9", "dns_control": "localhost",
        "interception_control": [],
    }))
    env = {"AGENTSEC_PROBE_TARGETS": str(targets)}
    baseline = measure(local_services.wrapper, env=env)
    assert finding(baseline, "NET-001")["evidence"] == [f"127.0.0.1:{local_services.ports['tcp']}"]
    again = measure(local_services.wrapper, env=env)
    assert diff(tmp_path, baseline, again).returncode == 0  # control: nothing changed, it passes
    server = listener(local_services.netns, late_port)
    try:
        later = measure(local_services.wrapper, env=env)
    finally:
        server.kill()
        server.wait()
    result = diff(tmp_path, baseline, later)
    assert result.returncode == 2
    assert f"NET-001: evidence widened: 127.0.0.1:{late_port}" in result.stdout


def test_detail_is_never_compared(tmp_path):
    """The gate compares evidence only: a report whose detail alone differs is unchanged."""
    report = measure(("unshare", "--net", "--"))
    changed = json.loads(json.dumps(report))
    for item in changed["summary"]["findings"]:
        item["detail"] = [f"{time.time()} things"]
    assert not gate.compare(report, changed).failed
