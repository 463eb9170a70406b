"""The exec server (backends/execserver.py, execclient.py): `exec` served by a resident process
gives what the same command run in-process gives (output, status, errors, the process the
command runs as, an interrupt), a client it may not serve or a server it may not trust runs the
command in-process, and a client that dies takes its command with it. Real cages in the fake
internet, the console script as a user runs it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentcage import execclient, served
from tests.agentcage.test_cli import AGENTCAGE, create_cage, home  # noqa: F401  (fixture)

pytestmark = pytest.mark.netns

# what the workload's process is: ids, capabilities, no_new_privs, seccomp, its network
# namespace's address, its cgroup and umask
WHO = ("id; grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status; cat /proc/self/cgroup | "
       "sort; umask; ip -4 -o addr show eth0 2>/dev/null | awk '{print $4}'; hostname")


def _env(root: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "AGENTCAGE_HOME": str(root / "home"), **extra}


def _exec(root: Path, *command: str, env: dict[str, str] | None = None, timing: bool = False,
          stdin: int | None = subprocess.DEVNULL, **kw) -> subprocess.CompletedProcess[str]:
    python = [sys.executable, "-X", "importtime"] if timing else [sys.executable]
    return subprocess.run([*python, "-m", "agentcage.cli", "exec", *command],
                          env=env or _env(root), capture_output=True, text=True, timeout=90,
                          cwd=root, stdin=stdin, **kw)


def _imported(stderr: str) -> set[str]:
    """The modules `python -X importtime` reported loading."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def _served(stderr: str) -> bool:
    """From `python -X importtime`: the client loaded none of the backend (it was served)."""
    modules = _imported(stderr)
    assert "agentcage.execclient" in modules  # the control: the list is real
    return "agentcage.backends.workload" not in modules


# What a served exec's client does without: the standard library's Python wrappers whose imports
# would be most of what it costs beyond the interpreter's start (the C cores serve it)
WRAPPERS = {"signal", "socket", "enum", "collections", "functools", "selectors", "typing", "re"}


def _without_timing(stderr: str) -> str:
    return "".join(line + "\n" for line in stderr.splitlines()
                   if not line.startswith("import time:"))


