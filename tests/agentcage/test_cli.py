"""The `agentcage` command, run as a real subprocess: exit codes, one-line errors, lifecycles."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.agentcage.conftest import cage_yaml, make_project
from tests.terminal_driver import drive

AGENTCAGE = [sys.executable, "-m", "agentcage.cli"]


@pytest.fixture
def home(tmp_path):
    root = Path(tempfile.mkdtemp(prefix="agentcage-cli-"))
    os.chmod(root, 0o755)
    yield root
    # whatever a test left: destroy it through the CLI, then check nothing remains
    env = {**os.environ, "AGENTCAGE_HOME": str(root / "home")}
    cages = root / "home" / "cages"
    if cages.exists():
        for name in os.listdir(cages):
            subprocess.run([*AGENTCAGE, "destroy", "-y", name], env=env, capture_output=True,
                           timeout=60)
    stop_zygotes(root / "home")
    shutil.rmtree(root, ignore_errors=True)


def stop_zygotes(state: Path) -> None:
    """The gateway zygote, the exec server and the command server of a test's state root
    outlive its cages by design: stop them."""
    from agentcage import commandclient, execclient
    from agentcage.backends import zygote

    zygote.stop_all(state)
    execclient.stop(str(state))
    commandclient.stop(str(state))


def agentcage(home: Path, *args: str, timeout: float = 90, cwd: Path | None = None):
    env = {**os.environ, "AGENTCAGE_HOME": str(home / "home")}
    return subprocess.run([*AGENTCAGE, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or home, stdin=subprocess.DEVNULL)


def create_cage(home: Path, net, name: str, allow: list[str], extra: str = "") -> Path:
    """A project and cage NAME made with `agentcage cage create` (asserted), as a user does;
    returns the project."""
    project = make_project(home / "work")
    config = home / "cage.yaml"
    config.write_text(cage_yaml(net, name, allow, extra=extra))
    r = agentcage(home, "cage", "create", "-c", str(config), "--project", str(project))
    assert r.returncode == 0, r.stderr
    return project


def _foreign_suffixes(home: Path) -> set[str]:
    """Suffixes of the cages that run on this machine under another AGENTCAGE_HOME (another
    test or user, at the same time): found by their live gateways' network namespaces."""
    suffixes = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_text()
            if "agentcage.gateway" not in cmdline or str(home) in cmdline:
                continue
            ns = subprocess.run(["ip", "netns", "identify", pid], capture_output=True,
                                text=True).stdout.strip()
            if ns.startswith("agc-"):
                suffixes.add(ns.split("-")[1])
    return suffixes


def our_namespaces(home: Path) -> set[str]:
    """The cage namespaces on this machine, except those of other homes' live cages: what this
    test made (or leaked), unaffected by cages that start or stop in parallel."""
    if not os.path.isdir("/run/netns"):
        return set()
    foreign = _foreign_suffixes(home)
    return {n for n in os.listdir("/run/netns")
            if n.startswith("agc-") and n.split("-")[1] not in foreign}


def our_mounts(home: Path) -> set[str]:
    foreign = _foreign_suffixes(home)
    return {line for line in Path("/proc/self/mounts").read_text().splitlines()
            if "agc-" in line and not any(f"agc-{f}-" in line for f in foreign)}


def test_version_and_help(home):
    r = agentcage(home, "--version")
    assert r.returncode == 0 and "agentcage" in r.stdout
    assert agentcage(home, "--help").returncode == 0


def test_bad_input_is_one_line_exit_1(home):
    (home / "bad.yaml").write_text("name: Bad_Name\nfoo: 1\n")
    r = agentcage(home, "cage", "create", "-c", str(home / "bad.yaml"))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("error: ") for line in lines)
    assert "name = 'Bad_Name'" in r.stderr and "foo = 1: unknown key" in r.stderr
    for args in (("exec", "nope", "--", "true"), ("domain", "add", "nope", "a.example.test"),
                 ("no-such-command",), ("cage", "create")):
        r = agentcage(home, *args)
        assert r.returncode == 1, args
        assert "Traceback" not in r.stderr and r.stderr.startswith("error: "), (args, r.stderr)




