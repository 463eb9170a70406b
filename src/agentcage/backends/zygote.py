"""The gateway zygote, from the CLI's side: find it, prove it is what it claims to be, start it,
ask it for a cage's gateway, stop it. (The zygote itself: gateway/zygote.py.)

A zygote is used only when every check passes; anything else (none running yet, a stale
socket, a peer that fails a check, an answer that does not add up) means the gateway is
spawned directly, as it always could be: slower, never less safe.
- Its socket is a socket owned by us, mode 0600, in `<state root>/zygote/`, a 0700 directory
  of ours.
- The peer that holds it (SO_PEERCRED) runs as our uid and is this interpreter
  (/proc/PID/exe), started with exactly the command line this module starts zygotes with (this
  directory, this key), in our network, mount, PID, user and cgroup namespaces and under our
  root directory: a child it forks sees the same files, /run/netns, pids and uplink as we do.
- The child it names was forked by it (its parent is the zygote) at the start time it gives.

One zygote per state root and code version: the key is made of the interpreter, the
environment (sys.prefix) and the directory agentcage is imported from, so two installations
or source trees sharing a state root never use each other's. `AGENTCAGE_ZYGOTE=off` turns it
off (every gateway is spawned directly).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from agentcage import procfs, residents
from agentcage.gateway.zygote import (
    LOCK_WAIT,
    lock_path,
    ready_path,
    receive_message,
    send_message,
    socket_path,
)

ENV = "AGENTCAGE_ZYGOTE"
DIRECTORY = "zygote"
BIND_TIMEOUT = 10.0  # for a zygote just started to bind its socket (it binds before importing)
import_root = residents.import_root


def code_key() -> str:
    """This installation: the interpreter as invoked (a venv's python and python3 start
    zygotes with different command lines, so each has its own), its environment, the import
    root and the version."""
    import hashlib

    from agentcage import __version__

    ident = "\0".join((sys.executable, sys.prefix, import_root(), __version__))
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Place:
    """Where the zygote of one state root and code version lives."""

    directory: Path
    key: str

    @property
    def socket(self) -> Path:
        return socket_path(self.directory, self.key)

    @property
    def lock(self) -> Path:
        return lock_path(self.directory, self.key)

    @property
    def ready(self) -> Path:
        return ready_path(self.directory, self.key)

    @property
    def log(self) -> Path:
        return self.directory / f"{self.key}.log"

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "agentcage.gateway.zygote", "--root", str(self.directory),
                "--key", self.key]


def place(root: Path, key: str | None = None) -> Place:
    # absolute: the zygote runs in /, and a relative AGENTCAGE_HOME names the CLI's directory
    return Place(Path(os.path.abspath(root)) / DIRECTORY, key or code_key())


def usable(root: Path) -> bool:
    """Whether gateways of this state root may come from a zygote at all."""
    if os.environ.get(ENV, "").lower() in ("off", "0", "no", "false"):
        return False
    return os.geteuid() == 0 and len(str(place(root).socket).encode()) <= residents.SUN_PATH_MAX


@dataclass(frozen=True)
class Forked:
    """A gateway the zygote forked; it waits for `go` (sent once it is recorded) and exits if
    the connection closes first."""

    pid: int
    start: int
    connection: socket.socket

    def go(self) -> None:
        """Let it run (after recording its pid and start time)."""
        with self.connection:
            send_message(self.connection, {"op": "go"})

    def close(self) -> None:
        """Without `go`: it exits (also after `go`: harmless)."""
        self.connection.close()


class Unusable(Exception):
    """This zygote may not be used (the reason is the message); spawn directly instead."""


class Absent(Unusable):
    """No zygote holds the socket (none yet, or a dead one's socket): a new one may."""


class Stale(Unusable):
    """The zygote refused to fork because it is stale (it exits): a new one may replace it."""


# ---- checks ------------------------------------------------------------------------------------

def _check_socket_file(p: Place) -> None:
    refusal = residents.private_socket_refusal(str(p.directory), str(p.socket))
    if refusal:
        raise Unusable(refusal)


def check_peer(p: Place, pid: int, uid: int) -> None:
    """Raise Unusable unless process `pid` is a zygote of ours for place `p` (see the module)."""
    refusal = residents.peer_refusal(pid, uid, p.argv(), "zygote")
    if refusal:
        raise Unusable(refusal)


def _peer(sock: socket.socket) -> tuple[int, int]:
    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                         struct.calcsize("3i")))
    return pid, uid


