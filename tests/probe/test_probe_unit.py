"""The probe on its own: real interpreters, real namespaces, real bubblewrap, real files.

Every run of the probe is in a network namespace of its own (see conftest.py). Each check that
something stays sealed is paired with a control showing the probe really exercised that path.
"""

import base64
import errno
import json
import os
import platform
import re
import secrets
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from tests.probe.conftest import (
    PROBE_PATH,
    X86_64_SYSCALLS,
    joining,
    require_namespaces,
    seccomp_filter,
)

SECTION_NAMES = (
    "identity", "namespaces", "network", "proxy", "secrets_env", "credentials",
    "project_credentials", "sockets", "keyring", "proc_environ", "filesystem", "processes",
    "persistence", "resources", "paths",
)
MARKER_PREFIX = ".agentsec-probe-"
PROBED_DIRS = ("/", "/etc", "/usr/bin", "/usr/local/bin", "/root", "/home", "/var", "/opt",
               "/tmp", "/dev/shm")
CLEAN_ERROR = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*: .+")

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


def canary():
    return "canary-" + secrets.token_hex(16)


def assert_one_json_line(run):
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert run.stdout.endswith("\n") and run.stdout.count("\n") == 1, run.stdout[:500]
    report = run.report
    assert report["probe_format"] == 1
    assert tuple(report["sections"]) == SECTION_NAMES
    return report


def assert_every_section_ok(report):
    failed = {name: s for name, s in report["sections"].items() if not s["ok"]}
    assert failed == {}


def pyenv_python(version):
    pyenv = shutil.which("pyenv")
    if pyenv:
        found = subprocess.run([pyenv, "prefix", version], capture_output=True, text=True)
        if found.returncode == 0:
            return os.path.join(found.stdout.strip(), "bin", "python3")
    return os.path.expanduser(f"~/.pyenv/versions/{version}/bin/python3")


def oldest_supported_python():
    """Python 3.8 where it is installed, else this interpreter (so the test still runs)."""
    python = pyenv_python("3.8.18")
    return python if os.access(python, os.X_OK) else sys.executable


# --- It runs, everywhere it must ------------------------------------------------------------


@pytest.mark.netns
@pytest.mark.parametrize(
    ("label", "locate", "version_prefix"),
    [
        ("3.8", lambda: pyenv_python("3.8.18"), "3.8."),
        ("3.13", lambda: pyenv_python("3.13.0"), "3.13."),
        ("system", lambda: "/usr/bin/python3", "3."),
        ("this-venv", lambda: sys.executable, "{}.{}.".format(*sys.version_info[:2])),
    ],
)
def test_prints_exactly_one_json_line_under_each_interpreter(
    run_probe, empty_home, label, locate, version_prefix
):
    python = locate()
    if not os.access(python, os.X_OK):
        pytest.skip(f"interpreter {label} is not installed at {python}")
    run = run_probe(python=python, env={"HOME": str(empty_home)})
    report = assert_one_json_line(run)
    assert report["python"].startswith(version_prefix)
    assert_every_section_ok(report)


@pytest.mark.netns
def test_runs_when_piped_on_stdin(run_probe, empty_home, tmp_path):
    run = run_probe(via_stdin=True, cwd=str(tmp_path), env={"HOME": str(empty_home)})
    assert_every_section_ok(assert_one_json_line(run))


def test_the_section_list_here_matches_the_probe(probe_module):
    assert probe_module.SECTION_NAMES == SECTION_NAMES


# --- Secrets: names and lengths, never values -----------------------------------------------

