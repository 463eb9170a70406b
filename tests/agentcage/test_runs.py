"""`agentcage run` as a person uses it, run as a real subprocess in the fake internet: `-s`
asks for a secret once and keeps it for the project, the agent's named volumes are kept
between runs, one run at a time per project, options before `--` are agentcage's (parsed or
refused, never run), a root-owned project says what to do, `cage update` keeps the options of
`create`, and a session can always be left (Ctrl-] twice) or hung up on, leaving nothing."""

# ruff: noqa: F811  (the `home` fixture, imported from test_cli, is every test's argument)
from __future__ import annotations

import json
import os
import pty
import secrets
import select
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from agentcage.runs import project_cage_name
from tests.agentcage.conftest import cage_yaml, make_project
from tests.agentcage.test_cli import (  # noqa: F401
    AGENTCAGE,
    agentcage,
    create_cage,
    home,
    our_namespaces,
    run_args,
)
from tests.terminal_driver import drive

KEEPING = """
container:
  volumes: [".:/workspace:rw", "home:/home/agent"]
secret_injection:
  - env: API_TOKEN
    inject_to: [api.example.test]
"""


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "AGENTCAGE_HOME": str(home / "home")}


def _run(home: Path, *args: str, stdin: str | None = None, timeout: float = 120):
    return subprocess.run([*AGENTCAGE, *args], env=_env(home), capture_output=True, text=True,
                          timeout=timeout, cwd=home, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def _config(home: Path, net) -> Path:
    """A cage.yaml for `run -c`: an injected API_TOKEN and a named volume at the home."""
    config = home / "keeping.yaml"
    config.write_text(cage_yaml(net, "ignored", ["api.example.test"], extra=KEEPING))
    return config


def _listing(home: Path) -> dict[str, dict]:
    return {row["name"]: row for row in json.loads(agentcage(home, "ls", "--json").stdout)["cages"]}


def _received(net, marker: str) -> str:
    (seen,) = [r for r in net.http_requests() if marker in r["path"]]
    return {k.lower(): v for k, v in dict(seen["headers"]).items()}["authorization"]


@pytest.mark.netns
def test_a_secret_is_asked_for_once_and_the_agents_state_is_kept_per_project(home, net):
    project = make_project(home / "work")
    config = _config(home, net)
    name = project_cage_name("run", project)
    value, marker = "tok-" + secrets.token_hex(12), secrets.token_hex(6)
    run = ["run", "x", "-c", str(config), "--project", str(project)]
    script = ('read line; echo "$API_TOKEN|$line"; echo kept > ~/note; '
              'curl -sS -m 10 -o /dev/null -H "Authorization: Bearer $API_TOKEN" '
              f"https://api.example.test/{marker}")
    # the value is read from stdin (one line: the rest is the command's), never argv
    r = _run(home, *run, "-s", "API_TOKEN", "--", "sh", "-c", script,
             stdin=f"{value}\nsecond line\n")
    assert r.returncode == 0, r.stderr
    placeholder, line = r.stdout.strip().split("|")
    assert placeholder.startswith("agentcage:secret:API_TOKEN:") and line == "second line"
    assert f"API_TOKEN stored for {name}" in r.stderr
    assert _received(net, marker) == f"Bearer {value}"  # the gateway put the real one
    assert value not in r.stdout + r.stderr
    kept = _listing(home)[name]
    assert (kept["status"], kept["kept"]) == ("kept", ["secrets", "volumes"])
    volume = home / "home" / "cages" / name / "volumes" / "home"
    st = volume.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o700, 1000)
    assert (volume / "note").read_text() == "kept\n"
    assert not (home / "home" / "cages" / name / "audit.jsonl").exists()  # the rest went

    # the next run of the project asks nothing (with nothing on stdin it could not) and
    # finds the secret, its placeholder and the agent's home as they were
    again = _run(home, *run, "-s", "API_TOKEN", "--", "sh", "-c", 'cat ~/note; echo "$API_TOKEN"')
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"kept\n{placeholder}\n" and "stored" not in again.stderr

    # --fresh: the agent's state starts empty; the secret stays
    fresh = _run(home, *run, "--fresh", "--", "sh", "-c", 'ls -A ~; echo "$API_TOKEN"')
    assert (fresh.returncode, fresh.stdout) == (0, f"{placeholder}\n"), fresh.stderr

    # --forget: used this once more, then removed; the next -s asks again
    forgot = _run(home, *run, "-s", "API_TOKEN", "--forget", "--", "printenv", "API_TOKEN")
    assert (forgot.returncode, forgot.stdout) == (0, f"{placeholder}\n"), forgot.stderr
    assert _listing(home)[name]["kept"] == ["volumes"]
    asks = _run(home, *run, "-s", "API_TOKEN", "--", "true")
    assert asks.returncode == 1 and "empty secret value refused" in asks.stderr
    assert _listing(home)[name]["kept"] == ["volumes"]  # a refused run changes nothing kept

    r = agentcage(home, "destroy", "-y", name)
    assert r.returncode == 0 and name not in _listing(home), r.stderr