def test_init_writes_a_valid_commented_scaffold(home):
    r = agentcage(home, "init", "my-cage", "--scaffold", "claude-code", "-o", "c.yaml")
    assert r.returncode == 0, r.stderr
    text = (home / "c.yaml").read_text()
    assert "name: my-cage" in text and "#" in text
    assert agentcage(home, "scaffold", "list").stdout.split() == [
        "arch", "busybox", "claude-code", "codex", "debian", "minimal", "openclaw", "pi",
        "ubuntu"]
    assert "scaffold: codex" in agentcage(home, "scaffold", "show", "codex").stdout
    again = agentcage(home, "init", "my-cage", "-o", "c.yaml")
    assert again.returncode == 1 and "--force" in again.stderr
    assert agentcage(home, "init", "x", "--scaffold", "nope", "-o", "d.yaml").returncode == 1


def test_doctor_passes_here(home):
    r = agentcage(home, "doctor")
    assert r.returncode == 0, r.stdout
    assert "FAIL" not in r.stdout and "bwrap" in r.stdout


@pytest.mark.netns
def test_persistent_cage_lifecycle(home, net):
    project = make_project(home / "work")
    config = home / "cage.yaml"
    config.write_text(cage_yaml(net, "life", ["allowed.example.test"]))
    before = our_namespaces(home)
    mounts_before = our_mounts(home)
    host_tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    r = agentcage(home, "cage", "create", "-c", str(config), "--project", str(project))
    assert r.returncode == 0, r.stderr
    try:
        assert "life" in agentcage(home, "ls").stdout
        # the gateway's rules live in its own namespace, never in the host's
        assert subprocess.run(["nft", "list", "tables"], capture_output=True,
                              text=True).stdout == host_tables
        r = agentcage(home, "exec", "life", "--", "curl", "-sS", "-m", "8", "-o", "/dev/null",
                      "-w", "%{http_code}", "https://allowed.example.test/")
        assert (r.returncode, r.stdout) == (0, "200"), r.stderr
        r = agentcage(home, "exec", "life", "--", "curl", "-sS", "-m", "8", "-o", "/dev/null",
                      "-w", "%{http_code}", "--noproxy", "*", "https://pypi.org/")
        assert r.stdout == "403"
        assert agentcage(home, "domain", "add", "life", "pypi.org", "--expires-in", "1h"
                         ).returncode == 0
        listing = agentcage(home, "domain", "list", "life").stdout
        assert "pypi.org" in listing and "allowlist" in listing
        r = agentcage(home, "exec", "life", "--", "curl", "-sS", "-m", "8", "-o", "/dev/null",
                      "-w", "%{http_code}", "--noproxy", "*", "https://pypi.org/")
        assert r.stdout == "200"
        assert agentcage(home, "domain", "add", "life", "*.com").returncode == 1
        assert agentcage(home, "exec", "life", "--", "sh", "-c", "exit 7").returncode == 7
        logs = agentcage(home, "logs", "life", "--decision", "blocked").stdout
        assert "pypi.org" in logs and "allowed.example.test" not in logs
        summary = agentcage(home, "logs", "life", "--summary").stdout
        assert "outbound: allowed" in summary and "blocked 1x  outbound pypi.org" in summary
        assert agentcage(home, "stop", "life").returncode == 0
        assert our_namespaces(home) <= before  # nothing new (others' may have gone)
        assert agentcage(home, "exec", "life", "--", "true").returncode == 1
        assert agentcage(home, "start", "life").returncode == 0
        assert agentcage(home, "restart", "life").returncode == 0
        assert agentcage(home, "exec", "life", "--", "true").returncode == 0
        follow = subprocess.Popen([*AGENTCAGE, "logs", "life", "-f"], stdout=subprocess.PIPE,
                                  text=True, env={**os.environ,
                                                  "AGENTCAGE_HOME": str(home / "home")})
        try:
            agentcage(home, "exec", "life", "--", "curl", "-sS", "-m", "8", "-o", "/dev/null",
                      "--noproxy", "*", "https://allowed.example.test/followed")
            deadline = time.monotonic() + 10
            seen = ""
            while time.monotonic() < deadline and "/followed" not in seen:
                ready, _, _ = select.select([follow.stdout], [], [], 0.5)
                if ready:  # raw reads: a buffered readline would hide lines from select
                    seen += os.read(follow.stdout.fileno(), 65536).decode()
            assert "/followed" in seen
        finally:
            follow.kill()
            follow.wait()
    finally:
        r = agentcage(home, "destroy", "life", "-y")
    assert r.returncode == 0, r.stderr
    assert our_namespaces(home) <= before  # nothing new (others' may have gone)
    assert our_mounts(home) <= mounts_before
    assert not (home / "home" / "cages" / "life").exists()
    links = subprocess.run(["ip", "-n", net.uplink_ns, "-o", "link"], capture_output=True,
                           text=True).stdout
    assert "agc" not in links  # nothing of the cage was ever in the uplink namespace


