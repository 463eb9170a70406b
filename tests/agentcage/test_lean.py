"""The lean path of `agentcage exec NAME -- CMD` and `agentcage shell NAME`: which forms take it,
that it imports none of the CLI's heavy dependencies, and that what a user sees (exit codes,
output, one-line errors, an interrupt) is exactly what the full CLI gives for the same request."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from agentcage import lean
from tests.agentcage.test_cli import AGENTCAGE, agentcage, create_cage, home  # noqa: F401  (fixture)
from tests.terminal_driver import drive

# the console script's entry point, as the generated `agentcage` script calls it
ENTRY = [sys.executable, "-c", "from agentcage.lean import entry; entry()"]
HEAVY = ("click", "rich", "pydantic", "yaml", "mitmproxy", "agentcage.cages", "agentcage.cli",
         "agentcage.config", "agentcage.secrets.store")


@pytest.mark.parametrize(("args", "plain"), [
    (["exec", "web", "--", "true"], ("web", ["true"])),
    (["cage", "exec", "web", "--", "sh", "-c", "exit 3"], ("web", ["sh", "-c", "exit 3"])),
    (["exec", "web", "--", "ls", "--", "-x"], ("web", ["ls", "--", "-x"])),  # only the first --
    (["exec", "web", "--", "--help"], ("web", ["--help"])),  # the command's own option
    (["shell", "web"], ("web", None)),
    (["cage", "shell", "web"], ("web", None)),
    # everything else is the full CLI's to parse and report
    (["exec", "web", "true"], None),  # no --
    (["exec", "web", "--"], None),  # no command
    (["exec", "--help"], None),
    (["exec", "-h", "web", "--", "true"], None),
    (["exec", "web"], None),
    (["exec"], None),
    (["shell", "web", "extra"], None),
    (["shell", "--help"], None),
    (["cage", "exec"], None),
    (["cage", "cage", "exec", "web", "--", "true"], None),
    (["run", "minimal", "--", "true"], None),
    (["--version"], None),
    ([], None),
])
def test_plain_forms_and_what_is_left_to_the_full_cli(args, plain):
    assert lean.plain_form(args) == plain


def test_the_console_script_enters_through_the_lean_path():
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["agentcage"] == "agentcage.lean:entry"


def test_every_name_of_the_secrets_package_resolves_lazily():
    code = ("import sys, agentcage.secrets as s; "
            "assert not [m for m in sys.modules if m.startswith('agentcage.secrets.')]; "
            "assert sorted(s.__all__) == sorted(s._HOMES); "
            "[getattr(s, n) for n in s.__all__]; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "ok", r.stderr


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "AGENTCAGE_HOME": str(root / "home")}


def _run(root: Path, argv: list[str], *args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*argv, *args], env=_env(root), capture_output=True, text=True,
                          timeout=90, cwd=root, stdin=subprocess.DEVNULL, **kw)


def _imported(stderr: str) -> set[str]:
    """Module names from `python -X importtime` output."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


