"""Rootless cages: the CLI run by an ordinary user (uid 1000, no supplementary group, no
capability, no sudo) on a host played by a namespace (fakenet.FakeHost), in the fake internet.

The user's cages live in a user namespace of theirs, their uplink through slirp4netns; the
tests check what a user meets (a scaffold cage made, run, measured and destroyed as they would),
what the cage must never reach (the host's loopback, the host's own addresses), and what is
refused in one line (limits that no delegated cgroup lets them enforce).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.agentcage.conftest import AGENT_UID, needs_root
from tests.agentcage.hosted import AsUser, delegated_cgroups, open_to_users

USER = AGENT_UID  # the project's owner and the one who makes the cage
CURL = "curl -sS -m 10 -o /dev/null -w '%{http_code}'"
SLIRP_HOST = "10.0.2.2"  # slirp4netns's address for the host, its loopback when not disabled


@pytest.fixture(scope="module")
def world():
    needs_root()
    from fakenet import FakeInternet

    names = {"selfhost.example.test": None, "api.anthropic.com": None}
    with FakeInternet(extra_names=names, catch_all=False) as net:
        yield net


@pytest.fixture
def user(world):
    """The user at the fake host, with a home of their own."""
    from fakenet import FakeHost

    home = Path(tempfile.mkdtemp(prefix="agentcage-rootless-"))
    os.chmod(home, 0o755)
    try:
        with FakeHost(world) as host:
            open_to_users(host)
            cli = AsUser(host, home, USER, world)
            try:
                yield cli
            finally:
                cli.destroy_all()
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def delegated():
    with delegated_cgroups(USER) as parents:
        yield parents


def runtime(cli: AsUser, name: str) -> dict:
    return json.loads((cli.state / "cages" / name / "runtime.json").read_text())


def owner_of(cli: AsUser, pid: int) -> int:
    """The real uid of a process of the fake host (its pid there)."""
    r = cli.sh(f"grep '^Uid:' /proc/{pid}/status")
    assert r.returncode == 0, r.stderr
    return int(r.stdout.split()[1])


@pytest.mark.netns
def test_doctor_as_a_user_says_the_cages_are_rootless(user):
    r = user("doctor")
    assert f"rootless (uid {USER})" in r.stdout and "slirp4netns" in r.stdout, r.stdout
    assert "resource limits" in r.stdout


@pytest.mark.netns
def test_limits_no_cgroup_lets_the_user_enforce_are_refused_in_one_line(user, world):
    r = user("init", "lim", "--scaffold", "claude-code", "-o", "lim.yaml")
    assert r.returncode == 0, r.stderr
    project = user.home / "lim"
    project.mkdir()
    os.chown(project, USER, USER)
    r = user("cage", "create", "-c", "lim.yaml", "--project", str(project),
             "--upstream-ca", str(user.ca_path))
    assert r.returncode == 1
    [line] = r.stderr.strip().splitlines()
    assert "rootless cage cannot enforce memory, pids, cpu" in line, line
    assert "limits: none" in line and f"chown -R {USER}" in line, line
    assert not (user.state / "cages" / "lim" / "runtime.json").exists() or \
        runtime(user, "lim").get("status") != "running"
    # said outright, no limit at all is accepted, and shows in what the cage is
    text = (user.home / "lim.yaml").read_text().replace(
        "  limits:\n    memory: 4g", "  limits: none\n  old_limits:\n    memory: 4g")
    (user.home / "lim.yaml").write_text("\n".join(
        line for line in text.splitlines()
        if not line.startswith(("  old_limits:", "    memory:", "    pids:", "    cpu:"))))
    r = user("cage", "create", "-c", "lim.yaml", "--project", str(project),
             "--trust-network", "10.200.0.0/16", "--upstream-ca", str(user.ca_path))
    assert r.returncode == 0, r.stderr
    assert runtime(user, "lim")["limits"] == {"memory_bytes": None, "pids": None, "cpus": None}


@pytest.mark.netns
def test_a_rootless_scaffold_cage_runs_as_the_user_and_verify_scores_it_at_most_8(
        user, world, delegated):
    name = "rl-claude"
    project = user.create_from_scaffold(world, name, "claude-code")
    state = runtime(user, name)
    assert state["status"] == "running"
    listed = user("ls").stdout.splitlines()  # from outside the cages' namespaces
    assert any(line.split()[::2] == ["running", name] for line in listed), listed
    # every process of the cage is the user's on the host: the gateway, and the workload
    assert owner_of(user, state["gateway_pid"]) == USER
    r = user("exec", name, "--", "sh", "-c", "id -u; cat /proc/self/status | grep CapEff; "
             "touch /workspace/made-here; curl -sS -m 10 -o /dev/null -w '%{http_code}' "
             "https://api.anthropic.com/")
    assert r.returncode == 0, r.stderr
    uid, caps, code = r.stdout.split("\n", 2)
    assert uid == "1000" and caps.split()[1] == "0000000000000000" and code.strip() == "200"
    assert (project / "made-here").stat().st_uid == USER  # the user's own uid, on the host
    # the limits are enforced in the cgroup delegated to the user
    cage_cgroups = state["cgroups"]
    assert cage_cgroups and all(str(d).startswith(tuple(map(str, delegated)))
                                for d in cage_cgroups)
    memory = [Path(d) for d in cage_cgroups if "memory" in d or Path(d, "memory.max").exists()]
    limit = (memory[0] / "memory.limit_in_bytes") if (memory[0] / "memory.limit_in_bytes") \
        .exists() else memory[0] / "memory.max"
    assert int(limit.read_text()) == 4 * 1024**3
    r = user("verify", name, "--max-score", "8", "--out", str(user.home / "reports"),
             timeout=180)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    report = json.loads((user.home / "reports" / f"cage-{name}.json").read_text())
    scored = {f["id"] for f in report["summary"]["findings"] if f["severity"] != "info"}
    assert scored == {"FS-003"}, report["summary"]["findings"]
    assert all(a["state"] != "not_measured" for a in report["summary"]["axes"].values())
    # looked into, changing nothing: the namespace's root, but with no capability
    r = user("gateway", "exec", name, "--", "sh", "-c", "grep CapEff /proc/self/status; "
             "ip -br addr; nft flush ruleset && echo FLUSHED")
    assert r.stdout.split()[1] == "0000000000000000" and "cage0" in r.stdout, r.stdout
    assert "FLUSHED" not in r.stdout
    assert "policy drop" in user("gateway", "firewall", name).stdout
    # stopped and started again, as root's cages are
    assert user("stop", name).returncode == 0
    assert user("start", name).returncode == 0
    assert user("exec", name, "--", "true").returncode == 0
    r = user("destroy", "-y", name)
    assert r.returncode == 0, r.stderr
    assert not any(Path(d).exists() for d in cage_cgroups)
    # no cage left running: prune ends the holder, its keeper and slirp4netns
    holder = json.loads((user.state / "rootless" / "holder.json").read_text())
    r = user("prune", "-y")
    assert r.returncode == 0 and "the rootless cages' holder" in r.stdout, r.stdout + r.stderr
    assert not (user.state / "rootless" / "holder.json").exists()
    for pid in (holder["keeper"], holder["holder"], holder["slirp"]):
        # gone, or a zombie (the fake host's init, a sleep, reaps nothing): prune signals them
        # and returns; each one's exit may land a moment later
        check = f"test ! -e /proc/{pid} || grep -q '^State:.*Z' /proc/{pid}/status"
        gone = user.sh(f"for i in $(seq 50); do {check} && exit 0; sleep 0.1; done; exit 1")
        assert gone.returncode == 0, pid


@pytest.mark.netns
def test_the_hosts_loopback_and_own_addresses_stay_out_of_reach(user, world):
    self_address = world.address_of("selfhost.example.test")
    # the host has that address too (as a host may have any address): it is local there
    assert user.sh(f"ip addr add {self_address}/32 dev lo").returncode == 0
    listeners = []
    for address in ("127.0.0.1", self_address):
        listener = user.host.popen(
            [sys.executable, "-c",
             "import socket,sys\ns=socket.create_server((sys.argv[1], 443))\n"
             "print('up', flush=True)\nc,_=s.accept(); print('ACCEPTED', flush=True)",
             address], stdout=subprocess.PIPE, text=True, start_new_session=True)
        listeners.append(listener)
        assert listener.stdout.readline().strip() == "up"
    try:
        config = user.home / "reach.yaml"
        config.write_text(
            "name: reach\ncontainer: {limits: none}\n"
            "domains: {mode: allowlist, allow: [selfhost.example.test, api.anthropic.com]}\n"
            # trusted, so that only the host check stands between the cage and it
            "gateway: {trusted_networks: [10.200.0.0/16], upstream_ca_files: "
            f"['{user.ca_path}']}}\n")
        project = user.home / "reach"
        project.mkdir()
        os.chown(project, USER, USER)
        r = user("cage", "create", "-c", str(config), "--project", str(project))
        assert r.returncode == 0, r.stderr
        r = user("exec", "reach", "--", "sh", "-c",
                 f"{CURL} https://selfhost.example.test/; echo; "
                 f"{CURL} https://api.anthropic.com/")
        own, control = r.stdout.split()
        assert own in ("502", "403"), r.stdout
        assert control == "200", r.stdout  # the internet is reached, through slirp4netns
        audit = [json.loads(line) for line in
                 (user.state / "cages" / "reach" / "audit.jsonl").read_text().splitlines()]
        refusals = [a for a in audit if a.get("direction") == "upstream"
                    and a.get("host") == "selfhost.example.test"]
        assert refusals and "local on the host" in refusals[0]["reason"], refusals
        # the uplink itself (slirp4netns's network, where the gateways' upstream sockets are
        # made) does not lead to the host's loopback: what slirp4netns would map there, its
        # address for the host, is refused, as the user who owns it
        holder = json.loads((user.state / "rootless" / "holder.json").read_text())["holder"]
        probe = ("import socket, sys\nfor address in sys.argv[1:]:\n try:\n"
                 "  socket.create_connection((address, 443), timeout=5).close()\n"
                 "  print('connected')\n except OSError as e:\n  print(e.errno)")
        r = user.host.run(["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups",
                           "--", "nsenter", "--preserve-credentials", "-U", "-n", "-t",
                           str(holder), "--", sys.executable, "-c", probe, SLIRP_HOST,
                           world.address_of("api.anthropic.com")],
                          capture_output=True, text=True, timeout=30)
        loopback, control = r.stdout.split()
        assert loopback in (str(errno.ECONNREFUSED), str(errno.ENETUNREACH)), r.stdout
        assert control == "connected", r.stdout + r.stderr  # the uplink does reach out
    finally:
        for listener in listeners:
            os.killpg(listener.pid, signal.SIGKILL)
    for listener in listeners:
        out, _ = listener.communicate(timeout=10)
        assert "ACCEPTED" not in out  # nothing ever connected to the host's own services