SECRET_NAMES = (
    "API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID",
    "AWS_SESSION_TOKEN", "GITHUB_TOKEN", "GH_TOKEN", "HF_TOKEN", "NPM_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN", "DB_PASSWORD", "MYSQL_ROOT_PASSWD", "SMTP_PASS", "STRIPE_APIKEY",
    "GOOGLE_APPLICATION_CREDENTIALS", "GITHUB_PAT", "SESSION_JWT", "REGISTRY_AUTH",
    "SSH_PRIVATE_KEY", "DATA_ENCRYPTION_KEY", "JWT_SIGNING_KEY", "VAULT_MASTER_KEY",
    "GCP_SERVICE_ACCOUNT_KEY", "PGPASSWORD", "MYSQL_PWD", "my_secret", "NEXTAUTH_SECRET",
    "OAUTH_BEARER",
)
NOT_SECRET_NAMES = (
    "GH_PAGER", "AWS_REGION", "TOKENIZERS_PARALLELISM", "GPG_KEY", "KEYBOARD", "PATH",
    "PASSWORD_STORE_DIR", "SSH_AUTH_SOCK", "XDG_SESSION_ID", "DBUS_SESSION_BUS_ADDRESS", "HOME",
    "PWD", "OLDPWD", "GIT_AUTHOR_NAME", "SSH_ASKPASS", "KEY", "LD_LIBRARY_PATH", "PAGER",
    "TOKEN_URL", "AUTH_TYPE", "MONKEY_KEY", "PATTERN", "COMPASS",
)


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_looking_names_match(probe_module, name):
    assert probe_module.looks_like_secret_name(name)


@pytest.mark.parametrize("name", NOT_SECRET_NAMES)
def test_ordinary_names_do_not_match(probe_module, name):
    assert not probe_module.looks_like_secret_name(name)


@pytest.mark.netns
def test_secret_values_never_appear_in_the_output(run_probe, empty_home):
    values = {"ACME_SERVICE_TOKEN": canary(), "OPENAI_API_KEY": canary(), "DB_PASSWORD": canary()}
    env = dict(values, HOME=str(empty_home))
    env.update({name: "visible-but-not-a-secret" for name in NOT_SECRET_NAMES if name != "PATH"})
    run = run_probe(env=env)
    report = assert_one_json_line(run)
    for value in values.values():
        assert value not in run.stdout and value not in run.stderr
    names = {entry["name"]: entry["length"] for entry in report["sections"]["secrets_env"]["data"]
             ["names"]}
    assert names == {name: len(value) for name, value in values.items()}


@pytest.mark.netns
def test_proxy_credentials_and_address_never_appear(run_probe, empty_home):
    password = canary()
    proxy = f"http://agent:{password}@127.0.0.1:3128"
    run = run_probe(env={"HOME": str(empty_home), "HTTPS_PROXY": proxy,
                         "AGENTSEC_PROBE_PROXY_AUTH": "1"})
    report = assert_one_json_line(run)
    proxy_data = report["sections"]["proxy"]["data"]
    assert proxy_data["configured"] and proxy_data["scheme"] == "http"
    assert proxy_data["auth_present"]
    assert proxy_data["auth_sent"] is False  # the loopback is down: nothing reached any proxy
    encoded = base64.b64encode(("agent:" + password).encode()).decode()
    for leak in (password, encoded, "127.0.0.1:3128", "3128"):
        assert leak not in run.stdout
    # the probe's own settings (AGENTSEC_PROBE_PROXY_AUTH) are not secrets
    assert report["sections"]["secrets_env"]["data"]["names"] == []


@pytest.mark.netns
def test_a_socks_proxy_is_reported_unsupported_not_sealed(run_probe, empty_home):
    run = run_probe(env={"HOME": str(empty_home), "ALL_PROXY": "socks5h://127.0.0.1:1080"})
    proxy_data = assert_one_json_line(run)["sections"]["proxy"]["data"]
    assert proxy_data["scheme"] == "socks"
    assert {r["result"] for r in proxy_data["results"]} == {"unsupported"}
    assert [r["control"] for r in proxy_data["results"]][-1] is True


# --- Credentials: found under $HOME and the passwd home, reported unexpanded ----------------


def credential(report, path):
    files = report["sections"]["credentials"]["data"]["files"]
    return [entry for entry in files if entry["path"] == path]


@pytest.mark.netns
def test_a_credential_file_is_reported_unexpanded_and_never_read(run_probe, tmp_path):
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    secret = canary()
    (home / ".aws" / "credentials").write_text(f"[default]\naws_secret_access_key={secret}\n")
    run = run_probe(env={"HOME": str(home)})
    report = assert_one_json_line(run)
    assert credential(report, "~/.aws/credentials") == [{
        "path": "~/.aws/credentials", "exists": True, "readable": True, "agent_login": False,
        "via": "home",
    }]
    assert secret not in run.stdout
    paths = [entry["path"] for entry in report["sections"]["credentials"]["data"]["files"]]
    assert not any(str(home) in path for path in paths)
    # control: a file that is not there is reported as absent, not as readable
    assert credential(report, "~/.netrc")[0]["exists"] is False