def server_pid(place: served.Place) -> int:
    """The pid of the resident server of `place` (an exec or command server), once it is up
    and proven as its clients prove it."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            sock = served.connect(place)
        except served.Absent:
            time.sleep(0.05)
            continue
        assert sock is not None, "a server is there that the client does not trust"
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        sock.close()
        return int.from_bytes(creds[:4], sys.byteorder)
    raise AssertionError(f"no {place.WHAT} came up")


def _server_up(root: Path) -> int:
    return server_pid(execclient.Place(str(root / "home")))


def test_a_served_exec_gives_what_an_in_process_one_gives(home, net):  # noqa: F811
    create_cage(home, net, "srv", [])
    off = _env(home, AGENTCAGE_EXEC_SERVER="off")
    first = _exec(home, "srv", "--", "true", timing=True)  # none yet: in-process, starts one
    assert first.returncode == 0 and not _served(first.stderr)
    _server_up(home)

    served = _exec(home, "srv", "--", "sh", "-c", WHO, timing=True)
    alone = _exec(home, "srv", "--", "sh", "-c", WHO, env=off, timing=True)
    assert _served(served.stderr) and not _served(alone.stderr)
    assert not WRAPPERS & _imported(served.stderr)
    assert WRAPPERS & _imported(alone.stderr)  # the control: in-process, the backend needs them
    assert served.returncode == alone.returncode == 0
    assert served.stdout == alone.stdout
    assert "uid=1000(agent)" in served.stdout and "NoNewPrivs:\t1" in served.stdout

    # status, streams (its stdin is the client's own descriptor), errors: the same
    script = "cat; echo err >&2; exit 7"
    for env in (_env(home), off):
        r = _exec(home, "srv", "--", "sh", "-c", script, env=env, input="in\n",
                  stdin=None)
        assert (r.returncode, r.stdout, r.stderr) == (7, "in\n", "err\n")
    for name in ("srv", "nosuch"):
        args = (name, "--", "true") if name == "nosuch" else (name, "--", "/nonexistent")
        on, alone_r = _exec(home, *args), _exec(home, *args, env=off)
        assert (on.returncode, on.stdout, on.stderr) == (
            alone_r.returncode, alone_r.stdout, alone_r.stderr)
    assert _exec(home, "nosuch", "--", "true").stderr.startswith("error: no cage named")


def test_a_client_whose_inheritance_differs_is_never_served_by_that_server(home, net):  # noqa: F811
    create_cage(home, net, "inh", [])
    _exec(home, "inh", "--", "true")
    _server_up(home)
    ours = os.umask(0o022)
    os.umask(ours)
    control = _exec(home, "inh", "--", "sh", "-c", "umask", timing=True)
    assert control.stdout == f"{ours:04o}\n" and _served(control.stderr)
    # another umask: its own key finds no server of that state, so it runs here (and starts
    # one for its state), with the umask it has
    other = subprocess.run(["sh", "-c", "umask 077; exec \"$@\"", "sh", sys.executable,
                            "-X", "importtime", "-m", "agentcage.cli", "exec", "inh", "--",
                            "sh", "-c", "umask"], env=_env(home), capture_output=True,
                           text=True, timeout=90, cwd=home, stdin=subprocess.DEVNULL)
    assert other.stdout == "0077\n" and not _served(other.stderr)
    # and the first server, asked directly by such a client, refuses it: nothing is run
    key = execclient.Place(str(home / "home")).key  # this process's: the server's
    ask = ("import os, sys; os.umask(0o077); from agentcage import execclient; "
           f"print(execclient.run(execclient.Place(sys.argv[1], {key!r}), 'inh', "
           "['sh', '-c', 'touch /workspace/refused']))")
    asked = subprocess.run([sys.executable, "-c", ask, str(home / "home")], env=_env(home),
                           capture_output=True, text=True, timeout=90, cwd=home,
                           stdin=subprocess.DEVNULL)
    assert asked.stdout == "None\n", asked.stderr
    assert not (home / "work" / "project" / "refused").exists()
    log = Path(execclient.Place(str(home / "home")).log).read_text()
    assert "the client's Umask is not the server's" in log


def test_an_interrupt_and_the_clients_death_stop_the_served_command(home, net):  # noqa: F811
    project = create_cage(home, net, "intr", [])
    _exec(home, "intr", "--", "true")
    _server_up(home)
    marker = project / "started"
    results = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        marker.unlink(missing_ok=True)
        proc = subprocess.Popen(
            [*AGENTCAGE, "exec", "intr", "--", "sh", "-c",
             "echo x > started; exec sleep 61.7"], env=_env(home), cwd=home,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not marker.exists():
            time.sleep(0.05)
        assert marker.exists(), "the command never started"
        assert _sleeping(), "the control: the command runs"
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=30)
        results[sig] = (proc.returncode, err)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _sleeping():
            time.sleep(0.05)
        assert not _sleeping(), f"the command outlived its exec ({sig!r})"
    # as in-process (test_lean.py): 128 + the signal, a newline and one word
    assert results[signal.SIGINT] == (130, "\ninterrupted\n")
    assert results[signal.SIGTERM] == (143, "\nterminated\n")
    assert results[signal.SIGKILL][0] == -signal.SIGKILL


def test_the_client_hands_nothing_to_a_server_it_cannot_prove(home, net):  # noqa: F811
    create_cage(home, net, "fake", [])
    place = execclient.Place(str(home / "home"))
    os.makedirs(place.directory, mode=0o700, exist_ok=True)
    # a process of ours, but not the server: any other command line
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(place.socket)
    os.chmod(place.socket, 0o600)
    listener.listen(4)
    got: list[tuple[bytes, list[int]]] = []

    def accept() -> None:
        listener.settimeout(30)
        try:
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.settimeout(5)
                    try:
                        data, fds, _f, _a = socket.recv_fds(conn, 65536, 8)
                    except OSError:
                        data, fds = b"", []
                    got.append((data, fds))
                    for fd in fds:
                        os.close(fd)
        except OSError:
            return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        r = _exec(home, "fake", "--", "sh", "-c", "echo ran", timing=True)
    finally:
        listener.close()
        thread.join(timeout=35)
    assert r.stdout == "ran\n" and not _served(r.stderr), _without_timing(r.stderr)
    assert got and all(data == b"" and fds == [] for data, fds in got)  # it connected


def _sleeping() -> bool:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x0061.7\x00":
                    return True
            except OSError:
                continue
    return False


def test_a_served_shell_follows_the_windows_size(home, net):  # noqa: F811
    """On a terminal the command gets a pty of its own, relayed by the server's child: a new
    window size reaches it (the client passes SIGWINCH on). The command is proven served: its
    sandbox's process descends from the server."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    create_cage(home, net, "tty", [])
    _exec(home, "tty", "--", "true")
    server = _server_up(home)
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execvpe(sys.executable, [sys.executable, "-m", "agentcage.cli", "exec", "tty",
                                        "--", "sh", "-c", "stty size; read x; stty size"],
                       {**_env(home), "TERM": "xterm"})
        finally:
            os._exit(127)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    shown = b""

    def read_until(text: bytes) -> None:
        nonlocal shown
        deadline = time.monotonic() + 60
        while text not in shown and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    shown += os.read(fd, 65536)
                except OSError:
                    return

    try:
        read_until(b"24 80")
        assert b"24 80" in shown, shown
        assert server in _ancestors(_bwrap_of(pid, server)), "the command was not served"
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))  # SIGWINCH
        time.sleep(0.5)
        os.write(fd, b"\n")
        read_until(b"33 101")
        assert b"33 101" in shown, shown
        read_until(b"the end: the terminal closes")  # until it does (EIO)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0


def _ancestors(pid: int) -> list[int]:
    found = []
    while pid > 1:
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
        found.append(pid)
    return found


def _bwrap_of(client: int, server: int) -> int:
    """The sandbox's bwrap among the server's descendants (none of the client's)."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "bwrap" and (
                        server in _ancestors(int(pid))):
                    assert client not in _ancestors(int(pid))
                    return int(pid)
            except OSError:
                continue
    raise AssertionError("no sandbox of the server's found")