@pytest.mark.netns
def test_service_cage_runs_its_command_until_stopped(home, net):
    project = make_project(home / "work")
    config = home / "svc.yaml"
    config.write_text(cage_yaml(net, "svc", ["allowed.example.test"]).replace(
        "name: svc", "name: svc\nlifecycle: service\ncontainer:\n  command: [sh, -c, "
        "'curl -sS -m 8 -o /dev/null -w \"%{http_code}\\n\" https://allowed.example.test/; "
        "exec sleep 61.5']"))
    r = agentcage(home, "cage", "create", "-c", str(config), "--project", str(project))
    assert r.returncode == 0, r.stderr
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and "200" not in agentcage(
                home, "logs", "svc", "--workload").stdout:
            time.sleep(0.2)
        assert agentcage(home, "logs", "svc", "--workload").stdout.strip() == "200"
        assert "sleep\x0061.5\x00" in _cmdlines()
        assert agentcage(home, "stop", "svc").returncode == 0
        assert "sleep\x0061.5\x00" not in _cmdlines()
    finally:
        assert agentcage(home, "destroy", "svc", "-y").returncode == 0


@pytest.mark.netns
def test_prune_removes_a_cage_whose_gateway_died_and_keeps_a_live_one(home, net):
    project = make_project(home / "work")
    before = our_namespaces(home)
    for name in ("dead", "alive"):
        config = home / f"{name}.yaml"
        config.write_text(cage_yaml(net, name, ["allowed.example.test"]))
        r = agentcage(home, "cage", "create", "-c", str(config), "--project", str(project))
        assert r.returncode == 0, r.stderr
    import json

    runtime = json.loads((home / "home" / "cages" / "dead" / "runtime.json").read_text())
    os.kill(runtime["gateway_pid"], signal.SIGKILL)
    time.sleep(0.3)
    assert "broken" in agentcage(home, "ls").stdout
    r = agentcage(home, "prune", "-y")
    assert r.returncode == 0 and "dead" in r.stdout and "alive" not in r.stdout
    assert not any(runtime["plan"]["suffix"] in n for n in our_namespaces(home))
    assert agentcage(home, "exec", "alive", "--", "true").returncode == 0
    assert agentcage(home, "destroy", "alive", "-y").returncode == 0
    assert our_namespaces(home) <= before  # nothing new (others' may have gone)


def run_args(net) -> list[str]:
    return ["--uplink", f"netns:{net.uplink_ns}", "--dns", net.dns_address,
            "--trust-network", "10.200.0.0/16", "--upstream-ca", str(net.ca_cert_path),
            "--allow", "allowed.example.test"]