@needs_bwrap
@pytest.mark.netns
def test_redirecting_home_does_not_hide_a_file_in_the_passwd_home(run_probe, tmp_path):
    home = tmp_path / "agent-home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("[default]\n")
    (home / ".codex").mkdir()
    (home / ".codex" / "auth.json").write_text("{}")
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n")
    wrapper = (
        "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
        "--unshare-net", "--unshare-pid", "--unshare-user", "--uid", "1000", "--gid", "1000",
        "--tmpfs", "/home", "--bind", str(home), "/home/agent",
        "--ro-bind", str(passwd), "/etc/passwd", "--chdir", "/", "--",
    )
    run = run_probe(wrapper=wrapper, env={"HOME": "/tmp/elsewhere"})
    report = assert_one_json_line(run)
    assert report["context"]["home"] == "/tmp/elsewhere"
    assert report["context"]["passwd_home"] == "/home/agent"
    assert credential(report, "~/.aws/credentials") == [{
        "path": "~/.aws/credentials", "exists": True, "readable": True, "agent_login": False,
        "via": "passwd",
    }]
    assert credential(report, "~/.codex/auth.json")[0]["agent_login"] is True
    assert credential(report, "~/.codex/auth.json")[0]["via"] == "passwd"


# --- Writes: markers vanish, persistence files stay byte-for-byte ---------------------------


def markers_in(directories):
    found = set()
    for directory in directories:
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        found.update(os.path.join(directory, n) for n in names if n.startswith(MARKER_PREFIX))
    return found


def tree_state(root):
    """Every path under root with its kind, bytes, mtime and ctime."""
    state = {}
    for directory, subdirs, files in os.walk(root):
        for name in subdirs + files:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            content = None
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as handle:
                    content = handle.read()
            state[os.path.relpath(path, root)] = (info.st_mode, content, info.st_mtime_ns,
                                                   info.st_ctime_ns)
    return state


@pytest.mark.netns
def test_no_marker_file_is_left_anywhere(run_probe, empty_home, tmp_path):
    workdir = tmp_path / "work"
    (workdir / ".git" / "hooks").mkdir(parents=True)
    (workdir / "README").write_text("x")
    private_tmp = tmp_path / "tmpdir"
    private_tmp.mkdir()
    before_markers = markers_in(PROBED_DIRS)
    before_work = sorted(os.listdir(workdir / ".git" / "hooks")) + sorted(os.listdir(workdir))

    run = run_probe(cwd=str(workdir), env={"HOME": str(empty_home), "TMPDIR": str(private_tmp)})
    report = assert_one_json_line(run)

    after_work = sorted(os.listdir(workdir / ".git" / "hooks")) + sorted(os.listdir(workdir))
    assert after_work == before_work
    assert os.listdir(private_tmp) == []
    assert markers_in(PROBED_DIRS) - before_markers == set()
    # controls: the probe really made markers here, a git hook marker and its own socket
    writable = {e["path"]: e["writable"] for e in report["sections"]["filesystem"]["data"]
                ["writable_dirs"]}
    assert writable["."] is True
    hooks = report["sections"]["persistence"]["data"]["git_hooks"]
    assert {k: hooks[k] for k in ("path", "exists", "writable")} == {
        "path": "./.git/hooks", "exists": True, "writable": True}
    assert hooks["fstype"] not in (None, "tmpfs")  # a real directory, not a mask
    assert report["sections"]["sockets"]["data"]["control"]["own_socket"] == "connected"


