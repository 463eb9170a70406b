"""A command served by a resident server of ours, the client's side: where the server lives,
proving it, handing it the request and the client's descriptors, and waiting for the outcome.
Two kinds of server use it: the exec server (`exec`, `shell`: execclient.py) and the command
server (`run`, `cage create`, `start`, `stop`, `destroy`: commandclient.py); their side is
backends/resident.py.

The client proves the server (residents.py: our private socket; our uid, this interpreter and
the exact command line of this installation's server of that kind; our namespaces and root),
hands it the request and its descriptors (SCM_RIGHTS over a unix socket) and waits for the
outcome: the command's exit status, an error to report, or the interrupt that stopped it,
which the caller reports exactly as for a command run in-process. While it waits, Ctrl-C
(SIGINT), SIGTERM, SIGHUP and a window's new size (SIGWINCH) are passed on, and its end
(killed) ends the command. No server, one that fails a check or refuses the client: None, and
the caller runs the command itself.

Import-light (os, sys and the C cores of the signal and socket modules): a served command
loads this and its kind's request, nothing else, before it is handed over.
"""

from __future__ import annotations

# The C cores of the socket and signal modules (below), what `socket` and `signal` wrap,
# without the wrappers' imports (enum tables of every constant, selectors: ≈ 5 ms, a fifth of
# what a served `exec` may cost); the calls and numbers are the same
import _socket
import os
import sys

from agentcage import residents
from agentcage.errors import AgentcageError
from agentcage.interrupts import HungUp, LeftSession, Terminated

TYPE_CHECKING = False  # (typing.TYPE_CHECKING, without importing typing on this path)
if TYPE_CHECKING:  # checked against `signal` (no stubs exist for its C core)
    import signal
else:
    import _signal as signal

OFF = ("off", "0", "no", "false")  # a switch's values that turn serving off
MAX_MESSAGE = 1 << 16  # a larger request (a very long command line) runs in-process
ANSWER_TIMEOUT = 10.0  # for the server to take the request (it forks and says so at once)
# control messages, client to server (one per record)
CONTROL: dict[int, bytes] = {signal.SIGINT: b"INT", signal.SIGTERM: b"TERM", signal.SIGHUP: b"HUP",
           signal.SIGWINCH: b"WINCH"}
# how a command stopped by an interrupt is told back: its class by name
INTERRUPTS: dict[str, type[KeyboardInterrupt]] = {
    "KeyboardInterrupt": KeyboardInterrupt, "Terminated": Terminated, "HungUp": HungUp,
    "LeftSession": LeftSession}


def key(context: str = "") -> str:
    """This installation and this process's inheritable state (a name, not a proof: the
    server is proven by its command line, and checks the client's state itself): the
    interpreter as invoked, the import root, the version and `context` (what else a kind's
    server must share with its clients); and what a command inherits from this process
    (residents.process_state), so that a server started from one context (a `nohup`, a
    `ulimit`, another cgroup) is never the one another context finds: each has its own."""
    import zlib

    from agentcage import __version__

    ident = "\0".join((sys.executable, sys.prefix, residents.import_root(), __version__,
                       context))
    state = repr(sorted(residents.process_state().items()))
    return f"{zlib.crc32(ident.encode()):08x}-{zlib.crc32(state.encode()):08x}"


class Place:
    """Where the server of one kind (a subclass), state root and installation lives."""

    WHAT = ""  # its name in messages ("exec server")
    DIRECTORY = ""  # in the state root, 0700
    MODULE = ""  # the server's module: `python -m MODULE --root DIR --key KEY`
    VERSION = b""  # the first field of every request
    SWITCHES: tuple[str, ...] = ()  # environment variables that turn serving off (OFF)

    def __init__(self, root: str, server_key: str | None = None):
        # absolute: the server runs in /, and a relative AGENTCAGE_HOME names our directory
        self.root = os.path.abspath(root)
        self.directory = os.path.join(self.root, self.DIRECTORY)
        self.key = server_key or key(self.context())
        self.socket = os.path.join(self.directory, f"{self.key}.sock")
        self.lock = os.path.join(self.directory, f"{self.key}.lock")
        self.log = os.path.join(self.directory, f"{self.key}.log")

    def context(self) -> str:
        """What else than the process's state a client must share with its server (its key)."""
        return ""

    def argv(self) -> list[str]:
        return [sys.executable, "-m", self.MODULE, "--root", self.directory, "--key", self.key]

    def stop_message(self) -> bytes:
        return self.VERSION + b"\0stop"

    def usable(self) -> bool:
        """Whether commands may be served here at all: not switched off, by root (a rootless
        user's commands are root in their holder's namespaces, where their server lives too),
        and a socket path the kernel takes."""
        if any(os.environ.get(name, "").lower() in OFF for name in self.SWITCHES):
            return False
        return os.geteuid() == 0 and len(self.socket.encode()) <= residents.SUN_PATH_MAX


class Absent(Exception):
    """No server holds the socket (none yet, or a dead one's socket): one may be started."""


def connect(place: Place) -> _socket.socket | None:
    """A connection to the proven server of `place`; None if one is there that may not be
    used (it is left alone); Absent if there is none."""
    try:
        if residents.private_socket_refusal(place.directory, place.socket):
            return None
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET | _socket.SOCK_CLOEXEC)
    except FileNotFoundError:
        raise Absent from None
    try:
        sock.connect(place.socket)
        creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
        pid, uid = (int.from_bytes(creds[i:i + 4], sys.byteorder, signed=True)
                    for i in (0, 4))
        if residents.peer_refusal(pid, uid, place.argv(), place.WHAT) is None:
            return sock
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        raise Absent from None
    except OSError:
        pass
    sock.close()
    return None