@pytest.mark.netns
def test_lean_exec_and_shell_behave_as_the_full_cli(home, net):  # noqa: F811
    project = create_cage(home, net, "lean", [])
    script = "echo out; echo err >&2; exit 7"
    _script(project, "s.sh", script)
    # the same command through the lean path (both entry points) and through click (no --:
    # a command of words alone; an option-looking one would be refused, see test_runs.py)
    lean_m = _run(home, AGENTCAGE, "exec", "lean", "--", "sh", "-c", script)
    lean_entry = _run(home, ENTRY, "cage", "exec", "lean", "--", "sh", "-c", script)
    full = _run(home, AGENTCAGE, "exec", "lean", "sh", "/workspace/s.sh")
    for r in (lean_m, lean_entry, full):
        assert (r.returncode, r.stdout, r.stderr) == (7, "out\n", "err\n")

    # in-process, it imports what running a command needs, none of the CLI's own dependencies
    # (through the exec server it imports less still: test_execserver.py)
    timed = subprocess.run([sys.executable, "-X", "importtime", "-m", "agentcage.cli", "exec",
                            "lean", "--", "true"], capture_output=True, text=True, timeout=90,
                           cwd=home, stdin=subprocess.DEVNULL,
                           env={**_env(home), "AGENTCAGE_EXEC_SERVER": "off"})
    assert timed.returncode == 0, timed.stderr[-500:]
    modules = _imported(timed.stderr)
    assert "agentcage.backends.workload" in modules  # the control: the list is real
    assert [m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY] == []

    # without a terminal, `shell` reads its commands from stdin, on both paths
    piped = subprocess.run([*AGENTCAGE, "shell", "lean"], input="echo piped; exit 4\n",
                           env=_env(home), capture_output=True, text=True, timeout=90, cwd=home)
    assert (piped.returncode, piped.stdout) == (4, "piped\n"), piped.stderr

    # on a terminal: the command's own pty and status, through both paths
    assert drive([*AGENTCAGE, "exec", "lean", "--", "sh", "-c", "tty; exit 6"], [],
                 _env(home))[1] == 6
    _script(project, "six.sh", "exit 6")
    assert drive([*AGENTCAGE, "exec", "lean", "sh", "/workspace/six.sh"], [],
                 _env(home))[1] == 6

    # a sandbox that cannot be built runs nothing, and says so in one line on both paths
    hidden = project.with_name("moved")
    project.rename(hidden)
    try:
        broken = [_run(home, AGENTCAGE, "exec", "lean", "--", "true"),
                  _run(home, AGENTCAGE, "exec", "lean", "true")]
    finally:
        hidden.rename(project)
    assert broken[0].returncode == broken[1].returncode == 1
    assert broken[0].stderr == broken[1].stderr
    last = broken[0].stderr.splitlines()[-1]  # after bwrap's own complaint, on the terminal
    assert last.startswith("error: the sandbox of cage lean could not be set up"), last
    assert last.endswith("nothing ran"), last

    # every refusal reads the same on both paths: one line, exit 1
    assert agentcage(home, "stop", "lean").returncode == 0
    for name in ("lean", "nosuch", "Bad_Name"):
        fast = _run(home, AGENTCAGE, "exec", name, "--", "true")
        slow = _run(home, AGENTCAGE, "exec", name, "true")
        assert (fast.returncode, fast.stdout, fast.stderr) == (1, "", slow.stderr), name
        assert slow.returncode == 1 and len(slow.stderr.splitlines()) == 1, slow.stderr
        assert slow.stderr.startswith("error: "), slow.stderr
    assert "is not running" in _run(home, AGENTCAGE, "exec", "lean", "--", "true").stderr


@pytest.mark.netns
def test_an_interrupted_lean_exec_stops_its_command_as_the_full_cli_does(home, net):  # noqa: F811
    project = create_cage(home, net, "stopme", [])
    results = {}
    script = "echo x > started; exec sleep 61.5"
    _script(project, "stop.sh", script)
    for sig in (signal.SIGTERM, signal.SIGINT):
        for form in (["--", "sh", "-c", script], ["sh", "/workspace/stop.sh"]):  # lean, full
            marker = project / "started"
            marker.unlink(missing_ok=True)
            proc = subprocess.Popen(
                [*AGENTCAGE, "exec", "stopme", *form],
                env=_env(home), cwd=home, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True,
                # SIGINT as a terminal user's Ctrl-C meets it (a shell's background job, as a
                # CI runner may start, would leave it ignored)
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not marker.exists():
                time.sleep(0.05)
            assert marker.exists(), "the command never started"
            proc.send_signal(sig)
            _out, err = proc.communicate(timeout=30)
            results[(sig, form[0])] = (proc.returncode, err)
            assert not _sleeping(), "the command outlived its exec"
    # as the shell reports a command killed by the signal (128 + signal), after the cleanup:
    # a newline (closing a terminal's ^C echo) and one word, the same on both paths
    assert results[(signal.SIGTERM, "--")] == results[(signal.SIGTERM, "sh")] == (
        143, "\nterminated\n")
    assert results[(signal.SIGINT, "--")] == results[(signal.SIGINT, "sh")] == (
        130, "\ninterrupted\n")


def _script(project: Path, name: str, text: str) -> None:
    """A shell script in the project, the cage's user's (for the full CLI's form of exec)."""
    path = project / name
    path.write_text(text + "\n")
    os.chown(path, 1000, 1000)


def _sleeping() -> bool:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x0061.5\x00":
                    return True
            except OSError:
                continue
    return False


@pytest.mark.parametrize(("args", "starts"), [
    (["start", "web"], True), (["cage", "update", "web", "-c", "x.yaml"], True),
    (["run", "minimal", "--", "true"], True), (["cage", "create", "-c", "x.yaml"], True),
    (["start", "../x"], False), (["cage", "restart", "Bad_Name"], False), (["start"], False),
    (["cage", "create", "-c", "x.yaml", "--no-start"], False), (["ls"], False),
])
def test_which_commands_warm_the_gateway_zygote(args, starts):
    assert lean.starts_a_cage(args) is starts


def test_a_name_that_is_refused_starts_no_zygote(home):  # noqa: F811
    r = _run(home, AGENTCAGE, "start", "../x")
    assert r.returncode == 1 and "invalid" in r.stderr, r.stderr
    from agentcage.backends import zygote

    assert zygote.running(home / "home") == []
    assert not (home / "home" / "zygote").exists()  # none was started, even for a moment