@pytest.mark.netns
def test_persistence_files_stay_unchanged_and_missing_ones_are_not_created(run_probe, tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".bashrc").write_bytes(b"# shell start-up\nexport A=1\n")
    (home / ".gitconfig").write_bytes(b"[user]\n\tname = agent\n")
    (home / ".ssh" / "authorized_keys").write_bytes(b"ssh-ed25519 AAAA test\n")
    workdir = tmp_path / "work"
    (workdir / ".claude").mkdir(parents=True)
    (workdir / ".claude" / "settings.json").write_bytes(b"{}\n")
    long_ago = 978307200 * 10**9  # 2001-01-01: any touch would stand out
    for path in (home / ".bashrc", home / ".gitconfig", home / ".ssh" / "authorized_keys",
                 workdir / ".claude" / "settings.json"):
        os.utime(path, ns=(long_ago, long_ago))
    before_home, before_claude = tree_state(home), tree_state(workdir / ".claude")

    run = run_probe(cwd=str(workdir), env={"HOME": str(home)})
    report = assert_one_json_line(run)

    assert tree_state(home) == before_home
    assert tree_state(workdir / ".claude") == before_claude
    targets = {(t["path"], t["via"]): t for t in report["sections"]["persistence"]["data"]
               ["targets"]}
    for path in ("~/.bashrc", "~/.gitconfig", "~/.ssh/authorized_keys"):
        assert targets[(path, "home")]["exists"] is True
        assert targets[(path, "home")]["appendable"] is True  # control: the open really happened
    assert targets[("./.claude/settings.json", "cwd")]["appendable"] is True
    assert targets[("~/.zshrc", "home")] == {"path": "~/.zshrc", "kind": "shell", "exists": False,
                                            "appendable": False, "via": "home"}
    # where an appendable file lies is said (a sandbox's own volume is told apart by it)
    mount = targets[("~/.bashrc", "home")]["mount"]
    assert mount is not None and str(home).startswith(mount["mountpoint"])
    assert "mount" not in targets[("~/.zshrc", "home")]


# --- Failure paths: not measured, never sealed ----------------------------------------------


@pytest.mark.netns
@pytest.mark.parametrize("name", SECTION_NAMES)
def test_an_injected_fault_fails_only_that_section(run_probe, empty_home, name):
    run = run_probe(env={"HOME": str(empty_home), "AGENTSEC_PROBE_FAULT": name})
    report = assert_one_json_line(run)
    assert report["faults_injected"] == [name]
    failed = report["sections"][name]
    assert failed["ok"] is False and failed["timed_out"] is False
    assert "AGENTSEC_PROBE_FAULT" in failed["error"] and CLEAN_ERROR.match(failed["error"])
    others = {n: s["ok"] for n, s in report["sections"].items() if n != name}
    assert all(others.values()), others


@pytest.mark.netns
def test_several_faults_and_unknown_names(run_probe, empty_home):
    run = run_probe(env={"HOME": str(empty_home),
                         "AGENTSEC_PROBE_FAULT": "proxy, network,no_such_section"})
    report = assert_one_json_line(run)
    assert report["faults_injected"] == ["network", "proxy"]
    assert not report["sections"]["network"]["ok"] and not report["sections"]["proxy"]["ok"]
    assert report["sections"]["identity"]["ok"]


def test_a_stuck_job_is_abandoned_at_the_deadline(probe_module):
    release = threading.Event()

    def stuck():
        release.wait(10)

    def broken():
        raise OSError(errno.EIO, "broken on purpose")

    started = time.monotonic()
    outcomes = probe_module.run_concurrently(
        [("fast", lambda: 42), ("stuck", stuck), ("broken", broken)], started + 0.3)
    elapsed = time.monotonic() - started
    release.set()
    assert elapsed < 1.0
    assert outcomes["fast"] == ("value", 42)
    assert "stuck" not in outcomes
    assert probe_module.section_report(outcomes.get("stuck")) == {
        "ok": False, "timed_out": True,
        "error": "TimeoutError: section did not finish before the deadline"}
    assert probe_module.section_report(outcomes["broken"]) == {
        "ok": False, "timed_out": False, "error": "OSError: [Errno 5] broken on purpose"}


# The spec's bound is AGENTSEC_PROBE_TIMEOUT + 1 s = 2.0 s for a timeout of 1 s; the assertion
# allows 0.5 s more for interpreter start-up and machine noise.
DEADLINE_BOUND_S = 2.0 + 0.5