def connect(p: Place, wait: float = 0.0) -> tuple[socket.socket, int]:
    """A connection to the verified zygote of `p` and its pid. Waits up to `wait` seconds for
    one to bind its socket; Unusable if there is none then, or it fails a check."""
    deadline = time.monotonic() + wait
    while True:
        try:
            _check_socket_file(p)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            try:
                sock.connect(str(p.socket))
                pid, uid = _peer(sock)
                check_peer(p, pid, uid)
            except BaseException:
                sock.close()
                raise
            return sock, pid
        except (FileNotFoundError, ConnectionRefusedError) as e:
            # none yet, or a dead one's socket that a starting zygote is about to replace
            if time.monotonic() >= deadline:
                raise Absent(f"no zygote at {p.socket} ({e.strerror})") from None
            time.sleep(0.005)
        except OSError as e:
            raise Unusable(f"cannot connect to the zygote at {p.socket}: {e}") from None


def _ask(sock: socket.socket, request: dict, fds: tuple[int, ...] = (),
         timeout: float = 10.0) -> dict:
    sock.settimeout(timeout)
    try:
        send_message(sock, request, fds)
        reply, extra = receive_message(sock)
    except (OSError, ValueError) as e:
        raise Unusable(f"the zygote did not answer: {e}") from None
    for fd in extra:
        os.close(fd)
    return reply


# ---- life ----------------------------------------------------------------------------------------

