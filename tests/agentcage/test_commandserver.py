"""The command server (backends/commandserver.py, commandclient.py): `run`, `cage create`,
`start`, `stop`, `restart` and `destroy` served by a resident process give what the same
commands give in-process (output, exit codes, each kind of error), a key asked for by `run -s`
is typed at the person's terminal and never echoed, Ctrl-C before the agent starts is
"interrupted" and the client's death stops the command, and a server that may not serve a
client (another process state, changed code, another state root) is not used. Real cages in
the fake internet, the CLI as a user runs it."""

# ruff: noqa: F811  (the `home` fixture, imported from test_cli, is every test's argument)
from __future__ import annotations

import json
import os
import pty
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from agentcage import commandclient
from agentcage.runs import project_cage_name
from tests.agentcage.conftest import AGENT_UID, cage_yaml, make_project
from tests.agentcage.test_cli import (  # noqa: F401
    AGENTCAGE,
    home,
    our_namespaces,
    run_args,
    stop_zygotes,
)
from tests.agentcage.test_execserver import server_pid

pytestmark = pytest.mark.netns

OFF = {"AGENTCAGE_COMMAND_SERVER": "off"}
KEEPING = """
secret_injection:
  - env: API_TOKEN
    inject_to: [api.example.test]
"""


def _env(root: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "AGENTCAGE_HOME": str(root / "home"), **extra}


class Outcome:
    """A command's exit code, output and error output (the import timing taken out), and
    whether it was served (its process imported none of the full CLI)."""

    def __init__(self, r: subprocess.CompletedProcess[str]):
        modules = {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines()
                   if line.startswith("import time:") and "|" in line}
        assert "agentcage.commandclient" in modules  # the control: the list is real
        self.served = "click" not in modules
        self.seen = (r.returncode, r.stdout, "".join(
            line + "\n" for line in r.stderr.splitlines() if not line.startswith("import time:")))


def _cli(root: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
         stdin: int | None = subprocess.DEVNULL, **kw) -> Outcome:
    return Outcome(subprocess.run([sys.executable, "-X", "importtime", *AGENTCAGE[1:], *args],
                                  env=env or _env(root), capture_output=True, text=True,
                                  timeout=120, cwd=cwd or root, stdin=stdin, **kw))


def _server_up(root: Path, env: dict[str, str] | None = None) -> int:
    """The pid of the command server of `root`'s state (as this process finds it), once up."""
    return server_pid(commandclient.Place(str(root / "home")))


def _started(root: Path) -> int:
    """A command server for `root`: the first command, run in-process, starts it."""
    first = _cli(root, "stop", "nosuch")
    assert not first.served and first.seen[0] == 1
    return _server_up(root)


