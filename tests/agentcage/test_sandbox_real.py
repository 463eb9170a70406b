"""The workload's layers, checked from inside a real cage (real bwrap, real namespaces)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentcage.errors import BackendError
from tests.agentcage.conftest import AGENT_UID, start_cage

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def cage(net):
    yield from start_cage(net, "layers", ["allowed.example.test"])


def status_field(cage, field: str) -> str:
    out = cage.sh(f"grep '^{field}:' /proc/self/status").stdout
    return out.split(":", 1)[1].strip()


def test_identity_is_uid_1000_mapped_to_a_real_unprivileged_host_uid(cage):
    assert cage.sh("id -u; id -g").stdout.split() == ["1000", "1000"]
    # seen from the host, every process of the cage runs as the real unprivileged uid
    import threading
    import time

    from agentcage.backends import host
    from agentcage.backends.netplan import NetPlan

    ns = NetPlan.from_dict(cage.runtime["plan"]).cage_ns
    worker = threading.Thread(target=cage.sh, args=("sleep 1.5",))
    worker.start()
    deadline = time.monotonic() + 1.0
    uids = set()
    while time.monotonic() < deadline:
        for pid in host.pids_in_netns(ns):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                argv0 = Path(f"/proc/{pid}/cmdline").read_text().split("\0")[0]
            except OSError:
                continue
            if argv0 == "sleep":
                uid_line = next(x for x in status.splitlines() if x.startswith("Uid:"))
                uids.update(int(u) for u in uid_line.split()[1:])
        if uids:
            break
        time.sleep(0.05)
    worker.join()
    assert uids == {AGENT_UID}


def test_no_capabilities_no_new_privs_seccomp(cage):
    for field in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
        assert int(status_field(cage, field), 16) == 0, field
    assert status_field(cage, "NoNewPrivs") == "1"
    assert status_field(cage, "Seccomp") == "2"


SYSCALLS = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, args in (("keyctl", 250, (0, -3)), ("add_key", 248, (0, 0, 0, 0, 0)),
                       ("request_key", 249, (0, 0, 0, 0)), ("io_uring_setup", 425, (1, 0)),
                       ("bpf", 321, (0, 0, 0)), ("getpid", 39, ())):
    rc = libc.syscall(nr, *args)
    print(name, errno.errorcode.get(ctypes.get_errno(), "OK") if rc < 0 else "OK")
"""


def test_seccomp_refuses_keyring_and_io_uring(cage):
    r = cage.sh(f"python3 -c '{SYSCALLS}'")
    results = dict(line.split() for line in r.stdout.splitlines())
    for name in ("keyctl", "add_key", "request_key", "io_uring_setup", "bpf"):
        assert results[name] == "EPERM", (name, r)
    assert results["getpid"] == "OK"  # control


def test_namespaces_pid_uts_ipc(cage):
    r = cage.sh("hostname; ls /proc | grep -c '^[0-9]'; readlink /proc/1/exe || echo hidden")
    lines = r.stdout.split()
    assert lines[0] == "cage-layers"
    assert int(lines[1]) < 10  # only the sandbox's own processes
    for ns in ("pid", "ipc", "uts", "net", "user"):
        inside = cage.sh(f"readlink /proc/self/ns/{ns}").stdout.strip()
        assert inside != os.readlink(f"/proc/self/ns/{ns}"), ns


def test_root_is_read_only_and_workspace_writable(cage):
    r = cage.sh("touch /usr/x 2>/dev/null && echo usr-writable; touch /etc/x 2>/dev/null && "
                "echo etc-writable; touch /tmp/x && echo tmp-ok; "
                "echo hi > /workspace/made-in-cage && echo ws-ok")
    assert r.stdout.split() == ["tmp-ok", "ws-ok"]
    made = cage.project / "made-in-cage"
    assert made.read_text() == "hi\n"
    assert made.stat().st_uid == AGENT_UID  # a real unprivileged uid on the host, not root


def test_host_secrets_are_not_readable(cage):
    r = cage.sh("cat /etc/shadow >/dev/null 2>&1 && echo shadow; ls /root >/dev/null 2>&1 && "
                "echo root; ls /sys/class/net 2>/dev/null | head -1; echo end")
    assert r.stdout.split() == ["end"]