def start(root: Path, env: dict[str, str]) -> None:
    """Start a zygote for `root` in the background, detached from this process (its own
    session, its parent init), with the environment `env` (the gateway's, built). Returns once
    it holds its lock (tens of ms; its imports go on), so that no other CLI starts a second one
    meanwhile, or after LOCK_WAIT if it never takes it."""
    from agentcage.state import ensure_private_dir

    p = place(root)
    ensure_private_dir(root)
    ensure_private_dir(p.directory)
    log = os.open(p.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(log).st_size > 1 << 20:
            os.ftruncate(log, 0)
        # setsid --fork: the zygote is not our child, so nothing waits for (or reaps) it here
        subprocess.run(["setsid", "--fork", *p.argv()], stdin=subprocess.DEVNULL, stdout=log,
                       stderr=log, env=env, check=True, timeout=10, cwd="/")
    finally:
        os.close(log)
    deadline = time.monotonic() + LOCK_WAIT
    while not lock_held(p) and time.monotonic() < deadline:
        time.sleep(0.002)


def lock_held(p: Place) -> bool:
    """Whether a zygote holds the lock of `p`: one is running, starting (not bound yet) or on
    its way out."""
    try:
        fd = os.open(p.lock, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # (a lock we got goes with the descriptor)
    return False


class Client:
    """The zygote of one state root, for one cage's start: asked (or warmed) early, its
    gateway taken once the cage is built."""

    def __init__(self, root: Path, env: dict[str, str]):
        self.root, self.env = root, env
        self.started = False  # by us, during this start: it may still be binding its socket

    def _start(self) -> None:
        try:
            start(self.root, self.env)
        except (OSError, subprocess.SubprocessError) as e:
            raise Unusable(f"cannot start a zygote: {e}") from None
        self.started = True

    def warm(self) -> bool:
        """Make sure a zygote is running or starting; never waits for its imports. True if
        this started it."""
        p = place(self.root)
        try:
            sock, _pid = connect(p)
        except Absent:
            if lock_held(p):
                return False  # one is starting
            with contextlib.suppress(Unusable):
                self._start()
            return self.started
        except Unusable:
            return False  # one that fails a check is left alone (and never used)
        sock.close()
        return False

    def request_fork(self, settings: Path, log_fd: int, wait: float) -> Requested | None:
        """Ask the zygote running now for the gateway of the cage whose settings will be
        `settings`, and read its answer later (`Requested.result`): the fork and the
        gateway's CA are then made while the caller builds the cage. The child waits for
        `go` as ever, and runs nothing of the cage before. None unless a verified zygote has
        done its imports by now: `fork_gateway` asks later (so a zygote that a command started
        and then failed has forked nothing, and goes)."""
        p = place(self.root)
        if not p.ready.exists():
            return None
        try:
            sock, zygote_pid = connect(p)
        except Unusable:
            return None
        try:
            _send_fork(sock, settings, log_fd, wait)
        except Unusable:
            sock.close()
            return None
        return Requested(sock, zygote_pid)

    def fork_gateway(self, settings: Path, log_fd: int, wait: float, timeout: float) -> Forked:
        """A gateway process for the cage whose settings are `settings`, forked by the zygote
        (started now if there is none, or if the one there is stale); its output goes to
        `log_fd`. Unusable if no zygote can be used: the caller then spawns the gateway."""
        p = place(self.root)
        try:
            return _fork(p, connect(p), settings, log_fd, wait, timeout)
        except Absent:
            pass
        except Stale:
            self._start()  # its replacement (which waits for the stale one to let go)
        return _fork(p, self._await(p), settings, log_fd, wait, timeout)

    def _await(self, p: Place) -> tuple[socket.socket, int]:
        """A connection to the zygote that is starting, starting one if none is (or if the one
        holding the lock turns out to be on its way out)."""
        deadline = time.monotonic() + BIND_TIMEOUT
        while True:
            try:
                return connect(p)
            except Absent:
                if time.monotonic() > deadline:
                    raise
                if not self.started and not lock_held(p):
                    self._start()
                time.sleep(0.005)


def _fork(p: Place, connection: tuple[socket.socket, int], settings: Path, log_fd: int,
          wait: float, timeout: float) -> Forked:
    sock, zygote_pid = connection
    try:
        _send_fork(sock, settings, log_fd, wait)
    except BaseException:
        sock.close()
        raise
    return Requested(sock, zygote_pid).result(timeout)


def _send_fork(sock: socket.socket, settings: Path, log_fd: int, wait: float) -> None:
    sock.settimeout(10.0)
    try:
        send_message(sock, {"op": "fork", "settings": str(settings), "wait": wait}, (log_fd,))
    except OSError as e:
        raise Unusable(f"the zygote did not take the request: {e}") from None


class Requested:
    """A fork asked for, on the connection to the (verified) zygote; the answer not read."""

    def __init__(self, sock: socket.socket, zygote_pid: int):
        self.sock, self.zygote_pid = sock, zygote_pid

    def result(self, timeout: float) -> Forked:
        """The forked gateway, once the zygote answers (a zygote still importing answers once
        it is done); Unusable (Stale) if it refused or the answer does not add up."""
        sock = self.sock
        try:
            sock.settimeout(timeout)
            try:
                reply, extra = receive_message(sock)
            except (OSError, ValueError) as e:
                raise Unusable(f"the zygote did not answer: {e}") from None
            for fd in extra:
                os.close(fd)
            if not reply.get("ok"):
                error = str(reply.get("error", "refused"))
                raise (Stale if error.startswith("stale zygote") else Unusable)(error)
            pid, started = reply.get("pid"), reply.get("start")
            if not isinstance(pid, int) or not isinstance(started, int) or pid <= 0:
                raise Unusable(f"the zygote answered {reply!r}")
            _check_child(pid, started, self.zygote_pid)
        except BaseException:
            sock.close()  # a child it forked all the same sees the hang-up and exits
            raise
        return Forked(pid, started, sock)

    def close(self) -> None:
        """Without taking the answer: a child forked for it sees the hang-up and exits."""
        self.sock.close()


def _check_child(pid: int, started: int, zygote_pid: int) -> None:
    fields = procfs.stat_fields(pid)
    if fields is None:
        return  # it already ended (the gateway's log says why): waiting for it will tell
    if int(fields[19]) != started or int(fields[1]) != zygote_pid:
        raise Unusable(f"pid {pid} is not the child the zygote forked")


# ---- for `agentcage zygote`, prune and doctor ---------------------------------------------------

def running(root: Path) -> list[dict]:
    """The zygotes of `root` that answer (any code version): pid and key."""
    found = []
    directory = place(root).directory
    if not directory.is_dir():
        return []
    for sock_file in sorted(directory.glob("*.sock")):
        p = Place(directory, sock_file.stem)
        try:
            sock, pid = connect(p)
        except Unusable:
            continue
        with sock:
            try:
                reply = _ask(sock, {"op": "ping"}, timeout=5)
            except Unusable:
                continue
        if reply.get("ok"):
            found.append({"pid": pid, "key": p.key, "socket": str(p.socket),
                          "forks": reply.get("forks"), "current": p.key == code_key()})
    return found


def release(root: Path) -> None:
    """Ask this installation's zygote to stop unless it has forked a gateway (for a command
    that started it and then failed); waits for it to bind its socket, not for its answer."""
    with contextlib.suppress(Unusable, OSError):
        sock, _pid = connect(place(root), wait=BIND_TIMEOUT)
        with sock:
            send_message(sock, {"op": "stop", "unless_forked": True})


def stop_all(root: Path, timeout: float = 10.0) -> list[int]:
    """Stop every zygote of `root` (the gateways they forked run on); their pids."""
    stopped = []
    for z in running(root):
        p = place(root, z["key"])
        with contextlib.suppress(Unusable):
            sock, pid = connect(p)
            with sock:
                _ask(sock, {"op": "stop"}, timeout=5)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and not _gone(pid):
                time.sleep(0.01)
            stopped.append(pid)
    return stopped


def _gone(pid: int) -> bool:
    fields = procfs.stat_fields(pid)
    return fields is None or fields[0] == "Z"
