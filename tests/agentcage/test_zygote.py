"""The gateway zygote, for real: cages' gateways forked from one process that loaded the
gateway's code once; what it holds (nothing of theirs) and what it refuses; how the CLI proves
a zygote is one before it uses it, and spawns the gateway itself when it cannot; how stop
finds exactly the right processes; how a zygote is stopped and goes away by itself."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from agentcage import procfs
from agentcage.backends import zygote as zygotes
from agentcage.backends.gateways import gateway_environment
from agentcage.backends.namespace import NamespaceBackend
from agentcage.gateway import zygote as server
from agentcage.state import StateStore, ensure_private_dir, write_json
from tests.agentcage.conftest import cage_yaml, make_project
from tests.agentcage.test_cli import AGENTCAGE, agentcage, home  # noqa: F401  (fixture)

CANARY = "zygote-canary-" + os.urandom(6).hex()
CURL = "curl -sS -m 8 -o /dev/null -w '%{http_code}' https://allowed.example.test/"


def _env(root: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "AGENTCAGE_HOME": str(root / "home"), "CANARY_TOKEN": CANARY, **extra}


def _cli(root: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AGENTCAGE, *args], env=_env(root, **extra), capture_output=True,
                          text=True, timeout=90, cwd=root, stdin=subprocess.DEVNULL)


def _create(root: Path, net, name: str, **extra: str) -> dict:
    project = make_project(root / "work" / name)
    config = root / f"{name}.yaml"
    config.write_text(cage_yaml(net, name, ["allowed.example.test"]))
    r = _cli(root, "cage", "create", "-c", str(config), "--project", str(project), **extra)
    assert r.returncode == 0, r.stderr
    return _runtime(root, name)


def _runtime(root: Path, name: str) -> dict:
    return json.loads((root / "home" / "cages" / name / "runtime.json").read_text())


def _zygotes(root: Path) -> list[dict]:
    r = _cli(root, "zygote", "status", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["zygotes"]


def _alive(pid: int) -> bool:
    fields = procfs.stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def _wait_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    return not _alive(pid)


@pytest.mark.netns
def test_gateways_come_from_one_zygote_that_holds_nothing_of_theirs(home, net):  # noqa: F811
    first, second = _create(home, net, "zya"), _create(home, net, "zyb")
    (z,) = _zygotes(home)
    zpid = z["pid"]
    for runtime in (first, second):
        gw = runtime["gateway_pid"]
        assert procfs.parent(gw) == zpid  # forked by the zygote
        assert runtime["gateway_start"] == procfs.start_time(gw)
    # each cage has a CA of its own, made in its own gateway process after the fork
    cas = [(home / "home" / "cages" / n / "ca" / "mitmproxy-ca.pem").read_bytes()
           for n in ("zya", "zyb")]
    assert cas[0] != cas[1]
    for name in ("zya", "zyb"):
        r = _cli(home, "exec", name, "--", "sh", "-c", CURL)
        assert (r.returncode, r.stdout) == (0, "200"), r.stderr

    # the zygote: one thread; its log on 1 and 2, /dev/null on 0, its lock and its listener
    assert os.listdir(f"/proc/{zpid}/task") == [str(zpid)]
    held = {int(fd): os.readlink(f"/proc/{zpid}/fd/{fd}") for fd in os.listdir(f"/proc/{zpid}/fd")}
    assert held[0] == "/dev/null" and held[1] == held[2] and held[1].endswith(".log")
    rest = sorted(v for fd, v in held.items() if fd > 2)
    assert len(rest) == 2 and rest[0].endswith(".lock") and rest[1].startswith("socket:"), held
    # its environment (and so its children's) is the gateway's, built, not the CLI's
    environ = Path(f"/proc/{zpid}/environ").read_bytes()
    assert CANARY.encode() not in environ
    assert sorted(e.split(b"=", 1)[0] for e in environ.split(b"\0") if e) == [
        b"LANG", b"PATH", b"PYTHONPATH"]
    sock = Path(z["socket"])
    assert sock.stat().st_mode & 0o777 == 0o600 and sock.parent.stat().st_mode & 0o777 == 0o700

    # stop kills exactly the stopped cage's gateway: not the other's, not the zygote
    assert _cli(home, "stop", "zya").returncode == 0
    assert _wait_gone(first["gateway_pid"])
    assert _alive(second["gateway_pid"]) and _alive(zpid)
    assert f"gateway zygote: running, pid {zpid}" in _cli(home, "doctor").stdout
    # prune stops it (the cages are whole: they stay), and a stopped zygote takes no gateway
    r = _cli(home, "prune", "-y")
    assert r.returncode == 0 and "nothing to prune" in r.stdout, r.stderr
    assert _wait_gone(zpid) and not sock.exists()
    assert _alive(second["gateway_pid"])
    assert _cli(home, "exec", "zyb", "--", "sh", "-c", CURL).stdout == "200"
    assert "not running" in _cli(home, "zygote", "status").stdout
    assert "gateway zygote: not running" in _cli(home, "doctor").stdout
    # the next start makes a new one
    assert _cli(home, "start", "zya").returncode == 0
    (again,) = _zygotes(home)
    assert again["pid"] != zpid and procfs.parent(_runtime(home, "zya")["gateway_pid"]) == \
        again["pid"]
    r = _cli(home, "zygote", "stop")
    assert r.returncode == 0 and str(again["pid"]) in r.stdout, r.stderr
    assert _wait_gone(again["pid"]) and "none running" in _cli(home, "zygote", "stop").stdout


def _impostor(sock_path: Path, argv: list[str] | None = None,
              prefix: tuple[str, ...] = ()) -> subprocess.Popen:
    """A process that listens on the zygote's socket, accepting nothing."""
    code = ("import socket, sys, time, os\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "os.umask(0o177)\n"
            f"s.bind({str(sock_path)!r}); s.listen(); print('up', flush=True); time.sleep(120)\n")
    proc = subprocess.Popen([*prefix, *(argv or [sys.executable, "-c", code])],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=gateway_environment())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not sock_path.exists():
        time.sleep(0.02)
    assert sock_path.exists(), "the stand-in never bound its socket"
    return proc