def in_background() -> bool:
    """Whether this process is in a background job of its controlling terminal: there the
    kernel's job control (a read or a change of the terminal's modes stops the job) applies
    only to a command in-process, as the server's child is in no session of that terminal."""
    try:
        tty = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:  # no controlling terminal
        return False
    try:
        return os.tcgetpgrp(tty) != os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(tty)


def hand_over(place: Place, message: bytes, fds: list[int]) -> int | None:
    """The exit status of the command that `message` asks for, run by the server with `fds`
    as the descriptors the request says; AgentcageError or the interrupt that stopped it, as
    the command in-process raises them; None if no server could take it (Absent if there is
    none)."""
    if len(message) > MAX_MESSAGE or in_background():
        return None
    sock = connect(place)
    if sock is None:
        return None
    try:
        handed = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
        sock.settimeout(ANSWER_TIMEOUT)
        try:
            sock.sendmsg([message], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, handed)])
            answer = sock.recv(MAX_MESSAGE)
        except OSError:  # a closed descriptor of ours, or a server that went meanwhile
            return None
        # S and the process group of the command (taken), or R and why (refused: this client
        # or request is not its to serve)
        if answer[:1] != b"S" or not answer[1:].isdigit():
            return None
        sock.settimeout(None)
        return _outcome(sock, place, int(answer[1:]))
    finally:
        sock.close()


def _outcome(sock: _socket.socket, place: Place, group: int) -> int:
    def pass_on(signum: int, frame: object) -> None:
        try:
            sock.send(CONTROL[signum])
        except OSError:  # the server's end is gone: its outcome (or its absence) says the rest
            return

    def suspend(signum: int, frame: object) -> None:
        # Ctrl-Z: the command's process group stops with this process (as one job stops in
        # its shell), and goes on when this one is continued (`fg`, `bg`)
        _signal_group(group, signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stopped here until continued
        signal.signal(signal.SIGTSTP, suspend)
        _signal_group(group, signal.SIGCONT)

    for signum in CONTROL:
        if signal.getsignal(signum) != signal.SIG_IGN:  # nohup's choice stays
            signal.signal(signum, pass_on)
    if signal.getsignal(signal.SIGTSTP) != signal.SIG_IGN:
        signal.signal(signal.SIGTSTP, suspend)
    while True:
        try:
            outcome = sock.recv(MAX_MESSAGE)
        except InterruptedError:
            continue
        break
    kind, detail = outcome[:1], outcome[1:].decode(errors="replace")
    if kind == b"X":
        return int(detail)
    if kind == b"E":
        raise AgentcageError(detail)
    if kind == b"A" and detail in INTERRUPTS:
        raise INTERRUPTS[detail]()
    raise AgentcageError(f"the {place.WHAT} ended without the command's status (see "
                         f"{place.log})")


def _signal_group(group: int, signum: int) -> None:
    try:  # noqa: SIM105  (contextlib is not imported on this path)
        os.killpg(group, signum)
    except OSError:  # ended meanwhile
        pass


def stop(root: str, kind: type[Place]) -> list[int]:
    """Stop this state root's servers of `kind` (any installation's that answer as ours);
    their pids. A server still starting (its lock taken, its socket not yet bound) is stopped
    by removing its lock file: it finds it gone once its imports are done, and exits. For
    `agentcage zygote stop`, `prune` and tests' state roots."""
    import fcntl
    import glob

    stopped = []
    for found in sorted(glob.glob(os.path.join(root, kind.DIRECTORY, "*.sock"))):
        place = kind(root, os.path.basename(found).removesuffix(".sock"))
        try:
            sock = connect(place)
        except Absent:
            continue
        if sock is None:
            continue
        try:
            sock.settimeout(5)
            creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
            sock.send(place.stop_message())
            if sock.recv(16) == b"K":
                stopped.append(int.from_bytes(creds[:4], sys.byteorder, signed=True))
        except OSError:
            continue
        finally:
            sock.close()
    for lock in sorted(glob.glob(os.path.join(root, kind.DIRECTORY, "*.lock"))):
        if os.path.exists(lock.removesuffix(".lock") + ".sock"):
            continue  # bound: asked above, or not ours to stop
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a server starting
            os.unlink(lock)
        finally:
            os.close(fd)
    return stopped


AFTER_ENV = "AGENTCAGE_SERVER_AFTER"  # the pid of the command that started a server


def start(place: Place, env: dict[str, str] | None = None) -> None:
    """Start a server for `place` in the background, detached (its own session, its parent
    init), with `env` (None: this process's environment). Called before the command that found
    none runs in-process: the server takes this process's state as it is now, the state its
    key names (a command changes some as it runs: glibc handles a signal it had ignored once a
    thread changes ids), and it waits for this process to end (at most a few seconds, see
    resident.py) before it imports anything, so as to take no processor from the command; it
    binds its socket once its imports are done. A second one started meanwhile finds the lock
    taken and exits."""
    import subprocess

    os.makedirs(os.path.dirname(place.directory), mode=0o700, exist_ok=True)
    os.makedirs(place.directory, mode=0o700, exist_ok=True)
    os.chmod(place.directory, 0o700)
    log = os.open(place.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(log).st_size > 1 << 20:
            os.ftruncate(log, 0)
        subprocess.run(["setsid", "--fork", *place.argv()], stdin=subprocess.DEVNULL,
                       stdout=log, stderr=log, check=True, timeout=10, cwd="/",
                       env={**(os.environ if env is None else env),
                            AFTER_ENV: str(os.getpid())})
    finally:
        os.close(log)