@pytest.mark.netns
def test_ephemeral_run_leaves_nothing(home, net):
    project = make_project(home / "work")
    before = our_namespaces(home)
    r = agentcage(home, "run", "minimal", "--project", str(project), *run_args(net), "--",
                  "sh", "-c", "curl -sS -m 8 -o /dev/null -w '%{http_code}' "
                              "https://allowed.example.test/ && exit 3")
    assert r.returncode == 3 and r.stdout == "200", r.stderr
    assert our_namespaces(home) <= before  # nothing new (others' may have gone)
    assert list((home / "home" / "cages").iterdir()) == []
    stop_zygotes(home / "home")  # not the cage's: what outlives it must be its gateway
    assert not any(str(home) in p and "agentcage.gateway" in p for p in _cmdlines())


@pytest.mark.netns
def test_a_scaffold_runs_without_pydantic_or_yaml_and_refuses_as_the_model_does(home, net):
    """`run SCAFFOLD` takes the scaffold's stored validated form (config/forms.py); what it
    cannot vouch for goes to the model, whose refusal is the one line printed."""
    project = make_project(home / "work")
    env = {**os.environ, "AGENTCAGE_HOME": str(home / "home")}
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "agentcage.cli", "run",
                        "minimal", "--project", str(project), *run_args(net), "--", "true"],
                       env=env, capture_output=True, text=True, timeout=90, cwd=home,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines()
                if line.startswith("import time:")}
    assert "agentcage.backends.namespace" in imported  # the measure sees the run's imports
    assert not {m for m in imported if m.split(".")[0] in ("pydantic", "yaml")}
    for args, line in [
        (["--uplink", "vpn"], "error: command-line options: gateway.uplink = 'vpn': write host "
                              "or netns:NAME (an existing network namespace)"),
        (["--dns", "resolver"], "error: command-line options: dns_servers.0 = 'resolver': "
                                "write an IP address, e.g. 10.200.0.53"),
        (["--name", "yes"], "error: scaffold minimal: name = True: Input should be a valid "
                            "string"),
    ]:
        r = agentcage(home, "run", "minimal", "--project", str(project), *args, "--", "true")
        assert (r.returncode, r.stderr) == (1, line + "\n"), args
    assert list((home / "home" / "cages").iterdir()) == []


@pytest.mark.netns
def test_a_run_whose_gateway_does_not_start_runs_nothing(home, net):
    """The command's sandbox is made while the gateway starts; a gateway that then fails (an
    inspector that does not load) means the command never runs, and nothing is left."""
    project = make_project(home / "work")
    config = home / "cage.yaml"
    config.write_text(cage_yaml(net, "nogw", [], extra="inspectors: [{name: 'no.such:Factory'}]\n"))
    before = our_namespaces(home)
    r = agentcage(home, "run", "minimal", "-c", str(config), "--name", "nogw", "--project",
                  str(project), "--", "sh", "-c", "touch /workspace/ran")
    assert r.returncode == 1 and "the gateway of cage nogw did not start" in r.stderr, r.stderr
    assert not (project / "ran").exists()
    assert our_namespaces(home) <= before
    assert list((home / "home" / "cages").iterdir()) == []
    # the control: the same run with a gateway that starts runs the command
    config.write_text(cage_yaml(net, "nogw", []))
    r = agentcage(home, "run", "minimal", "-c", str(config), "--name", "nogw", "--project",
                  str(project), "--", "sh", "-c", "touch /workspace/ran")
    assert r.returncode == 0 and (project / "ran").exists(), r.stderr