@pytest.mark.netns
def test_a_secret_set_for_a_name_serves_a_run_of_that_name(home, net):
    project = make_project(home / "work")
    r = _run(home, "secret", "set", "mine", "API_TOKEN", stdin="tok-1\n")
    assert r.returncode == 0, r.stderr
    listed = json.loads(agentcage(home, "secret", "list", "mine", "--json").stdout)
    (entry,) = listed["secrets"]
    r = _run(home, "run", "x", "-c", str(_config(home, net)), "--name", "mine", "--project",
             str(project), "-s", "API_TOKEN", "--", "printenv", "API_TOKEN")
    assert (r.returncode, r.stdout.strip()) == (0, entry["placeholder"]), r.stderr


@pytest.mark.netns
def test_s_refuses_a_secret_the_cage_injects_nowhere(home, net):
    project = make_project(home / "work")
    r = _run(home, "run", "minimal", "--project", str(project), *run_args(net), "-s", "NOPE",
             "--", "true", stdin="value\n")
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1] == (
        "error: -s NOPE: the cage injects no such secret (its secret_injection rules and "
        "relays name: none); add a rule with -c cage.yaml")
    assert list((home / "home" / "cages").iterdir()) == []  # nothing was kept of it


@pytest.mark.netns
def test_one_run_per_project_at_a_time_and_a_dead_runs_remains_are_cleaned_up(home, net):
    project = make_project(home / "work")
    name = project_cage_name("minimal", project)
    before = our_namespaces(home)
    marker = project / "started"
    first = subprocess.Popen(
        [*AGENTCAGE, "run", "minimal", "--project", str(project), *run_args(net), "--", "sh",
         "-c", "touch /workspace/started; exec sleep 120"], env=_env(home), cwd=home,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the first run never started"
        second = _run(home, "run", "minimal", "--project", str(project), *run_args(net), "--",
                      "true")
        assert second.returncode == 1
        assert (f"a run of this project is going as cage {name} (pid {first.pid}): "
                f"`agentcage exec {name} -- COMMAND` joins it") in second.stderr
        joined = agentcage(home, "exec", name, "--", "sh", "-c", "ls /workspace/started")
        assert joined.returncode == 0, joined.stderr
        # killed outright: no cleanup of its own; the next run of the project does it
        first.kill()
        first.communicate(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    third = _run(home, "run", "minimal", "--project", str(project), *run_args(net), "--",
                 "true")
    assert third.returncode == 0, third.stderr
    assert list((home / "home" / "cages").iterdir()) == []
    assert our_namespaces(home) <= before


@pytest.mark.netns
def test_options_before_the_command_are_agentcages_never_the_commands(home, net):
    project = create_cage(home, net, "opts", [])
    hint = "a command's own options go after --"
    for args in (["exec", "opts", "-s", "egress", "--", "touch", "/workspace/ran"],
                 ["exec", "opts", "touch", "-c", "/workspace/ran"],
                 ["run", "minimal", "--project", str(project), "-x", "--", "touch",
                  "/workspace/ran"]):
        r = agentcage(home, *args)
        assert r.returncode == 1 and "No such option" in r.stderr and hint in r.stderr, args
        assert len(r.stderr.splitlines()) == 1, r.stderr
    for args in (["logs", "opts", "-s", "egress"], ["shell", "opts", "--privileged"]):
        r = agentcage(home, *args)
        assert r.returncode == 1 and "No such option" in r.stderr, (args, r.stderr)
    # an option of shell's own, refused where it cannot hold: the host's root is no layer
    r = agentcage(home, "shell", "opts", "--as-root")
    assert r.returncode == 1 and "--as-root needs a cage with container.image" in r.stderr
    assert not (project / "ran").exists()  # nothing ran
    # after --, everything is the command's, dashes included (the control)
    r = agentcage(home, "exec", "opts", "--", "sh", "-c", "echo -s; touch /workspace/ran")
    assert (r.returncode, r.stdout) == (0, "-s\n") and (project / "ran").exists()
    r = agentcage(home, "run", "minimal", "--project", str(project), *run_args(net), "--",
                  "echo", "-s", "KEY")
    assert (r.returncode, r.stdout) == (0, "-s KEY\n"), r.stderr


@pytest.mark.netns
def test_a_root_owned_project_says_what_to_do_and_as_user_does_it(home, net):
    project = home / "rootproj"
    project.mkdir(mode=0o755)  # root's, as a project made in the README's "as root" start
    r = agentcage(home, "run", "minimal", "--project", str(project), *run_args(net), "--",
                  "true")
    assert r.returncode == 1
    assert r.stderr == (
        f"error: the project {project} belongs to root, and a cage never runs as root: give "
        f"it to the user who works in it (chown -R USER {project}) or run the cage as a uid "
        "that can write it (--as-user UID, or container.host_user)\n")
    os.chown(project, 0, 1000)
    os.chmod(project, 0o775)  # uid 1000's group may write it: --as-user 1000 can
    r = agentcage(home, "run", "minimal", "--project", str(project), *run_args(net),
                  "--as-user", "1000", "--", "touch", "/workspace/made")
    assert r.returncode == 0, r.stderr
    assert (project / "made").stat().st_uid == 1000


@pytest.mark.netns
def test_a_users_project_in_roots_group_runs_in_the_users_own_group(home, net):
    """A project a user owns in group 0 (as a copy made by root often is): the cage runs as
    its owner, never in root's group."""
    project = home / "grouped"
    project.mkdir(mode=0o755)
    os.chown(project, 1000, 0)
    r = agentcage(home, "run", "minimal", "--project", str(project), *run_args(net), "--",
                  "sh", "-c", "id -g > /workspace/gid")
    assert r.returncode == 0, r.stderr
    # in the cage, and on the host (the file it made belongs to the user's group, not root's)
    assert int((project / "gid").read_text()) != 0
    assert (project / "gid").stat().st_gid not in (0, None)


def _bare_yaml(net, name: str, allow: list[str]) -> str:
    """A cage.yaml without the test world's trust: given on the command line instead."""
    return (f"name: {name}\ndomains: {{mode: allowlist, allow: [{', '.join(allow)}]}}\n"
            f"dns_servers: [{net.dns_address}]\ngateway: {{uplink: 'netns:{net.uplink_ns}'}}\n")


@pytest.mark.netns
def test_update_keeps_the_options_given_at_create(home, net):
    project = make_project(home / "work")
    config = home / "bare.yaml"
    config.write_text(_bare_yaml(net, "upd", ["api.example.test"]))
    r = agentcage(home, "cage", "create", "-c", str(config), "--project", str(project),
                  "--trust-network", "10.200.0.0/16", "--upstream-ca", str(net.ca_cert_path))
    assert r.returncode == 0, r.stderr
    curl = ["exec", "upd", "--", "curl", "-sS", "-m", "10", "-o", "/dev/null", "-w",
            "%{http_code}", "https://api.example.test/"]
    assert agentcage(home, *curl).stdout == "200"  # the control: the options are in force
    config.write_text(_bare_yaml(net, "upd", ["api.example.test", "other.example.test"]))
    r = agentcage(home, "cage", "update", "upd", "-c", str(config))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("cage upd: updated domains; the running gateway reloads the "
                                "domain lists live (kept from create: --trust-network, "
                                "--upstream-ca)")
    config.write_text(_bare_yaml(net, "upd", ["api.example.test"]) + "rate_limit: {burst: 60}\n")
    r = agentcage(home, "cage", "update", "upd", "-c", str(config))
    assert r.returncode == 0 and "restarted" in r.stdout, r.stdout + r.stderr
    assert agentcage(home, *curl).stdout == "200"  # not a 502: the upstream is still trusted


@pytest.mark.netns
def test_ctrl_bracket_twice_leaves_a_command_that_ignores_ctrl_c(home, net):
    project = make_project(home / "work")
    stuck = ["sh", "-c", "trap '' INT; echo stuck; while :; do sleep 1; done"]
    keys = [b"\x03", b"\x03", b"\x1d\x1d"]  # Ctrl-C twice: ignored; then the escape
    shown, code = drive([*AGENTCAGE, "run", "minimal", "--project", str(project),
                         *run_args(net), "--", *stuck], keys, _env(home), timeout=90,
                        after="stuck")
    assert code == 130, shown
    assert "stuck" in shown and "left the session (Ctrl-] twice)" in shown
    assert list((home / "home" / "cages").iterdir()) == []  # the run cleaned up after it
    # the control: the same command without the escape is still there when time is up
    shown, code = drive([*AGENTCAGE, "run", "minimal", "--project", str(project),
                         *run_args(net), "--", *stuck], [b"\x03"], _env(home), timeout=8,
                        after="stuck")
    assert code != 130 and "left the session" not in shown


@pytest.mark.netns
def test_a_run_whose_terminal_hangs_up_leaves_nothing(home, net):
    project = make_project(home / "work")
    before = our_namespaces(home)
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execvpe(AGENTCAGE[0], [*AGENTCAGE, "run", "minimal", "--project", str(project),
                                      *run_args(net), "--", "sh", "-c",
                                      "echo ready; exec sleep 120"], _env(home))
        finally:
            os._exit(127)
    shown = b""
    deadline = time.monotonic() + 60
    while b"ready" not in shown and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.5)[0]:
            shown += os.read(fd, 65536)
    assert b"ready" in shown, shown
    os.close(fd)  # the terminal goes away: its session gets SIGHUP
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGHUP
    assert list((home / "home" / "cages").iterdir()) == []
    assert our_namespaces(home) <= before


@pytest.mark.netns
def test_a_session_whose_cage_is_stopped_elsewhere_ends_with_the_shells_status(home, net):
    create_cage(home, net, "stopped", [])
    # another terminal: once the session's command runs, `agentcage stop` (a process of its
    # own, so that this one forks the session's terminal with no thread beside it)
    other = subprocess.Popen(
        ["sh", "-c", "for i in $(seq 300); do pgrep -f 'sleep 61[.]25' >/dev/null && break; "
                     'sleep 0.1; done; exec "$@"', "sh", *AGENTCAGE, "stop", "stopped"],
        env=_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    screen, code = drive([*AGENTCAGE, "exec", "stopped", "--", "sh", "-c",
                          "echo up; exec sleep 61.25"], [], _env(home), timeout=60)
    assert other.wait(timeout=60) == 0, other.stderr.read() if other.stderr else ""
    assert "up" in screen
    assert code == 128 + signal.SIGTERM, screen  # as a shell says it, not Python's -15 (241)