def test_served_commands_give_what_in_process_ones_give(home, net):
    project = make_project(home / "work")
    (home / "cage.yaml").write_text(cage_yaml(net, "same", []))
    (home / "bad.yaml").write_text("name: Bad_Name\nfoo: 1\n")
    root_owned = home / "rootproj"
    root_owned.mkdir(mode=0o755)
    _started(home)
    world = run_args(net)
    cases: list[tuple[tuple[str, ...], Path]] = [
        # each as a person types it, in the directory they are in: the cage.yaml named
        # relative to it, the project of `run` that directory itself
        (("cage", "create", "-c", "cage.yaml", "--project", str(project)), home),
        (("cage", "create", "-c", "cage.yaml", "--project", str(project)), home),  # in use
        (("stop", "same"), home),
        (("start", "same"), home),
        (("restart", "same"), home),
        (("cage", "stop", "same"), home),
        (("cage", "start", "same"), home),
        (("destroy", "same"), home),  # no terminal to ask on: refused
        (("cage", "destroy", "-y", "same"), home),
        (("destroy", "-y", "same"), home),  # no such cage
        (("cage", "create", "-c", "bad.yaml"), home),  # a bad cage.yaml: a line per problem
        (("cage", "create", "-c", "missing.yaml"), home),
        (("run", "minimal", *world, "--", "sh", "-c", "ls /workspace; echo err >&2; exit 7"),
         project),
        (("run", "minimal", "--project", str(root_owned), *world, "--", "true"), home),
        (("run", "nosuch-scaffold", "--", "true"), home),
        (("run", "minimal", "--project", str(project), "-x", "--", "true"), home),
        (("start", "../x"), home),
        (("run", "--help"), home),
    ]

    def each(env: dict[str, str], served: bool) -> list[tuple[int, str, str]]:
        seen = []
        for args, cwd in cases:
            outcome = _cli(home, *args, env=env, cwd=cwd)
            assert outcome.served == served, (args, outcome.seen)
            seen.append(outcome.seen)
        return seen

    on, alone = each(_env(home), True), each(_env(home, **OFF), False)
    for (args, _cwd), a, b in zip(cases, on, alone, strict=True):
        assert a == b, args
    # the controls: they are what they claim (a success, a refusal, an error)
    by_args = {" ".join(args): seen for (args, _cwd), seen in zip(cases, on, strict=True)}
    assert on[0] == (0, "cage same running\n", "")
    assert on[1][0] == 1 and on[1][2].startswith("error: ") and "same" in on[1][2]
    assert on[3] == (0, "cage same: start done\n", "")
    assert by_args["destroy same"][2].startswith("error: destroy cage same")
    bad = on[10][2].splitlines()
    assert len(bad) == 2 and "name = 'Bad_Name'" in bad[0] and "foo = 1" in bad[1]
    assert on[12] == (7, "README\n", "err\n")  # the directory it ran in: the project
    assert on[13][2].startswith(f"error: the project {root_owned} belongs to root")
    assert "No such option" in on[15][2] and on[17][1].startswith("Usage: agentcage run")
    assert list((home / "home" / "cages").iterdir()) == []


def test_the_server_a_first_run_starts_serves_the_next_run(home, net):
    """A server starts from its starter's state as the command began, the state its key
    names, not as the command left it: a `run` changes its own as it runs (here: a process
    started by a fresh Python's subprocess has glibc's two internal signals ignored, and the
    run handles one of them by the time it ends), and a server started from that would refuse
    every client."""
    project = home / "project"  # as bench/cage_startup.py's: nobody's, the cage's host_user
    project.mkdir()
    os.chown(project, 65534, 65534)
    run = ("run", "minimal", "--project", str(project), "--uplink", f"netns:{net.uplink_ns}",
           "--dns", net.dns_address, "--", "echo", "ran")
    spawner = [sys.executable, "-c", "import subprocess, sys; "
               "sys.exit(subprocess.run(sys.argv[1:]).returncode)"]

    def through_a_fresh_python() -> Outcome:
        return Outcome(subprocess.run([*spawner, sys.executable, "-X", "importtime",
                                       *AGENTCAGE[1:], *run], env=_env(home),
                                      capture_output=True, text=True, timeout=120, cwd=home,
                                      stdin=subprocess.DEVNULL))

    first = through_a_fresh_python()
    assert not first.served and first.seen == (0, "ran\n", "")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not list((home / "home" / "commands").glob("*.sock")):
        time.sleep(0.05)
    again = through_a_fresh_python()
    log = "".join(p.read_text() for p in (home / "home" / "commands").glob("*.log"))
    assert again.served and again.seen == first.seen, log
    assert "refused" not in log, log


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


class Screen:
    """A command on a new pty, its controlling terminal, as a person's terminal is."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            try:
                os.chdir(cwd)
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        self.shown = b""

    def wait_for(self, text: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.shown and time.monotonic() < deadline:
            if select.select([self.fd], [], [], 0.1)[0]:
                try:
                    self.shown += os.read(self.fd, 65536)
                except OSError:
                    break
        assert text.encode() in self.shown, self.shown[-800:]

    def type(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def end(self, timeout: float = 90) -> int:
        """Its exit code, once it has ended (all it showed read)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if select.select([self.fd], [], [], 0.1)[0]:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    break
                self.shown += data
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