@pytest.mark.netns
def test_a_zygote_that_fails_a_check_is_never_used(home, net):  # noqa: F811
    state = home / "home"
    place = zygotes.place(state)
    ensure_private_dir(state)
    ensure_private_dir(place.directory)

    def spawned(name: str, why: str) -> None:
        runtime = _runtime(home, name)
        gw = runtime["gateway_pid"]
        assert b"--settings" in Path(f"/proc/{gw}/cmdline").read_bytes()  # spawned itself
        log = (state / "cages" / name / "gateway.log").read_text()
        assert "the gateway zygote was not used" in log and why in log, log
        assert _cli(home, "exec", name, "--", "sh", "-c", CURL).stdout == "200"

    # something else listens on the socket: not our command line, never asked for anything
    stranger = _impostor(place.socket)
    try:
        _create(home, net, "zstranger")
        spawned("zstranger", "is not a zygote")
    finally:
        stranger.kill()
        stranger.wait()
    place.socket.unlink()
    # a real zygote, but in another network namespace: its children would take the wrong uplink
    elsewhere = _impostor(place.socket, place.argv(), prefix=("unshare", "--net", "--"))
    try:
        _create(home, net, "zelsewhere")
        spawned("zelsewhere", "other namespaces")
    finally:
        elsewhere.terminate()
        elsewhere.wait(timeout=30)
    # turned off: spawned, with no zygote started
    place.socket.unlink(missing_ok=True)
    _create(home, net, "zoff", AGENTCAGE_ZYGOTE="off")
    gw = _runtime(home, "zoff")["gateway_pid"]
    assert b"--settings" in Path(f"/proc/{gw}/cmdline").read_bytes()
    assert not place.socket.exists()
    # a killed zygote leaves its socket behind: the next start replaces it and uses the new one
    _create(home, net, "zfirst")
    (z,) = _zygotes(home)
    os.kill(z["pid"], signal.SIGKILL)
    assert _wait_gone(z["pid"]) and place.socket.exists()
    _create(home, net, "zsecond")
    (replacement,) = _zygotes(home)
    assert replacement["pid"] != z["pid"]
    assert procfs.parent(_runtime(home, "zsecond")["gateway_pid"]) == replacement["pid"]