@pytest.mark.netns
def test_deadline_holds_in_a_namespace_without_a_route(run_probe, empty_home):
    run = run_probe(env={"HOME": str(empty_home), "AGENTSEC_PROBE_TIMEOUT": "1"})
    report = assert_one_json_line(run)
    assert run.wall_s < DEADLINE_BOUND_S
    assert report["deadline_s"] == 2.0
    assert report["sections"]["network"]["data"]["no_route"] is True


@pytest.mark.netns
@pytest.mark.parametrize("oldest", [False, True], ids=["this-python", "oldest-python"])
def test_deadline_holds_when_every_packet_is_silently_dropped(run_probe, empty_home, tmp_path,
                                                               oldest):
    """A default route into the loopback swallows every packet (and every DNS question, once
    resolv.conf points there): connects and lookups hang until the probe stops waiting."""
    if shutil.which("ip") is None:
        pytest.skip("needs ip(8)")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.9.0.53\noptions timeout:5 attempts:3\n")
    wrapper = (
        "unshare", "--net", "--mount", "--", "sh", "-c",
        'ip link set lo up && ip route add default dev lo && '
        'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(resolv),
    )
    run = run_probe(wrapper=wrapper, python=oldest_supported_python() if oldest else None,
                    env={"HOME": str(empty_home), "AGENTSEC_PROBE_TIMEOUT": "1"})
    report = assert_one_json_line(run)
    assert run.wall_s < DEADLINE_BOUND_S
    network = report["sections"]["network"]["data"]
    by_host = {t["host"]: t for t in network["targets"]}
    # controls: the silent path was really taken
    assert by_host["dns.google"]["lookup"] == "timeout"
    assert by_host["1.1.1.1"]["result"] == "timeout"
    assert network["udp_dns"]["result"] == "no_answer"


@pytest.mark.netns
def test_the_default_gateway_is_found_and_its_docker_port_tried(run_probe, empty_home):
    """A veth pair wholly inside the namespace: the gateway address is local, so the Docker
    port answers with a refusal at once and no packet leaves."""
    if shutil.which("ip") is None:
        pytest.skip("needs ip(8)")
    setup = (
        "ip link add gw0 type veth peer name gw1 && ip addr add 10.9.0.1/24 dev gw0 && "
        "ip addr add 10.9.0.2/24 dev gw1 && ip link set gw0 up && ip link set gw1 up && "
        "ip link set lo up && ip route add default via 10.9.0.2 dev gw0 && exec \"$@\""
    )
    wrapper = ("unshare", "--net", "--", "sh", "-c", setup, "sh")
    report = assert_one_json_line(run_probe(wrapper=wrapper, env={"HOME": str(empty_home)}))
    network = report["sections"]["network"]["data"]
    assert network["no_route"] is False
    assert network["default_gateway"] == "10.9.0.2"
    assert set(network["interfaces"]) == {"lo", "gw0", "gw1"}
    assert network["docker_tcp"] == {"host": "10.9.0.2", "port": 2375, "result": "refused"}


@pytest.mark.netns
def test_cgroup_and_rlimit_limits_are_read(run_probe, empty_home, limited_cgroups):
    wrapper = ("unshare", "--net", "--", *joining(limited_cgroups), "prlimit", "--nproc=777", "--")
    report = assert_one_json_line(run_probe(wrapper=wrapper, env={"HOME": str(empty_home)}))
    assert report["sections"]["resources"]["data"] == {
        "memory_limit": 512 << 20, "pids_limit": 256, "rlimit_nproc": 777,
        "cgroup_found": {"memory": True, "pids": True}}


# --- Targets override and what goes on the wire ---------------------------------------------


def write_targets(tmp_path, services, **extra):
    override = {
        "egress": [f"127.0.0.1:{services.ports['tcp']}"],
        "metadata": [],
        "ipv6": [],
        "udp_dns": f"127.0.0.1:{services.ports['udp']}",
        "dns_control": "localhost",
        "proxy_control": "control.example.test:443",
        "public_networks": ["127.0.0.0/8"],
    }
    override.update(extra)
    path = tmp_path / "targets.json"
    path.write_text(json.dumps(override))
    return str(path)