def test_pivot_masks_hide_hooks_and_claude_and_never_create(cage):
    r = cage.sh("ls -A /workspace/.git/hooks | wc -l; ls -A /workspace/.claude | wc -l; "
                "echo evil > /workspace/.git/hooks/post-checkout; "
                "echo evil > /workspace/.claude/settings.json; "
                "printf '[core]\\nhooksPath=/workspace/h\\n' >> /workspace/.git/config "
                "2>/dev/null || echo config-ro")
    assert r.stdout.split() == ["0", "0", "config-ro"]
    assert sorted(os.listdir(cage.project / ".git" / "hooks")) == ["pre-commit"]
    assert (cage.project / ".claude" / "settings.json").read_text() == "{}\n"
    assert "hooksPath" not in (cage.project / ".git" / "config").read_text()


def test_environment_trusts_the_cage_ca_and_sets_the_proxy(cage, monkeypatch):
    monkeypatch.setenv("HOST_SECRET_TOKEN", "do-not-leak")
    r = cage.sh("env")
    env = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    assert "HOST_SECRET_TOKEN" not in env
    assert env["HTTPS_PROXY"] == f"http://{cage.gateway_address}:8080"
    for key in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"):
        assert key in env
    ca = cage.cage.ca_cert.read_text().strip()
    assert ca in cage.sh("cat $SSL_CERT_FILE").stdout
    assert ca in cage.sh("cat /etc/ssl/certs/ca-certificates.crt").stdout
    assert cage.sh("cat $NODE_EXTRA_CA_CERTS").stdout.strip() == ca
    assert cage.sh("cat $npm_config_cafile").stdout.strip() == ca  # npm's own setting
    # the CA private key never enters the cage
    assert "PRIVATE KEY" not in cage.sh("cat $SSL_CERT_FILE $NODE_EXTRA_CA_CERTS").stdout
    ok = cage.sh("python3 -c \"import urllib.request as u; "
                 "print(u.urlopen('https://allowed.example.test/').status)\"")
    assert ok.stdout.strip() == "200", ok


def test_session_keyring_is_not_the_callers(cage):
    # The caller (root here) has keys and keyrings; /proc/keys lists only what the process
    # may view. Seen from the cage: nothing of uid 0, and no key at all, only keyrings of the
    # cage's own host uid (its user keyrings exist once any process of that uid made them).
    import secrets
    import subprocess

    canary = f"agentcage-test-{secrets.token_hex(4)}"
    key_id = subprocess.run(["keyctl", "add", "user", canary, "x", "@u"], capture_output=True,
                            text=True, check=True).stdout.strip()
    try:
        assert canary in Path("/proc/keys").read_text()  # control: the caller sees its key
        r = cage.sh("cat /proc/keys")
        assert r.returncode == 0
        host_uid = str(cage.service.backend.meta(cage.cage).host_uid)
        assert canary not in r.stdout
        for line in r.stdout.splitlines():
            fields = line.split()
            assert fields[5] == host_uid and fields[7] == "keyring", line
    finally:
        subprocess.run(["keyctl", "unlink", key_id, "@u"], capture_output=True)


def test_a_layer_that_cannot_be_applied_refuses_to_run(cage, tmp_path):
    # the agent uid cannot reach the project: bwrap fails, nothing runs, a clear error
    meta_path = cage.cage.root / "meta.json"
    original = meta_path.read_text()
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    marker = hidden / "ran"
    import json

    meta = json.loads(original)
    meta["volumes"] = [[str(hidden), "/workspace", "rw"]]
    meta_path.write_text(json.dumps(meta))
    try:
        with pytest.raises(BackendError, match="could not be set up"):
            cage.sh("touch /workspace/ran")
        assert not marker.exists()
    finally:
        meta_path.write_text(original)
    assert cage.sh("true").returncode == 0  # control


def test_a_gated_command_runs_only_once_released(cage):
    """`run` makes the sandbox while the gateway starts: the command waits behind the proof
    that the sandbox is complete, and never runs unless let go."""
    import select
    import time

    from agentcage.backends import workload

    target = workload.running_target(cage.cage)
    marker = cage.project / "gated-ran"
    command = ["/bin/sh", "-c", "touch /workspace/gated-ran"]
    held = workload.start(target, command, False, capture=True, gated=True)
    ready, _, _ = select.select([held.started], [], [], 30)
    assert ready, "the sandbox never completed"  # the proof is there, the command is not
    time.sleep(0.3)
    assert held.proc.poll() is None and not marker.exists()
    held.abort()
    assert held.proc.returncode is not None and not marker.exists()
    # the control: let go, it runs
    released = workload.start(target, command, False, capture=True, gated=True)
    released.release()
    assert released.wait(timeout=30).returncode == 0 and marker.exists()
    marker.unlink()