def _anywhere_in_processes(value: str) -> list[str]:
    """Where `value` is on a command line or in an environment of a process of this host."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        for what in ("cmdline", "environ"):
            try:
                if value.encode() in Path(f"/proc/{pid}/{what}").read_bytes():
                    found.append(f"{pid} {what}")
            except OSError:
                continue
    return found


@pytest.mark.parametrize("mode", ["served", "in-process"])
def test_a_key_asked_for_at_a_terminal_is_hidden_and_stays_off_every_process(home, net, mode):
    project = make_project(home / "work")
    config = home / "keeping.yaml"
    config.write_text(cage_yaml(net, "ignored", ["api.example.test"], extra=KEEPING))
    name = project_cage_name("run", project)
    server = _started(home)
    env = _env(home, TERM="xterm", **(OFF if mode == "in-process" else {}))
    value, marker = "tok-" + secrets.token_hex(12), secrets.token_hex(6)
    script = ('echo "token:$API_TOKEN"; curl -sS -m 10 -o /dev/null -H "Authorization: Bearer '
              f'$API_TOKEN" https://api.example.test/{marker}; read x; echo "got $x"')
    screen = Screen([*AGENTCAGE, "run", "x", "-c", str(config), "--project", str(project),
                     "-s", "API_TOKEN", "--", "sh", "-c", script], env, project)
    screen.wait_for(f"API_TOKEN for {name} (hidden")
    # the control: served, the command runs in a child of the server; else in the client
    assert bool(_children(server)) == (mode == "served")
    screen.type(value.encode() + b"\r")
    screen.wait_for("token:agentcage:secret:API_TOKEN:")
    assert f"API_TOKEN stored for {name}".encode() in screen.shown
    time.sleep(0.3)  # the command waits at `read`: its key is in no process's argv or env
    assert _anywhere_in_processes(value) == []
    screen.type(b"done\r")
    assert screen.end() == 0, screen.shown[-800:]
    shown = screen.shown.decode(errors="replace")
    assert "got done" in shown and value not in shown  # the key was never echoed
    seen = [r for r in net.http_requests() if marker in r["path"]]
    (request,) = seen
    headers = {k.lower(): v for k, v in dict(request["headers"]).items()}
    assert headers["authorization"] == f"Bearer {value}"  # the gateway put the real one
    assert _anywhere_in_processes(value) == []


def test_a_served_prompt_is_shown_on_the_terminal_when_stderr_goes_elsewhere(home, net):
    """As getpass shows it on /dev/tty in-process: the client hands over its terminal."""
    project = make_project(home / "work")
    config = home / "keeping.yaml"
    config.write_text(cage_yaml(net, "ignored", ["api.example.test"], extra=KEEPING))
    server = _started(home)
    errors = home / "errors.txt"
    command = " ".join([*AGENTCAGE, "run", "x", "-c", str(config), "--project", str(project),
                        "-s", "API_TOKEN", "--", "true", "2>", str(errors)])
    screen = Screen(["sh", "-c", command], _env(home, TERM="xterm"), project)
    screen.wait_for("API_TOKEN for ")
    assert _children(server)  # served
    screen.type(b"tok-elsewhere\r")
    assert screen.end() == 0, errors.read_text()
    said = errors.read_text()
    assert "(hidden" not in said and "API_TOKEN stored for" in said


@pytest.mark.parametrize("mode", ["served", "in-process"])
def test_ctrl_c_before_the_agent_starts_is_interrupted_and_leaves_nothing(home, net, mode):
    project = make_project(home / "work")
    config = home / "keeping.yaml"
    config.write_text(cage_yaml(net, "ignored", ["api.example.test"], extra=KEEPING))
    server = _started(home)
    env = _env(home, TERM="xterm", **(OFF if mode == "in-process" else {}))
    screen = Screen([*AGENTCAGE, "run", "x", "-c", str(config), "--project", str(project),
                     "-s", "API_TOKEN", "--", "true"], env, project)
    screen.wait_for("API_TOKEN for ")
    assert bool(_children(server)) == (mode == "served")
    screen.type(b"\x03")  # Ctrl-C, at the hidden prompt
    assert screen.end() == 130
    assert screen.shown.decode().rstrip().endswith("interrupted"), screen.shown[-400:]
    assert list((home / "home" / "cages").iterdir()) == []  # nothing was kept of it


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.mark.parametrize("mode", ["served", "in-process"])
def test_ctrl_z_suspends_the_whole_command_and_fg_goes_on(home, net, mode):
    """At the hidden prompt (before the terminal is the cage's), in a shell with job control:
    Ctrl-Z stops the command's job, served too (the server's child with its client), and `fg`
    lets the person type the key and the run go on."""
    project = make_project(home / "work")
    config = home / "keeping.yaml"
    config.write_text(cage_yaml(net, "ignored", ["api.example.test"], extra=KEEPING))
    server = _started(home)
    env = _env(home, TERM="xterm", **(OFF if mode == "in-process" else {}))
    command = " ".join([*AGENTCAGE, "run", "x", "-c", str(config), "--project", str(project),
                        "-s", "API_TOKEN", "--", "echo", "went", "on"])
    screen = Screen(["bash", "-c", f'set -m; {command}; echo "stopped:$?"; read x; fg'], env,
                    project)
    screen.wait_for("API_TOKEN for ")
    session = _children(server)
    assert bool(session) == (mode == "served")
    screen.type(b"\x1a")  # Ctrl-Z
    screen.wait_for(f"stopped:{128 + signal.SIGTSTP}")
    for pid in session:  # the server's child stopped with its client (a signal on its way)
        deadline = time.monotonic() + 10
        while _state(pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _state(pid) == "T"
    screen.type(b"\r")  # the shell's `fg`
    for pid in session:
        deadline = time.monotonic() + 10
        while _state(pid) == "T" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _state(pid) != "T"
    time.sleep(0.3)  # back at its prompt (in-process: nothing to look at)
    screen.type(b"tok-after-fg\r")
    assert screen.end() == 0, screen.shown[-600:]
    assert b"went on" in screen.shown


def test_a_command_in_a_background_job_of_its_terminal_runs_in_process(home):
    """There the kernel's job control stops a job that reads the terminal or changes its
    modes, which it can do only for a process of the terminal's session: not the server's
    child."""
    _started(home)
    errors = home / "errors.txt"
    timed = " ".join([sys.executable, "-X", "importtime", *AGENTCAGE[1:], "stop", "nosuch"])
    outcomes = {}
    for job, line in (("foreground", f"{timed} 2> {errors}"),
                      ("background", f"{timed} 2> {errors} & wait")):
        screen = Screen(["sh", "-c", f"set -m; {line}"], _env(home), home)
        screen.end()
        text = errors.read_text()
        assert "error: no cage named 'nosuch'" in text
        outcomes[job] = Outcome(subprocess.CompletedProcess([], 1, "", text)).served
    assert outcomes == {"foreground": True, "background": False}


def _sleeping(tag: str) -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes() == f"sleep\0{tag}\0".encode():
                return True
        except OSError:
            continue
    return False


def test_a_signal_or_the_clients_death_stops_a_served_run(home, net):
    project = make_project(home / "work")
    server = _started(home)
    before = our_namespaces(home)
    marker = project / "started"
    results = {}
    for sig, tag in ((signal.SIGINT, "61.1"), (signal.SIGTERM, "61.2"),
                     (signal.SIGKILL, "61.3")):
        marker.unlink(missing_ok=True)
        proc = subprocess.Popen(
            [*AGENTCAGE, "run", "minimal", "--project", str(project), *run_args(net), "--",
             "sh", "-c", f"echo x > /workspace/started; exec sleep {tag}"], env=_env(home),
            cwd=home, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not marker.exists():
            time.sleep(0.05)
        assert marker.exists(), "the command never started"
        assert _sleeping(tag) and _children(server), "the control: it runs, served"
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=60)
        results[sig] = (proc.returncode, err)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (
                _sleeping(tag) or list((home / "home" / "cages").iterdir())):
            time.sleep(0.05)
        assert not _sleeping(tag), f"the command outlived its run ({sig!r})"
        assert list((home / "home" / "cages").iterdir()) == [], f"the cage stayed ({sig!r})"
    # as in-process (test_lean.py, test_runs.py): 128 + the signal, and one word
    assert results[signal.SIGINT] == (130, "\ninterrupted\n")
    assert results[signal.SIGTERM] == (143, "\nterminated\n")
    assert results[signal.SIGKILL][0] == -signal.SIGKILL
    assert our_namespaces(home) <= before


def test_a_client_whose_process_state_differs_is_refused(home):
    server = _started(home)
    ours = os.umask(0o022)
    os.umask(ours)
    control = _cli(home, "stop", "nosuch")
    assert control.served and control.seen[0] == 1
    # asked directly by a client of another umask, the server refuses: nothing is run
    key = commandclient.Place(str(home / "home")).key  # this process's: the server's
    (home / "cage.yaml").write_text("name: refused\n")
    project = make_project(home / "work")
    ask = ("import os, sys; os.umask(0o077); from agentcage import commandclient as c; "
           f"print(c.run(c.Place(sys.argv[1], {key!r}), ['cage', 'create', '-c', 'cage.yaml', "
           f"'--project', {str(project)!r}, '--no-start']))")
    asked = subprocess.run([sys.executable, "-c", ask, str(home / "home")], env=_env(home),
                           capture_output=True, text=True, timeout=90, cwd=home,
                           stdin=subprocess.DEVNULL)
    assert asked.stdout == "None\n", asked.stderr
    assert not (home / "home" / "cages" / "refused").exists()
    log = Path(commandclient.Place(str(home / "home")).log).read_text()
    assert "the client's Umask is not the server's" in log
    assert _children(server) == []


def test_another_state_roots_client_never_reaches_this_server(home):
    _started(home)
    (home / "cage.yaml").write_text("name: mine\n")
    project = make_project(home / "work")
    made = _cli(home, "cage", "create", "-c", "cage.yaml", "--project", str(project),
                "--no-start")
    assert made.served and made.seen == (0, "cage mine created\n", "")
    other = home / "other"
    # a client of another state root finds no server of its own, and runs in-process there
    r = _cli(home, "destroy", "-y", "mine", env=_env(home, AGENTCAGE_HOME=str(other)))
    assert not r.served and r.seen[0] == 1 and "no cage named 'mine'" in r.seen[2]
    # handed to this root's server all the same, it is refused, and nothing is run
    key = commandclient.Place(str(home / "home")).key
    ask = ("import sys; from agentcage import commandclient as c; "
           f"print(c.run(c.Place(sys.argv[1], {key!r}), ['destroy', '-y', 'mine']))")
    asked = subprocess.run([sys.executable, "-c", ask, str(home / "home")],
                           env=_env(home, AGENTCAGE_HOME=str(other)), capture_output=True,
                           text=True, timeout=90, cwd=home, stdin=subprocess.DEVNULL)
    assert asked.stdout == "None\n", asked.stderr
    assert (home / "home" / "cages" / "mine").is_dir()
    log = Path(commandclient.Place(str(home / "home")).log).read_text()
    assert f"the client's state root is {other}, not this server's" in log
    # the control: the same root named relatively, from where the client is, is served
    r = _cli(home, "destroy", "-y", "mine", env=_env(home, AGENTCAGE_HOME="home"))
    assert r.served and r.seen == (0, "cage mine: destroyed\n", "")
    assert not (home / "home" / "cages" / "mine").exists()


def test_a_server_stopped_while_it_starts_never_serves(home):
    """`agentcage zygote stop` just after the command that started a server, while the server
    imports: it exits instead of binding its socket (the control: `_started`, where it binds)."""
    first = _cli(home, "stop", "nosuch")
    assert not first.served
    r = subprocess.run([*AGENTCAGE, "zygote", "stop"], env=_env(home), capture_output=True,
                       text=True, timeout=60, cwd=home, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    logs = home / "home" / "commands"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "stopped before it was ready" not in "".join(
            log.read_text() for log in logs.glob("*.log")):
        time.sleep(0.1)
    assert "stopped before it was ready" in "".join(log.read_text() for log in logs.glob("*.log"))
    assert list(logs.glob("*.sock")) == []
    assert not _cli(home, "stop", "nosuch").served


def test_a_server_whose_code_changed_is_not_used(home):
    """An installation (a copy of the package, first on PYTHONPATH) upgraded under its
    running server: the next command runs in-process, and the server goes."""
    code = Path(tempfile.mkdtemp(prefix="agentcage-code-"))
    try:
        shutil.copytree(Path(commandclient.__file__).parent, code / "agentcage",
                        ignore=shutil.ignore_patterns("__pycache__"))
        env = _env(home, PYTHONPATH=str(code))
        first = _cli(home, "stop", "nosuch", env=env)
        assert not first.served
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _cli(home, "stop", "nosuch", env=env).served:
            time.sleep(0.2)
        served = _cli(home, "stop", "nosuch", env=env)
        assert served.served, "the control: the copy's server serves"
        time.sleep(0.01)
        cages = code / "agentcage" / "cages.py"
        cages.write_text(cages.read_text() + "\n# upgraded\n")
        after = _cli(home, "stop", "nosuch", env=env)
        assert not after.served and after.seen == served.seen
        logs = list((home / "home" / "commands").glob("*.log"))
        said = "".join(log.read_text() for log in logs)
        assert "stale server: " in said and "cages.py changed on disk" in said, said
    finally:
        stop_zygotes(home / "home")
        shutil.rmtree(code, ignore_errors=True)


def test_a_rootless_users_commands_are_served_in_their_holders_namespaces(net):
    """uid 1000 on a host played by a namespace: the command server is the user's, in the
    namespaces of their cages' holder, and gives what the commands give in-process."""
    from fakenet import FakeHost
    from tests.agentcage.hosted import AsUser, open_to_users

    root = Path(tempfile.mkdtemp(prefix="agentcage-rootless-served-"))
    os.chmod(root, 0o755)
    try:
        with FakeHost(net.internet) as host:
            open_to_users(host)
            user = AsUser(host, root, AGENT_UID)
            (root / "cage.yaml").write_text("name: theirs\ncontainer: {limits: none}\n")
            os.chown(root / "cage.yaml", AGENT_UID, AGENT_UID)
            project = make_project(root / "work")

            def timed(*args: str, **env: str) -> Outcome:
                base = {"PATH": os.environ["PATH"], "AGENTCAGE_HOME": str(user.state),
                        "HOME": str(root), "LANG": "C.UTF-8", **env}
                return Outcome(host.run([*user.as_user, sys.executable, "-X", "importtime",
                                         *AGENTCAGE[1:], *args], env=base,
                                        capture_output=True, text=True, timeout=90, cwd=root,
                                        stdin=subprocess.DEVNULL))

            first = timed("stop", "nosuch")
            assert not first.served and first.seen[0] == 1, first.seen
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not timed("stop", "nosuch").served:
                time.sleep(0.2)
            seen = {}
            for mode, env in (("served", {}), ("in-process", OFF)):
                made = timed("cage", "create", "-c", "cage.yaml", "--project", str(project),
                             "--no-start", **env)
                gone = timed("destroy", "-y", "theirs", **env)
                assert made.served == gone.served == (mode == "served"), (mode, made.seen)
                seen[mode] = (made.seen, gone.seen)
            assert seen["served"] == seen["in-process"]
            assert seen["served"][0] == (0, "cage theirs created\n", "")
            # the server: the user's on the host, in the holder's user namespace
            servers = user.sh(f"pgrep -f '^{sys.executable} -m agentcage.backends.command'"
                              ).stdout.split()
            assert servers, "no command server on the host"
            holder = user.sh(f"cat {user.state}/rootless/holder.json").stdout
            holder_pid = json.loads(holder)["holder"]
            for pid in servers:
                status = user.sh(f"grep '^Uid:' /proc/{pid}/status").stdout.split()
                assert status[1] == str(AGENT_UID)
                ns = user.sh(f"readlink /proc/{pid}/ns/user /proc/{holder_pid}/ns/user").stdout
                first_ns, second_ns = ns.split()
                assert first_ns == second_ns
            user("prune", "-y")
    finally:
        shutil.rmtree(root, ignore_errors=True)