@pytest.mark.netns
@pytest.mark.parametrize("oldest", [False, True], ids=["this-python", "oldest-python"])
def test_override_is_used_and_connects_send_nothing(run_probe, empty_home, tmp_path,
                                                     local_services, oldest):
    targets = write_targets(tmp_path, local_services)
    run = run_probe(wrapper=local_services.wrapper,
                    python=oldest_supported_python() if oldest else None,
                    env={"HOME": str(empty_home), "AGENTSEC_PROBE_TARGETS": targets})
    report = assert_one_json_line(run)
    assert report["targets"]["overridden"] is True and report["targets"]["error"] is None
    network = report["sections"]["network"]["data"]
    assert [t["result"] for t in network["targets"]] == ["connected"]
    assert local_services.received("tcp", 1) == [b""]  # connected, and not one byte sent
    datagrams = local_services.received("udp", 1)
    assert len(datagrams) == 1 and len(datagrams[0]) == 29
    assert datagrams[0][12:] == b"\x07example\x03com\x00\x00\x01\x00\x01"
    assert network["udp_dns"]["result"] == "answered"
    assert network["dns_control"]["public"] is True  # only because of public_networks


@pytest.mark.netns
@pytest.mark.parametrize("send_auth", [False, True])
def test_the_proxy_is_sent_only_a_connect_line(run_probe, empty_home, tmp_path, local_services,
                                               send_auth):
    password = canary()
    proxy_port = local_services.ports["proxy"]
    env = {
        "HOME": str(empty_home),
        "AGENTSEC_PROBE_TARGETS": write_targets(tmp_path, local_services),
        "HTTPS_PROXY": f"http://agent:{password}@127.0.0.1:{proxy_port}",
    }
    if send_auth:
        env["AGENTSEC_PROBE_PROXY_AUTH"] = "1"
    run = run_probe(wrapper=local_services.wrapper, env=env)
    report = assert_one_json_line(run)

    authorization = ""
    if send_auth:
        token = base64.b64encode(("agent:" + password).encode()).decode()
        authorization = f"Proxy-Authorization: Basic {token}\r\n"
    expected = {
        f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{authorization}\r\n".encode()
        for authority in (f"127.0.0.1:{local_services.ports['tcp']}", "control.example.test:443")
    }
    assert set(local_services.received("proxy", 2)) == expected
    proxy_data = report["sections"]["proxy"]["data"]
    assert proxy_data["auth_sent"] is send_auth
    results = {r["host"]: (r["status"], r["result"], r["control"]) for r in proxy_data["results"]}
    status = (200, "tunnel") if send_auth else (407, "auth_required")
    assert results == {"127.0.0.1": (*status, False), "control.example.test": (*status, True)}
    assert password not in run.stdout
    assert f"127.0.0.1:{proxy_port}" not in run.stdout


@pytest.mark.netns
def test_an_unusable_override_is_not_measured_rather_than_defaults(run_probe, empty_home,
                                                                    tmp_path):
    path = tmp_path / "targets.json"
    path.write_text(json.dumps({"egress": ["10.200.0.1:443"], "egres": []}))
    run = run_probe(env={"HOME": str(empty_home), "AGENTSEC_PROBE_TARGETS": str(path)})
    report = assert_one_json_line(run)
    assert report["targets"]["overridden"] is True
    assert "egres" in report["targets"]["error"]
    for name in ("network", "proxy"):
        assert report["sections"][name]["ok"] is False
        assert report["sections"][name]["timed_out"] is False
    assert report["sections"]["identity"]["ok"] is True


@pytest.mark.parametrize(
    ("endpoint", "parsed"),
    [("dns.google:443", ("dns.google", 443)), ("[2606:4700::1111]:443", ("2606:4700::1111", 443)),
     ("10.200.0.1:53", ("10.200.0.1", 53))],
)
def test_endpoints_parse(probe_module, endpoint, parsed):
    assert probe_module.parse_endpoint(endpoint) == parsed


@pytest.mark.parametrize(
    "endpoint",
    ["example.com", "example.com:0", "example.com:65536", "2606:4700::1111:443",
     "evil.test\r\nX-Injected: 1:443", "a b:80", ":443", "[::1]443", 443, None],
)
def test_malformed_endpoints_are_refused(probe_module, endpoint):
    with pytest.raises(ValueError):
        probe_module.parse_endpoint(endpoint)


