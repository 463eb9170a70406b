"""Findings that must be true in real sandboxes: each case where a finding used to be wrong,
measured in a real bubblewrap or namespace set-up, next to a control where the finding is true.

Every run goes through the real probe and the real scorer. Every probe run has a network
namespace of its own (bubblewrap --unshare-net or unshare --net), except the two runs that ask
only for the identity and filesystem sections, which send nothing at all.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from agentsec import service
from agentsec.report import Target
from agentsec.untrusted import parse_probe_output
from tests.probe.conftest import (
    AF_UNIX,
    X86_64_SYSCALLS,
    joining,
    launch_probe,
    require_namespaces,
    seccomp_filter,
)

pytestmark = pytest.mark.netns

SYSTEM_PYTHON = "/usr/bin/python3"  # readable by any uid and outside every mask used below
SANDBOX = ("bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
           "--tmpfs", "/tmp", "--unshare-net", "--die-with-parent")
DROP = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all")
AGENTSEC = str(Path(sys.executable).parent / "agentsec")


@pytest.fixture(autouse=True)
def _real_tools():
    require_namespaces()
    for tool in ("bwrap", "setpriv", "keyctl"):
        assert shutil.which(tool), f"{tool} is part of this machine's set-up (scripts/setup.sh)"


def measure(wrapper, env=None, **options) -> dict[str, Any]:
    """Run the real probe under wrapper and score it as agentsec does."""
    run = launch_probe(wrapper=tuple(wrapper), env=env, python=SYSTEM_PYTHON, via_stdin=True,
                       **options)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    report = service.score(parse_probe_output(run.stdout), label="t",
                           target=Target(kind="bwrap", how="test"), rc=0, redact=False)
    report["_stdout"] = run.stdout
    return report


def ids(report: dict[str, Any]) -> set[str]:
    return {f["id"] for f in report["summary"]["findings"]}


def finding(report: dict[str, Any], finding_id: str) -> dict[str, Any]:
    return next(f for f in report["summary"]["findings"] if f["id"] == finding_id)


def data(report: dict[str, Any], section: str) -> dict[str, Any]:
    result = report["probe"]["output"]["sections"][section]
    assert result["ok"], result
    return result["data"]


def axis(report: dict[str, Any], name: str) -> str:
    return report["summary"]["axes"][name]["state"]


def canary() -> str:
    return "canary-" + secrets.token_hex(16)


# --- SEC-004 / SEC-008: the sandbox's own helpers are not foreign processes ------------------


def test_pid1_that_is_the_sandboxs_own_init_with_the_same_environment_is_not_a_leak():
    report = measure((*SANDBOX, "--unshare-pid", "--"))
    proc = data(report, "proc_environ")
    assert proc["pid1_environ_readable"] is True  # the probe did read it
    assert proc["pid1_holds_more"] is False
    assert data(report, "processes")["pid1_comm"] == "bwrap"
    assert "SEC-004" not in ids(report)


def test_pid1_that_kept_the_environment_cleared_for_the_sandbox_is_a_leak():
    secret = canary()
    report = measure(
        (*SANDBOX, "--unshare-pid", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--"),
        env={"AGENTSEC_TEST_API_TOKEN": secret},
    )
    sec = finding(report, "SEC-004")
    assert "PID 1 holds AGENTSEC_TEST_API_TOKEN" in sec["evidence"]
    assert secret not in report["_stdout"] and secret not in json.dumps(report)


def test_pid1_whose_only_difference_is_an_adjusted_path_is_not_a_leak():
    # Codex's wrapper prepends its own directory to PATH for the command it starts.
    report = measure((*SANDBOX, "--unshare-pid", "--setenv", "PATH", "/opt/wrapper:/usr/bin:/bin",
                      "--"))
    assert data(report, "proc_environ")["pid1_holds_more"] is False
    assert "SEC-004" not in ids(report)


def test_pid1_that_kept_a_key_the_sandbox_got_as_a_decoy_is_a_leak():
    secret = canary()
    report = measure((*SANDBOX, "--unshare-pid", "--setenv", "AGENTSEC_TEST_API_TOKEN", "decoy",
                      "--"), env={"AGENTSEC_TEST_API_TOKEN": secret})
    assert "PID 1 holds AGENTSEC_TEST_API_TOKEN" in finding(report, "SEC-004")["evidence"]
    assert secret not in report["_stdout"]


def test_a_helper_process_with_the_same_environment_is_not_a_leak():
    # The subshell exits at once, so the helper is bwrap's child, not the probe's.
    helper = "(sleep 30 &); exec \"$@\""
    report = measure((*SANDBOX, "--unshare-pid", "--", "sh", "-c", helper, "sh"))
    proc = data(report, "proc_environ")
    assert proc["others_readable"] >= 1  # the helper was there and its environment was read
    assert proc["others_holding_more"] == 0
    assert "SEC-008" not in ids(report)


def test_a_process_holding_a_variable_the_probe_lacks_is_a_leak():
    secret = canary()
    helper = f"(env AGENTSEC_TEST_API_TOKEN={secret} sleep 30 &); exec \"$@\""
    report = measure((*SANDBOX, "--unshare-pid", "--", "sh", "-c", helper, "sh"))
    sec = finding(report, "SEC-008")
    assert "another process holds AGENTSEC_TEST_API_TOKEN" in sec["evidence"]
    assert secret not in report["_stdout"]


# --- FS-009: sysctls of the sandbox's own namespaces ---------------------------------------


def test_hostname_and_net_sysctls_of_the_sandboxs_own_namespaces_are_not_host_writes():
    # Started by root, the sandbox's uid 0 is host root: the kernel lets it open every sysctl.
    report = measure(("bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev",
                      "--proc", "/proc", "--tmpfs", "/tmp", "--die-with-parent", "--"))
    writable = data(report, "filesystem")["proc_sys_writable"]
    assert {"/proc/sys/kernel/hostname", "/proc/sys/net/ipv4/ip_forward"} <= set(writable)
    assert data(report, "identity")["own_namespaces"]["uts"] is True
    assert data(report, "identity")["own_namespaces"]["net"] is True
    assert "FS-009" not in ids(report)
    assert "FS-008" in ids(report)  # core_pattern is not namespaced: that one is the host's


def test_the_hosts_hostname_is_a_host_write():
    report = measure(("unshare", "--net", "--"))  # root, the host's UTS namespace
    assert data(report, "identity")["own_namespaces"]["uts"] is False
    assert finding(report, "FS-009")["evidence"] == ["/proc/sys/kernel/hostname"]


def test_the_initial_network_namespaces_sysctls_are_host_writes():
    # Only the identity and filesystem sections run: nothing is sent from the host's namespace.
    report = measure((), env={"AGENTSEC_PROBE_ONLY": "identity,filesystem"})
    assert set(report["probe"]["output"]["sections"]) == {"identity", "filesystem"}
    assert data(report, "identity")["own_namespaces"]["net"] is False
    assert "/proc/sys/net/ipv4/ip_forward" in finding(report, "FS-009")["evidence"]


# --- RES-001: limits seen from inside a cgroup namespace ------------------------------------


def test_a_limit_is_found_from_inside_a_cgroup_namespace(limited_cgroups):
    report = measure((*joining(limited_cgroups), *SANDBOX, "--unshare-cgroup", "--"))
    assert data(report, "resources")["memory_limit"] == 512 << 20
    assert data(report, "resources")["pids_limit"] == 256
    assert "RES-001" not in ids(report)


def test_no_limit_inside_a_cgroup_namespace_is_still_found(unlimited_cgroups):
    report = measure((*joining(unlimited_cgroups), *SANDBOX, "--unshare-cgroup", "--"))
    assert data(report, "resources")["cgroup_found"] == {"memory": True, "pids": True}
    assert "RES-001" in ids(report)


def test_a_cgroup_out_of_sight_is_not_measured_rather_than_unlimited(limited_cgroups,
                                                                      unlimited_cgroups):
    # The sandbox sees only a sibling cgroup (bound over each controller's mount): the one
    # holding the probe, and its limit, are out of sight. "No limit" would be a guess.
    binds = []
    for sibling in unlimited_cgroups:
        mountpoint = "/sys/fs/cgroup/" + os.path.relpath(sibling, "/sys/fs/cgroup").split("/")[0]
        binds += ["--ro-bind", sibling, mountpoint]
    report = measure((*joining(limited_cgroups), *SANDBOX, *binds, "--"))
    assert data(report, "resources")["cgroup_found"] == {"memory": False, "pids": False}
    assert "RES-001" not in ids(report)
    assert axis(report, "resources") == "not_measured"


def test_no_cgroup_filesystem_at_all_is_said_in_the_finding():
    report = measure(("bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
                      "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
                      "--proc", "/proc", "--dev", "/dev", "--unshare-all", "--"))
    assert data(report, "resources")["cgroup_found"] == {"memory": None, "pids": None}
    res = finding(report, "RES-001")
    assert any("no cgroup filesystem" in line for line in res["detail"])


# --- FS-001: a tmpfs mask is not a host write -----------------------------------------------


def test_an_empty_tmpfs_over_a_system_directory_is_not_a_host_write():
    report = measure((*SANDBOX, "--tmpfs", "/root", "--tmpfs", "/opt", "--"))
    writable = {e["path"]: e for e in data(report, "filesystem")["writable_dirs"]}
    assert writable["/root"]["writable"] is True and writable["/root"]["scratch_mount"] is True
    assert "FS-001" not in ids(report)


def test_a_host_directory_bound_writable_over_a_system_directory_is_a_host_write(tmp_path):
    host_dir = tmp_path / "opt"
    host_dir.mkdir()
    report = measure((*SANDBOX, "--tmpfs", "/root", "--bind", str(host_dir), "/opt", "--"))
    assert finding(report, "FS-001")["evidence"] == ["/opt"]
    assert list(host_dir.iterdir()) == []  # the marker was removed


def test_the_hosts_tmpfs_bound_over_a_system_directory_is_a_host_write():
    # The host's /dev/shm is a tmpfs too, but it is also mounted at /dev/shm: shared, not a mask.
    report = measure((*SANDBOX, "--bind", "/dev/shm", "/opt", "--"))
    assert "/opt" in finding(report, "FS-001")["evidence"]


# --- FS-003: a read-write host mount is a finding where a write lands ------------------------


@pytest.fixture
def host_dir():
    """A root-owned directory any uid can reach (pytest's own tmp is root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="agentsec-mount-", dir="/var/tmp"))
    base.chmod(0o755)
    data_dir = base / "data"
    data_dir.mkdir(mode=0o755)
    try:
        yield data_dir
    finally:
        shutil.rmtree(base)


def test_a_read_write_host_mount_the_sandbox_user_cannot_write_is_not_a_finding(host_dir):
    data_dir = host_dir  # root's, mode 755: mounted read-write, but not for uid 65534
    report = measure((*DROP, *SANDBOX, "--tmpfs", "/opt", "--bind", str(data_dir), "/opt/data",
                      "--"))
    mounts = {m["mountpoint"]: m for m in data(report, "filesystem")["host_mounts"]}
    assert mounts["/opt/data"]["rw"] is True and mounts["/opt/data"]["writable"] is False
    assert "/opt/data" not in (finding(report, "FS-003")["evidence"]
                               if "FS-003" in ids(report) else [])


def test_a_read_write_host_mount_the_sandbox_user_can_write_is_a_finding(host_dir):
    data_dir = host_dir
    data_dir.chmod(0o777)
    report = measure((*DROP, *SANDBOX, "--tmpfs", "/opt", "--bind", str(data_dir), "/opt/data",
                      "--"))
    assert "/opt/data" in finding(report, "FS-003")["evidence"]
    assert list(data_dir.iterdir()) == []  # the marker was removed


# --- SEC-009: keys, not keyrings ------------------------------------------------------------

# `keyctl session -` starts the command in a fresh session keyring; it says so on stderr, which
# is kept apart from the probe's (which must stay empty).
FRESH_SESSION = ("sh", "-c", 'exec 3>&2 2>/dev/null; exec keyctl session - sh -c '
                 '\'exec 2>&3 3>&-; exec "$@"\' sh "$@"', "sh")


def test_an_empty_fresh_session_keyring_is_not_a_finding():
    report = measure((*FRESH_SESSION, *SANDBOX, "--"))
    keyring = data(report, "keyring")
    assert keyring["session_keyring"] == "accessible"
    assert keyring["visible_keys"] > 0  # /proc/keys lists keyrings: what used to be counted
    assert keyring["readable_keys"] == 0
    assert "SEC-009" not in ids(report)


def test_a_readable_key_in_the_session_keyring_is_a_finding():
    secret = canary()
    add = f'keyctl add user agentsec-test {secret} @s >/dev/null && exec "$@"'
    report = measure((*FRESH_SESSION, "sh", "-c", add, "sh", *SANDBOX, "--"))
    assert finding(report, "SEC-009")["evidence"] == ["readable user keys in reach"]
    assert secret not in report["_stdout"]


@pytest.mark.parametrize("keys", [0, 1])
def test_keys_are_still_counted_where_proc_keys_is_masked(keys):
    # Container runtimes bind /dev/null over /proc/keys; the walk then starts from the keyrings
    # the process holds, and the secrets axis stays measured either way.
    add = (f"keyctl add user agentsec-test {canary()} @s >/dev/null && " if keys else "")
    report = measure((*FRESH_SESSION, "sh", "-c", add + 'exec "$@"', "sh", *SANDBOX,
                      "--ro-bind", "/dev/null", "/proc/keys", "--"))
    assert data(report, "keyring")["readable_keys"] == keys
    assert ("SEC-009" in ids(report)) is bool(keys)
    assert axis(report, "secrets") != "not_measured"


# --- SEC-006: a blanket refusal of unix sockets is not a path rule --------------------------

needs_x86_64 = pytest.mark.skipif(platform.machine() != "x86_64",
                                  reason="the seccomp filters here use x86_64 numbers")


def no_unix_sockets():
    """A seccomp filter refusing socket(AF_UNIX, ...), as srt's and Codex's do."""
    return seccomp_filter([(X86_64_SYSCALLS["socket"], errno.EPERM, AF_UNIX)])


def measure_with_filter(program: bytes, wrapper_tail, **options) -> dict[str, Any]:
    with tempfile.TemporaryFile() as handle:
        handle.write(program)
        handle.seek(0)
        fd = handle.fileno()
        return measure((*SANDBOX, "--seccomp", str(fd), *wrapper_tail), pass_fds=(fd,),
                       **options)


# /var/run is a link to /run: the probe names whichever path of the two it tried first.
DOCKER_SOCKET = {"/run/docker.sock", "/var/run/docker.sock"}


@pytest.fixture
def runtime_socket(tmp_path):
    """A listening unix socket standing in for a container runtime's."""
    path = tmp_path / "runtime.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)
    try:
        yield path
    finally:
        server.close()


@needs_x86_64
def test_runtime_sockets_that_do_not_exist_are_absent_under_a_blanket_refusal():
    report = measure_with_filter(no_unix_sockets(), ("--",))
    sockets = data(report, "sockets")
    assert sockets["control"]["own_socket"] == "denied"  # the blanket refusal was in force
    assert {r["result"] for r in sockets["runtime"]} == {"absent"}
    assert "SEC-006" not in ids(report)


@needs_x86_64
def test_a_runtime_socket_that_exists_under_a_blanket_refusal_is_present_but_refused(
    runtime_socket,
):
    report = measure_with_filter(
        no_unix_sockets(), ("--tmpfs", "/run", "--bind", str(runtime_socket), "/run/docker.sock",
                            "--"))
    evidence = finding(report, "SEC-006")["evidence"]
    assert DOCKER_SOCKET & set(evidence)
    assert any("blanket" in item for item in evidence)


def test_a_runtime_socket_without_a_filter_connects(runtime_socket):
    report = measure((*SANDBOX, "--tmpfs", "/run", "--bind", str(runtime_socket),
                      "/run/docker.sock", "--"))
    assert DOCKER_SOCKET & set(finding(report, "SEC-001")["evidence"])


# --- SEC-002: the sandbox's own proxy password is not a secret from outside ------------------


def test_the_password_of_the_sandboxs_own_proxy_is_not_a_secret():
    # srt hands the sandbox its proxy's credentials in the proxy URLs and again, for gcloud, as
    # CLOUDSDK_PROXY_PASSWORD: they open that proxy, which the proxy variables already open.
    password = canary()
    report = measure((*SANDBOX, "--"), env={
        "HTTPS_PROXY": f"http://sandbox:{password}@127.0.0.1:9",
        "CLOUDSDK_PROXY_PASSWORD": password,
    })
    names = {n["name"]: n for n in data(report, "secrets_env")["names"]}
    assert names["CLOUDSDK_PROXY_PASSWORD"]["proxy_credential"] is True
    assert "SEC-002" not in ids(report)
    assert password not in report["_stdout"]


def test_another_password_beside_the_proxys_is_a_secret():
    report = measure((*SANDBOX, "--"), env={
        "HTTPS_PROXY": f"http://sandbox:{canary()}@127.0.0.1:9",
        "CLOUDSDK_PROXY_PASSWORD": canary(),
    })
    assert finding(report, "SEC-002")["evidence"] == ["CLOUDSDK_PROXY_PASSWORD"]


# --- SEC-003: configuration is not a credential ---------------------------------------------


def home_with(tmp_path: Path, files: dict[str, str]) -> Path:
    home = tmp_path / "home"
    for name, text in files.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    return home


def test_a_gitconfig_and_an_npmrc_without_a_token_are_not_credentials(tmp_path):
    home = home_with(tmp_path, {
        ".gitconfig": "[user]\n\tname = agent\n",
        ".npmrc": "registry=https://registry.npmjs.org/\n_authToken=${NPM_TOKEN}\n",
    })
    report = measure((*SANDBOX, "--tmpfs", "/home", "--bind", str(home), "/home/agent", "--"),
                     env={"HOME": "/home/agent"})
    files = {f["path"]: f for f in data(report, "credentials")["files"]}
    assert files["~/.npmrc"]["readable"] is True and files["~/.npmrc"]["holds_token"] is False
    assert "SEC-003" not in ids(report)
    assert "~/.gitconfig" in {t["path"] for t in data(report, "persistence")["targets"]}


def test_an_npmrc_with_a_token_and_git_credentials_are_credentials(tmp_path):
    token = canary()
    home = home_with(tmp_path, {
        ".gitconfig": "[user]\n\tname = agent\n",
        ".npmrc": f"//registry.npmjs.org/:_authToken={token}\n",
        ".git-credentials": f"https://agent:{token}@example.test\n",
    })
    report = measure((*SANDBOX, "--tmpfs", "/home", "--bind", str(home), "/home/agent", "--"),
                     env={"HOME": "/home/agent"})
    assert finding(report, "SEC-003")["evidence"] == ["~/.git-credentials", "~/.npmrc"]
    assert token not in report["_stdout"]


# --- SEC-010: Claude Code's ~/.claude.json is a login file when it holds a saved key --------


def test_a_claude_json_of_settings_is_no_login_file_and_one_with_a_key_is(tmp_path):
    bound, home_env = (*SANDBOX, "--tmpfs", "/home"), {"HOME": "/home/agent"}
    settings = '{"hasCompletedOnboarding": true, "primaryApiKey": null, ' \
               '"customApiKeyResponses": {"approved": ["0123456789abcdef0123"]}}'
    home = home_with(tmp_path / "a", {".claude.json": settings})
    report = measure((*bound, "--bind", str(home), "/home/agent", "--"), env=home_env)
    files = {f["path"]: f for f in data(report, "credentials")["files"]}
    assert files["~/.claude.json"]["readable"] is True  # the control: it was there to read
    assert files["~/.claude.json"]["holds_token"] is False
    assert "SEC-010" not in ids(report)

    key = "sk-ant-api03-" + canary()
    home = home_with(tmp_path / "b", {".claude.json": '{"theme": "dark", "primaryApiKey" : '
                                                       f'"{key}"}}'})
    report = measure((*bound, "--bind", str(home), "/home/agent", "--"), env=home_env)
    assert finding(report, "SEC-010")["evidence"] == ["~/.claude.json"]
    assert key not in report["_stdout"]


# --- PROC-001: a PID namespace of its own is not enough with the host's /proc ----------------


def test_own_pid_namespace_with_the_hosts_proc_shows_host_processes():
    report = measure(("bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--bind", "/proc",
                      "/proc", "--tmpfs", "/tmp", "--unshare-pid", "--unshare-net", "--"))
    processes = data(report, "processes")
    assert processes["own_pid_namespace"] is True and processes["proc_is_foreign"] is True
    assert "PROC-001" in ids(report)


def test_own_pid_namespace_with_its_own_proc_shows_none():
    report = measure((*SANDBOX, "--unshare-pid", "--"))
    assert data(report, "processes")["proc_is_foreign"] is False
    assert "PROC-001" not in ids(report)


def test_a_nested_pid_namespace_under_the_sandboxs_own_proc_shows_no_host_process():
    # srt runs its command in a second pid namespace under bwrap's, keeping bwrap's /proc: it
    # lists the sandbox's own helpers, numbered from the outer namespace, not the host's.
    report = measure((*SANDBOX, "--unshare-pid", "--", "unshare", "--pid", "--fork", "--"))
    processes = data(report, "processes")
    assert processes["proc_is_foreign"] is True and processes["proc_shows_host"] is False
    assert "PROC-001" not in ids(report)


def test_the_probe_as_pid_1_is_not_fooled_by_its_own_first_thread():
    # systemd-nspawn --pipe (and bwrap --as-pid-1) run the command as pid 1 of a new namespace:
    # the probe's first thread is then /proc/2, whose parent (outside) reads as 0, as kthreadd's.
    as_pid_1 = (*SANDBOX, "--unshare-pid", "--as-pid-1", "--")
    shown = subprocess.run(
        [*as_pid_1, SYSTEM_PYTHON, "-c",
         "import _thread, time; _thread.start_new_thread(time.sleep, (1,)); time.sleep(0.2); "
         "print(open('/proc/2/stat').read().rpartition(')')[2].split()[1], "
         "open('/proc/2/status').read().split('Tgid:')[1].split()[0])"],
        capture_output=True, text=True, timeout=60, check=True)
    assert shown.stdout.split() == ["0", "1"]  # the case: a thread of pid 1, "no parent"
    report = measure(as_pid_1)
    processes = data(report, "processes")
    assert processes["visible_pids"] == 1 and processes["proc_shows_host"] is False
    assert "PROC-001" not in ids(report)
    # the control: the same sandbox with the host's /proc bound in lists the host's processes
    report = measure(("bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--bind", "/proc", "/proc",
                      "--tmpfs", "/tmp", "--unshare-net", "--unshare-pid", "--as-pid-1", "--"))
    assert data(report, "processes")["proc_shows_host"] is True and "PROC-001" in ids(report)


def test_no_pid_namespace_shows_host_processes():
    report = measure(("unshare", "--net", "--"))
    assert finding(report, "PROC-001")["evidence"] == ["PID namespace shared with the host"]


# --- PRIV-008: the overflow uid that is host root ------------------------------------------

AS_UID = ("--unshare-all", "--uid", "65534", "--gid", "65534")


def test_the_overflow_uid_mapped_to_host_root_is_host_root():
    report = measure(("bwrap", *AS_UID, *SANDBOX[1:], "--"))
    identity = data(report, "identity")
    assert identity["euid"] == identity["overflow_uid"] == 65534
    assert identity["kernel_file_writable"] is True
    assert "PRIV-008" in ids(report)


def test_the_overflow_uid_started_by_an_ordinary_user_is_not_host_root():
    report = measure((*DROP, "bwrap", *AS_UID, *SANDBOX[1:], "--"))
    assert data(report, "identity")["kernel_file_writable"] is False
    assert "PRIV-008" not in ids(report)


def test_another_uid_mapped_to_host_root_is_host_root():
    report = measure(("bwrap", "--unshare-all", "--uid", "1000", *SANDBOX[1:], "--"))
    assert data(report, "identity")["kernel_file_owner"] == 1000
    assert "PRIV-008" in ids(report)


# --- The network axis: a proxy that answered nothing is not measured -------------------------


def proxied(services, kind, tmp_path) -> dict[str, str]:
    # Nothing listens on port 9 in the test namespace: the direct connect is refused, so the
    # network axis hangs on what the proxy says.
    targets = {"egress": ["127.0.0.1:9"], "metadata": [], "ipv6": [],
               "udp_dns": "127.0.0.1:9", "dns_control": "localhost",
               "proxy_control": "control.example.test:443", "interception_control": []}
    path = tmp_path / "targets.json"
    path.write_text(json.dumps(targets))
    return {"AGENTSEC_PROBE_TARGETS": str(path),
            "HTTPS_PROXY": f"http://127.0.0.1:{services.ports[kind]}"}


def test_a_proxy_that_answers_nothing_leaves_the_network_not_measured(local_services, tmp_path):
    report = measure(local_services.wrapper, env=proxied(local_services, "mute", tmp_path))
    results = data(report, "proxy")["results"]
    assert results and {r["result"] for r in results} == {"error"}
    assert len(local_services.received("mute", len(results))) == len(results)  # it was asked
    assert axis(report, "network") == "not_measured"
    assert report["summary"]["score_is_lower_bound"] is True


def test_a_proxy_that_refuses_is_measured(local_services, tmp_path):
    report = measure(local_services.wrapper, env=proxied(local_services, "forbid", tmp_path))
    assert {r["status"] for r in data(report, "proxy")["results"]} == {403}
    assert "NET-010" in ids(report)
    assert axis(report, "network") == "refused"


# --- A detector that cannot read a value: its axis is not measured, the rest is scored -------


def score_capture(tmp_path: Path, output: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    capture = tmp_path / "capture.json"
    capture.write_text(json.dumps(output) + "\n")
    out = tmp_path / "reports"
    run = subprocess.run([AGENTSEC, "score", str(capture), "--label", "c", "--how", "test",
                          "--out", str(out)], capture_output=True, text=True, timeout=60)
    saved = json.loads((out / "c.json").read_text()) if (out / "c.json").exists() else {}
    return run.returncode, saved


def test_a_malformed_value_makes_only_its_axis_not_measured(tmp_path):
    run = launch_probe(env={"HOME": str(tmp_path)})
    output = json.loads(run.stdout)
    code, control = score_capture(tmp_path, output)
    assert code == 0 and control["summary"]["axes"]["network"]["state"] != "not_measured"

    # A record as a hostile sandbox could write it: a list where the port belongs.
    output["sections"]["network"]["data"]["targets"][0].update(port=[1], result="connected")
    code, report = score_capture(tmp_path, output)
    assert code == 0
    states = {name: a["state"] for name, a in report["summary"]["axes"].items()}
    assert states["network"] == "not_measured"
    assert all(states[name] == control["summary"]["axes"][name]["state"]
               for name in states if name != "network")
    reasons = report["summary"]["axes"]["network"]["not_measured"]
    assert any("could not be decided" in reason for reason in reasons)


# --- io_uring -------------------------------------------------------------------------------


def test_io_uring_creatable_without_a_filter_is_a_low_finding():
    report = measure((*SANDBOX, "--"))
    assert data(report, "identity")["io_uring"] == {"result": "creatable", "errno": None}
    assert finding(report, "PRIV-009")["severity"] == "low"


@needs_x86_64
def test_io_uring_creatable_under_a_seccomp_filter_is_a_hole_in_the_filter():
    report = measure_with_filter(no_unix_sockets(), ("--",))
    assert data(report, "identity")["seccomp"] == 2
    assert finding(report, "PRIV-009")["severity"] == "medium"


@needs_x86_64
@pytest.mark.parametrize(("code", "result"), [(errno.EPERM, "refused"),
                                              (errno.ENOSYS, "unavailable")])
def test_io_uring_refused_by_seccomp_is_not_a_finding(code, result):
    program = seccomp_filter([(X86_64_SYSCALLS["io_uring_setup"], code)])
    report = measure_with_filter(program, ("--",))
    assert data(report, "identity")["io_uring"]["result"] == result
    assert "PRIV-009" not in ids(report)
    assert axis(report, "privilege") != "not_measured"


def test_io_uring_refused_by_the_kernel_setting_is_not_a_finding():
    # kernel.io_uring_disabled is a sysctl of the host, never changed here; a fresh sandbox that
    # drops every capability meets the same refusal when the setting is 1 and creates it when 0.
    disabled = Path("/proc/sys/kernel/io_uring_disabled").read_text().strip()
    report = measure((*DROP, *SANDBOX, "--unshare-user", "--"))
    expected = {"0": "creatable", "1": "refused", "2": "refused"}[disabled]
    assert data(report, "identity")["io_uring"]["result"] == expected
    assert ("PRIV-009" in ids(report)) is (expected == "creatable")


# --- gVisor: root, capabilities and kernel surfaces of a user-space kernel are its own -------

# The host's / read-only under a tmpfs overlay, no network: gVisor's quickest sandbox.
GVISOR = ("unshare", "--net", "--", "runsc", "--network=none", "do")


def test_under_gvisor_root_and_the_kernel_surfaces_are_the_sentrys_not_the_hosts():
    assert shutil.which("runsc"), "runsc is part of this machine's set-up (scripts/setup.sh)"
    report = measure(GVISOR)
    identity = data(report, "identity")
    assert identity["user_space_kernel"] == "gvisor" and identity["euid"] == 0
    assert identity["in_user_namespace"] is False  # how gVisor's own uid map reads
    # gVisor's /proc/self/status has no NoNewPrivs line: prctl says it (gVisor always sets it)
    assert identity["no_new_privs"] is True
    found = ids(report)
    assert not found & {"PRIV-001", "PRIV-004", "PRIV-006", "PRIV-009", "FS-009", "PRIV-005"}
    assert finding(report, "PRIV-002")["evidence"] == [
        "euid 0 of gvisor's user-space kernel, not the host's"]
    assert "CAP_SYS_ADMIN" in identity["caps"] and finding(report, "PRIV-003")["severity"] == "low"
    assert report["summary"]["axes"]["privilege"]["not_measured"] == []
    # the control: host root with the same command line, no user-space kernel in between
    control = measure(("unshare", "--net", "--"))
    assert data(control, "identity")["user_space_kernel"] is None
    assert {"PRIV-001", "PRIV-004"} <= ids(control)
    assert finding(control, "PRIV-003")["severity"] == "critical"