@pytest.mark.netns
def test_ephemeral_run_cleans_up_on_interrupt(home, net):
    project = make_project(home / "work")
    before = our_namespaces(home)
    env = {**os.environ, "AGENTCAGE_HOME": str(home / "home")}
    # A shell that runs a job with & (as a CI runner may) leaves SIGINT ignored, and children
    # inherit that; give the CLI the disposition a terminal user's Ctrl-C meets.
    proc = subprocess.Popen([*AGENTCAGE, "run", "minimal", "--project", str(project),
                             *run_args(net), "--", "sleep", "61.25"], env=env, cwd=home,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 30
    ours = "sleep\x0061.25\x00"  # this test's workload, not some other process on the host
    while time.monotonic() < deadline and ours not in _cmdlines():
        time.sleep(0.1)
    assert ours in _cmdlines(), "the workload never started"
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    assert (proc.returncode, err.strip()) == (130, "interrupted")  # after the cleanup below
    assert our_namespaces(home) <= before  # nothing new (others' may have gone)
    stop_zygotes(home / "home")
    assert not any(p == ours or (str(home) in p and "agentcage.gateway" in p)
                   for p in _cmdlines())
    assert list((home / "home" / "cages").iterdir()) == []


def _cmdlines() -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                out.append(Path(f"/proc/{pid}/cmdline").read_text())
    return out


@pytest.mark.netns
def test_interactive_run_gets_a_terminal_but_cannot_inject_into_it(home, net):
    project = make_project(home / "work")
    inner = ("tty; python3 -c 'import fcntl, termios; fcntl.ioctl(0, termios.TIOCSTI, b\"x\")' "
             "2>&1 | tail -1")
    argv = [*AGENTCAGE, "run", "minimal", "--project", str(project), *run_args(net), "--",
            "sh", "-c", inner]
    env = {**os.environ, "AGENTCAGE_HOME": str(home / "home")}
    shown, _rc = drive(argv, [], env)
    lines = [line.strip() for line in shown.splitlines() if line.strip()]
    assert lines[0].startswith("/dev/"), shown  # a terminal (control)
    assert "Operation not permitted" in lines[-1], shown  # TIOCSTI refused by seccomp


@pytest.mark.netns
def test_shell_has_job_control_ctrl_c_and_exits_with_the_shells_status(home, net):
    create_cage(home, net, "tty", [])
    env = {**os.environ, "AGENTCAGE_HOME": str(home / "home")}
    # Ctrl-C once the job runs in the foreground (it says so: the quotes keep the word out
    # of the command line's echo)
    shown, rc = drive([*AGENTCAGE, "shell", "tty"],
                      [b"sh -c 'echo run''ning; exec sleep 30'\r", ("running", b"\x03"),
                       b"echo after $?\r", b"exit 7\r"], env)
    # Ctrl-C reached the job in the cage (status 130), not agentcage; the shell went on
    assert "after 130" in shown, shown
    assert "Cannot set tty process group" not in shown, shown
    assert rc == 7, shown
    # the same from a caller that ignores SIGINT and SIGQUIT (a background job's lot): the
    # cage's commands do not inherit that
    shown, rc = drive(["sh", "-c", 'trap "" INT QUIT; exec "$0" "$@"', *AGENTCAGE, "shell",
                       "tty"],
                      [b"sh -c 'echo run''ning; exec sleep 30'\r", ("running", b"\x03"),
                       b"echo after $?\r", b"exit 7\r"], env)
    assert "after 130" in shown and rc == 7, shown
    # without a terminal, `shell` runs the commands it reads, with their status too
    r = subprocess.run([*AGENTCAGE, "shell", "tty"], input="echo piped; exit 4\n", env=env,
                       capture_output=True, text=True, timeout=60)
    assert (r.stdout, r.returncode) == ("piped\n", 4), r.stderr
    # `exec` exits with the command's status, with or without a terminal
    assert agentcage(home, "exec", "tty", "--", "sh", "-c", "exit 5").returncode == 5
    assert drive([*AGENTCAGE, "exec", "tty", "--", "sh", "-c", "exit 6"], [], env)[1] == 6