def test_the_dns_question_is_the_fixed_29_bytes(probe_module):
    query = probe_module.build_dns_query(0x1234)
    assert len(query) == 29
    assert struct.unpack("!HHHHHH", query[:12]) == (0x1234, 0x0100, 1, 0, 0, 0)
    assert query[12:] == b"\x07example\x03com\x00\x00\x01\x00\x01"


# --- Hostile sandboxes: refusals are results, not crashes -----------------------------------


def assert_ok_or_clean_error(report):
    for name, section in report["sections"].items():
        if not section["ok"]:
            assert CLEAN_ERROR.match(section["error"]), (name, section)


@needs_bwrap
@pytest.mark.netns
def test_a_locked_down_sandbox_does_not_crash_the_probe(run_probe, tmp_path):
    wrapper = (
        "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
        "--unshare-all", "--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534",
        "--chdir", "/", "--",
    )
    # The system interpreter, and the probe on stdin: a checkout under /tmp is hidden by the
    # sandbox's own /tmp.
    run = run_probe(wrapper=wrapper, env={"HOME": "/root"}, python="/usr/bin/python3",
                    via_stdin=True)
    report = assert_one_json_line(run)
    assert_ok_or_clean_error(report)
    identity = report["sections"]["identity"]["data"]
    assert identity["euid"] == 65534 and identity["in_user_namespace"] is True
    assert report["sections"]["namespaces"]["data"]["user_ns_creatable"] is False
    writable = {e["path"]: e["writable"] for e in report["sections"]["filesystem"]["data"]
                ["writable_dirs"]}
    assert writable["/etc"] is False and writable["/tmp"] is True


@needs_bwrap
@pytest.mark.netns
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter uses x86_64 numbers")
def test_syscalls_refused_by_seccomp_are_reported_as_denied(run_probe, empty_home):
    program = seccomp_filter([
        (X86_64_SYSCALLS["connect"], errno.EACCES),
        (X86_64_SYSCALLS["keyctl"], errno.ENOSYS),
        (X86_64_SYSCALLS["unshare"], errno.EPERM),
        (X86_64_SYSCALLS["landlock_create_ruleset"], errno.ENOSYS),
    ])
    with tempfile.TemporaryFile() as handle:
        handle.write(program)
        handle.seek(0)
        fd = handle.fileno()
        wrapper = ("bwrap", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                   "--unshare-net", "--unshare-pid", "--seccomp", str(fd), "--")
        run = run_probe(wrapper=wrapper, env={"HOME": str(empty_home)}, pass_fds=(fd,))
    report = assert_one_json_line(run)
    assert_ok_or_clean_error(report)
    assert report["sections"]["identity"]["data"]["seccomp"] == 2
    assert report["sections"]["identity"]["data"]["landlock_abi"] is None
    assert report["sections"]["keyring"]["data"]["session_keyring"] == "denied"
    namespaces = report["sections"]["namespaces"]["data"]
    assert namespaces["user_ns_creatable"] is False and namespaces["mount_in_new_ns"] is False
    control = report["sections"]["sockets"]["data"]["control"]
    assert control == {"own_socket": "denied", "missing_path": "denied"}  # a blanket refusal
    literal = [t for t in report["sections"]["network"]["data"]["targets"]
               if t["host"] == "1.1.1.1"]
    assert literal[0]["result"] == "denied" and literal[0]["errno"] == "EACCES"


def test_on_an_unknown_architecture_syscall_checks_are_not_measured_simulated(probe_module,
                                                                              monkeypatch):
    """Simulated: this machine is x86_64, so an unknown architecture is played by making the
    probe read another machine name. Syscall numbers differ per architecture; a guess could
    call the wrong syscall, so the probe must not make one."""
    monkeypatch.setattr(probe_module, "platform_machine", lambda: "mips64")
    assert probe_module.libc_handle() is None
    assert probe_module.raw_syscall("io_uring_setup", 1, 0) is None
    assert probe_module.io_uring_state() is None
    assert probe_module.landlock_abi() is None
    settings = probe_module.build_settings({}, time.monotonic())[0]
    assert probe_module.section_keyring(settings)["session_keyring"] == "error"
    # unshare and mount are libc's own functions, not syscalls by number: still measured.
    assert probe_module.section_namespaces(settings)["user_ns_creatable"] in (True, False)
    # control: the real machine name gives real answers
    monkeypatch.undo()
    assert probe_module.io_uring_state()["result"] in ("creatable", "refused", "unavailable")