def test_a_failed_command_does_not_leave_the_zygote_it_started(home):  # noqa: F811
    r = _cli(home, "run", "no-such-scaffold", "--", "true")
    assert r.returncode == 1 and r.stderr.startswith("error: scaffold"), r.stderr
    sock = zygotes.place(home / "home").socket
    assert (sock.parent / f"{sock.stem}.log").exists()  # the control: one was started
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (sock.exists() or _zygote_processes(home)):
        time.sleep(0.05)
    assert not sock.exists() and not _zygote_processes(home)


def _zygote_processes(root: Path) -> list[str]:
    return [p for p in _cmdlines() if str(root) in p and "gateway.zygote" in p]


def _cmdlines() -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                found.append(Path(f"/proc/{pid}/cmdline").read_text())
            except OSError:
                continue
    return found


@pytest.fixture
def root():
    path = Path(tempfile.mkdtemp(prefix="agentcage-zygote-"))
    yield path
    zygotes.stop_all(path)
    shutil.rmtree(path, ignore_errors=True)


def _ask(sock_path: Path, request: dict, fds: tuple[int, ...] = ()) -> dict:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(60)
        s.connect(str(sock_path))
        server.send_message(s, request, fds)
        return server.receive_message(s)[0]


def test_a_zygote_whose_code_changed_refuses_to_fork_and_exits(root):
    """The zygote is run here with one more module of its code: a file of the test's."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    code_dir = root / "code"
    code_dir.mkdir()
    (code_dir / "zygote_extra_module.py").write_text("VALUE = 1\n")
    directory = root / "zygote"
    ensure_private_dir(directory)
    program = (f"import sys; sys.path.insert(0, {str(code_dir)!r}); import zygote_extra_module; "
               "from agentcage.gateway.zygote import main; "
               f"sys.exit(main(['--root', {str(directory)!r}, '--key', 'k']))")
    log = open(root / "zygote.log", "w")  # noqa: SIM115  (the process's, closed below)
    proc = subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.DEVNULL,
                            stdout=log, stderr=log, env=gateway_environment(), cwd="/")
    sock_path = server.socket_path(directory, "k")
    gateway_log = os.open(root / "gateway.log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not sock_path.exists():
            time.sleep(0.02)
        assert _ask(sock_path, {"op": "ping"})["forks"] == 0
        # the control: it forks; and a child that nobody recorded (here: the connection is
        # closed without `go`) exits having done nothing
        missing = root / "no-such-gateway.json"
        reply = _ask(sock_path, {"op": "fork", "settings": str(missing), "wait": 0},
                     (gateway_log,))
        assert reply["ok"] and isinstance(reply["pid"], int), reply
        assert _wait_gone(reply["pid"])
        said = (root / "gateway.log").read_text()
        assert "did not record this gateway" in said and "did not appear" not in said, said
        # told to go, it runs the gateway (which finds no settings here and says so)
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(60)
            s.connect(str(sock_path))
            server.send_message(s, {"op": "fork", "settings": str(missing), "wait": 0},
                                (gateway_log,))
            reply = server.receive_message(s)[0]
            server.send_message(s, {"op": "go"})
        assert _wait_gone(reply["pid"])
        assert "did not appear" in (root / "gateway.log").read_text()
        # an upgrade lands: the zygote refuses, and goes
        time.sleep(0.01)
        (code_dir / "zygote_extra_module.py").write_text("VALUE = 2  # upgraded\n")
        refused = _ask(sock_path, {"op": "fork", "settings": str(missing), "wait": 0},
                       (gateway_log,))
        assert not refused["ok"] and "zygote_extra_module.py changed" in refused["error"]
        assert proc.wait(timeout=30) == 0
        assert not sock_path.exists()
    finally:
        os.close(gateway_log)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def test_a_zygote_goes_when_its_state_root_goes(root):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    zygotes.start(root, gateway_environment())
    sock, pid = zygotes.connect(zygotes.place(root), wait=30)
    sock.close()
    assert _alive(pid)
    shutil.rmtree(root / zygotes.DIRECTORY)
    assert _wait_gone(pid, timeout=15)


def test_a_zygote_refuses_to_fork_with_a_thread_or_a_stray_descriptor(root):
    """The checks themselves, in this (multi-descriptor) process."""
    import threading

    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        assert "threads" in (server.other_threads() or "")
    finally:
        stop.set()
        worker.join()
    held = {fd for fd in map(int, os.listdir("/proc/self/fd")) if _is_open(fd)}
    assert server.unexpected_descriptors(held) is None  # the control
    stray = os.open(os.devnull, os.O_RDONLY)
    try:
        assert str(stray) in (server.unexpected_descriptors(held) or "")
    finally:
        os.close(stray)


def _is_open(fd: int) -> bool:  # the listing's own descriptor is closed once it is read
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_stop_kills_the_recorded_gateway_only_while_it_is_that_process(tmp_path):
    store = StateStore(tmp_path / "home")
    backend = NamespaceBackend(store)
    cage = store.create("ident")
    for recorded, killed in ((+1, False), (0, True)):
        proc = subprocess.Popen(["sleep", "61.75"], start_new_session=True)
        try:
            start = procfs.start_time(proc.pid)
            assert start is not None
            write_json(cage.runtime, {"status": "running", "gateway_pid": proc.pid,
                                      "gateway_start": start + recorded})
            backend.stop(cage, grace=0)
            time.sleep(0.05)
            assert (proc.poll() is not None) == killed, (recorded, killed)
        finally:
            proc.kill()
            proc.wait()
    # recorded before start times were: only a process started for this cage's settings
    proc = subprocess.Popen(["sleep", "61.75"], start_new_session=True)
    try:
        write_json(cage.runtime, {"status": "running", "gateway_pid": proc.pid})
        backend.stop(cage, grace=0)
        time.sleep(0.05)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.netns
def test_a_forked_gateway_arms_with_nothing_left_to_import(home, net):  # noqa: F811
    """What a gateway reads as it arms its inspectors is the zygote's already (its modules, the
    built-in patterns, the public suffix list a secret's injection rule is checked against):
    none of it is loaded again in each cage's gateway, as its start waits on it."""
    project = make_project(home / "work" / "arms")
    config = home / "arms.yaml"
    config.write_text(cage_yaml(net, "arms", ["api.example.test"], extra=(
        "secret_injection:\n  - env: API_TOKEN\n    inject_to: [api.example.test]\n")))
    r = _cli(home, "cage", "create", "-c", str(config), "--project", str(project))
    assert r.returncode == 0, r.stderr
    settings = home / "home" / "cages" / "arms" / "gateway.json"
    program = ("import sys; from agentcage.gateway import zygote; zygote.preload(); "
               "from agentcage.gateway.main import arm; "
               "from agentcage.gateway.settings import GatewaySettings; "
               "s = GatewaySettings.load(sys.argv[1]); assert s.secret_injection; "
               "before = set(sys.modules); arm(s); print(sorted(set(sys.modules) - before))")
    armed = subprocess.run([sys.executable, "-c", program, str(settings)],
                           env=gateway_environment(), capture_output=True, text=True,
                           timeout=90)
    assert armed.stdout == "[]\n", armed.stdout + armed.stderr