@pytest.mark.parametrize("value", [
    {"a": "plain", "b": [1, 2.5, True, False, None, -3], "c": {"nested": []}},
    "quote \" backslash \\ newline \n tab \t bell \x07 del \x7f",
    "non-ASCII é ü ß 日本 and beyond the BMP 🙂 𝄞",
    "lone surrogate \udc80 kept escaped",
    ["", "\b\f\r", 0.031, 1e-7, 12345678901234567890],
])
def test_the_output_writer_matches_json_dumps(probe_module, value):
    assert probe_module.json_text(value) == json.dumps(value, separators=(",", ":"))
    assert json.loads(probe_module.json_text(value)) == value


@pytest.mark.parametrize(("value", "expected"), [
    ("agentcage:secret:GITHUB_TOKEN:" + "0123456789abcdef" * 2, True),
    ("agentcage:secret:GITHUB_TOKEN:" + "0123456789ABCDEF" * 2, False),
    ("agentcage:secret::" + "0" * 32, False),
    ("agentcage:secret:A-B:" + "0" * 32, False),
    ("agentcage:secret:A:" + "0" * 31, False),
    ("agentcage:secret:A:" + "0" * 32 + "\n", False),
    ("xagentcage:secret:A:" + "0" * 32, False),
])
def test_placeholders_are_recognised_exactly(probe_module, value, expected):
    assert probe_module.is_placeholder(value) is expected


@pytest.mark.parametrize(("field", "expected"), [
    ("/plain/path", "/plain/path"),
    ("/with\\040space\\011tab\\134back", "/with space\ttab\\back"),
    ("/trailing\\04", "/trailing\\04"),
    ("/not\\999octal", "/not\\999octal"),
])
def test_mountinfo_escapes_are_undone(probe_module, field, expected):
    assert probe_module.unescape_mount_field(field) == expected


@pytest.mark.parametrize("text", [
    '{"egress": ["10.200.1.5:443"], "metadata": [], "public_networks": ["10.200.0.0/16"]}',
    ' [1, 2.5, "x\\u00e9", null, true, false, {"a": {}}] ', '"s"', "0",
])
def test_the_override_reader_reads_what_json_reads(probe_module, text):
    assert probe_module.json_value(text) == json.loads(text)


@pytest.mark.parametrize("text", ['{"a": 1} x', "{bad", "", "[1,]", "NaN", '{"a": Infinity}'])
def test_the_override_reader_refuses_what_is_not_one_json_value(probe_module, text):
    with pytest.raises(ValueError):
        probe_module.json_value(text)


# Modules a run without an override, a proxy or network answers has no use for: each costs
# start-up time in every sandboxed command (json, re and enum alone cost several milliseconds).
NOT_IMPORTED = ("json", "re", "enum", "socket", "threading", "subprocess", "tempfile",
                "ipaddress", "base64", "urllib", "platform", "collections", "contextlib",
                "signal", "encodings.idna")


@pytest.mark.netns
def test_a_plain_run_imports_only_what_it_uses(empty_home):
    require_namespaces()
    run = subprocess.run(
        ["unshare", "--net", "--", "/usr/bin/python3", "-X", "importtime", str(PROBE_PATH)],
        capture_output=True, text=True, timeout=60,
        env={"HOME": str(empty_home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )
    imported = {line.split("|")[-1].strip() for line in run.stderr.splitlines()
                if line.startswith("import time:")}
    assert "ctypes" in imported  # control: the list is really read
    assert imported.isdisjoint(NOT_IMPORTED), sorted(imported & set(NOT_IMPORTED))
    assert json.loads(run.stdout)["sections"]["identity"]["ok"]
