"""A resident server of ours, the server's side: one process, per state root, installation and
client context, that has imported what its commands run and runs each of them for a tiny
client (served.py) in a child forked for it. Two kinds: the exec server (execserver.py:
`exec`, `shell`) and the command server (commandserver.py: `run`, `cage create`, `start`,
`stop`, `destroy`); each says what a request of its is and what its child does with it
(`Service`), this module the rest.

`python -m agentcage.backends.KIND --root DIR --key KEY`, started in the background by the
first command of its kind that found none (that one runs in-process), detached (its own
session, no terminal), as the client's uid. It serves on the unix socket DIR/KEY.sock
(SOCK_SEQPACKET, 0600, in a 0700 directory) while it holds an exclusive lock on DIR/KEY.lock;
it binds the socket only once its imports are done.

A request (one per connection) carries the client's descriptors. The server checks the client
and the request, forks, and the child (the session) takes the descriptors as its own, restores
a fresh interpreter's signal dispositions, says "S" (taken), runs the command through the code
the command runs in-process, and tells the client its exit status, the error, or the
interrupt that stopped it; then it exits. The client's Ctrl-C, SIGTERM, SIGHUP and SIGWINCH
come as messages on the connection (SIGIO), each raising in the session what the signal raises
in-process, and its end (the connection closed) stops the command as a hang-up does.

What keeps it safe:
- Only a peer of our uid can connect (the socket's directory and mode; SO_PEERCRED checked
  again), and the client proves the server before it hands anything over (residents.py).
- The server runs nothing a client could not run itself: a request names a command of the
  CLI, checked by the same code as in-process.
- Nothing that a command inherits from the process that starts it may differ between the
  client and the server, or the server refuses (the client then runs the command itself): ids
  and groups, capabilities, no_new_privs, seccomp, umask, ignored and blocked signals, the CPU
  and memory nodes it may use, resource limits, cgroups, namespaces, root, security label,
  OOM adjustment, scheduling policy, nice value and I/O priority (`inherited`). So the command
  starts from the state it would have had in-process.
- Like the gateway zygote, it refuses (and exits) when it is not alone in its process (a
  thread), holds an unexpected descriptor, or a file of its loaded code (or its interpreter)
  changed since it started; it exits when its socket is no longer its own (the state root
  removed), after IDLE_SECONDS without a request, and on SIGTERM.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import select
import signal
import socket
import sys
from collections.abc import Callable
from typing import NoReturn, Protocol

from agentcage import served
from agentcage.errors import AgentcageError
from agentcage.gateway.zygote import accept_until, code_files, run_resident, stale, still_ours
from agentcage.home import HOME_ENV

IDLE_SECONDS = 15 * 60
STARTER_WAIT = 5.0  # the longest it waits for the command that started it to end
TICK = 0.5  # how often it checks its socket and its idle time
REQUEST_TIMEOUT = 5.0

_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}  # syscall numbers
_IOPRIO_WHO_PROCESS = 1


class Service[R](Protocol):
    """What one kind of server serves."""

    PLACE: type[served.Place]
    DESCRIPTORS: int  # the most a request hands over

    def preload(self) -> None:
        """Import what a session runs, so that it has nothing left to import, and what it runs
        is covered by the check for changed code."""

    def parse(self, data: bytes, fds: list[int]) -> R:
        """The request (ValueError: not one), checked in the server before any fork."""

    def refusal(self, request: R, fds: list[int]) -> str | None:
        """Why this server may not serve this request, beyond the client's process state
        (None: it may)."""

    def begin(self, request: R, fds: list[int]) -> None:
        """In the session: take the descriptors (each closed or made the session's own) and
        whatever else of the client the command runs with."""

    def work(self, request: R) -> int:
        """In the session: run the command as in-process; its exit status (AgentcageError or
        an interrupt raised as in-process)."""


def inherited(pid: int | str) -> dict[str, str]:
    """What a command started by process `pid` would inherit from it, as text."""
    from agentcage import residents

    found = residents.process_state(pid)
    found["ioprio"] = str(_ioprio(int(pid) if pid != "self" else os.getpid()))
    return found


def _ioprio(pid: int) -> int:
    import ctypes

    number = _IOPRIO_GET.get(os.uname().machine)
    if number is None:
        return -1
    return int(ctypes.CDLL(None, use_errno=True).syscall(number, _IOPRIO_WHO_PROCESS, pid))


def wait_for_starter() -> None:
    """Until the command that started this server has ended, or STARTER_WAIT seconds: that
    command runs in-process meanwhile, and the server's imports would take a processor from
    it (a `run` of an agent: that agent's start)."""
    starter = os.environ.pop(served.AFTER_ENV, "")
    if not starter.isdigit():
        return
    try:
        pidfd = os.pidfd_open(int(starter))
    except OSError:  # ended already
        return
    try:
        select.select([pidfd], [], [], STARTER_WAIT)
    finally:
        os.close(pidfd)


def difference(client: dict[str, str], own: dict[str, str]) -> str | None:
    """What differs (None: nothing)."""
    for name in sorted(set(client) | set(own)):
        if client.get(name) != own.get(name):
            return f"the client's {name} is not the server's"
    return None


class Server[R]:
    def __init__(self, place: served.Place, service: Service[R], idle: float = IDLE_SECONDS):
        self.place, self.service, self.idle = place, service, idle
        self.own = inherited("self")  # before any signal disposition of ours is changed
        self.lock_fd = -1
        self.listener: socket.socket | None = None
        self.inode = 0
        self.code: dict[str, tuple[int, int, int]] = {}
        self.exe = os.readlink("/proc/self/exe")
        self.stopping = False

    def say(self, line: str) -> None:
        print(f"{self.place.MODULE.rsplit('.', 1)[-1]} {self.place.key}: {line}",
              file=sys.stderr, flush=True)

    def claim(self) -> bool:
        """The lock (False if another server has it), the imports, then the socket (False if it
        was stopped meanwhile)."""
        self.lock_fd = os.open(self.place.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        wait_for_starter()
        self.service.preload()
        if not self.lock_still_ours():  # stopped while it started (served.stop)
            self.say("stopped before it was ready; exiting")
            return False
        self.code = code_files()
        # what is loaded now is never collected: a session's collections leave its pages (and
        # the server's, shared until written) alone, so a fork copies less
        gc.collect()
        gc.freeze()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.place.socket)  # the lock is ours: whoever made this socket is gone
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        old = os.umask(0o177)  # the socket file is 0600 from the moment it exists
        try:
            listener.bind(self.place.socket)
        finally:
            os.umask(old)
        os.chmod(self.place.socket, 0o600)
        listener.listen(64)
        self.listener, self.inode = listener, os.lstat(self.place.socket).st_ino
        self.say(f"ready, pid {os.getpid()}, {len(self.code)} code files")
        return True

    def lock_still_ours(self) -> bool:
        try:
            return os.stat(self.place.lock).st_ino == os.fstat(self.lock_fd).st_ino
        except OSError:
            return False

    def serve(self) -> int:
        assert self.listener is not None
        ended = accept_until(self.listener, self.handle, lambda: self.stopping,
                             lambda: not self.still_ours(), lambda: self.idle)
        if ended == "gone":
            self.say("its socket is gone; exiting")
            return 0
        self.release()
        return 0

    def still_ours(self) -> bool:
        return still_ours(self.place.socket, self.inode)

    def release(self) -> None:
        if self.still_ours():
            os.unlink(self.place.socket)

    def unfit(self, conn: socket.socket, fds: list[int]) -> str | None:
        """Why this process may not fork a session now (None: it may)."""
        assert self.listener is not None
        return stale({0, 1, 2, self.lock_fd, self.listener.fileno(), conn.fileno(), *fds},
                     self.exe, self.code)

    def handle(self, conn: socket.socket) -> None:
        conn.settimeout(REQUEST_TIMEOUT)
        fds: list[int] = []
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            pid, uid = (int.from_bytes(creds[i:i + 4], sys.byteorder, signed=True)
                        for i in (0, 4))
            if uid != os.geteuid():
                return  # the socket is 0600: only a misconfigured peer gets here
            data, fds, _flags, _addr = socket.recv_fds(conn, served.MAX_MESSAGE,
                                                       self.service.DESCRIPTORS)
            if data == self.place.stop_message():
                self.stopping = True
                conn.send(b"K")
                return
            request = self.service.parse(data, fds)
            refusal = (difference(inherited(pid), self.own)
                       or self.service.refusal(request, fds))
            if refusal is None:
                stale = self.unfit(conn, fds)
                if stale is not None:  # fail closed: this server runs nothing more
                    self.stopping = True
                    refusal = f"stale server: {stale}"
            if refusal is not None:
                self.say(f"refused pid {pid}: {refusal}")
                conn.send(b"R" + refusal.encode())
                return
            sys.stdout.flush()
            sys.stderr.flush()
            if os.fork() == 0:
                self.session(conn, fds, request)
        except (OSError, ValueError) as e:
            self.say(f"bad request: {e}")
        finally:
            for fd in fds:
                os.close(fd)

    def session(self, conn: socket.socket, fds: list[int], request: R) -> NoReturn:
        """In the child: become the client's command, tell it the outcome; never returns."""
        outcome = b"Ethe server could not run the command"
        try:
            assert self.listener is not None
            self.listener.close()
            os.close(self.lock_fd)  # the lock stays the server's alone
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.service.begin(request, fds)
            fds.clear()
            os.setpgid(0, 0)  # a group of its own: the client's Ctrl-Z stops it, as a job
            conn.settimeout(None)  # blocking: the control messages are read with MSG_DONTWAIT
            conn.send(b"S%d" % os.getpid())
            outcome = outcome_of(lambda: self.service.work(request), Control(conn))
        except KeyboardInterrupt as e:  # one that came just after the outcome was known
            if not outcome.startswith(b"X"):
                outcome = interrupted(e)
        except BaseException:
            import traceback

            with contextlib.suppress(OSError):
                traceback.print_exc()
        finally:
            # nothing more is taken from the client: the outcome is known
            signal.pthread_sigmask(signal.SIG_BLOCK, set(served.CONTROL) | {signal.SIGIO})
            for stream in (sys.stdout, sys.stderr):  # all said before the client is told
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
            with contextlib.suppress(OSError):  # a client that is gone cannot be told
                conn.send(outcome)
            os._exit(0)


def outcome_of(work: Callable[[], int], control: Control) -> bytes:
    """The command's outcome, as the client is told it: X and its status, E and an error, A
    and the interrupt that stopped it (the client reports each as in-process)."""
    try:
        control.arm()
        return b"X%d" % work()
    except AgentcageError as e:
        return b"E" + str(e).encode()
    except KeyboardInterrupt as e:
        return interrupted(e)


def interrupted(interrupt: KeyboardInterrupt) -> bytes:
    name = type(interrupt).__name__
    return b"A" + (name if name in served.INTERRUPTS else "KeyboardInterrupt").encode()


class Control:
    """The client's signals, as messages on the connection: each raises in the session what
    the signal raises in-process (the handlers of interrupts.py), a new window size reaches
    the terminal's relay as SIGWINCH, and the connection closed (the client is gone) is a
    hang-up: the command is stopped."""

    def __init__(self, conn: socket.socket):
        self.conn = conn

    def arm(self) -> None:
        from agentcage.interrupts import on_sigterm

        on_sigterm()
        signal.signal(signal.SIGIO, self.on_io)
        fcntl.fcntl(self.conn.fileno(), fcntl.F_SETOWN, os.getpid())
        flags = fcntl.fcntl(self.conn.fileno(), fcntl.F_GETFL)
        fcntl.fcntl(self.conn.fileno(), fcntl.F_SETFL, flags | os.O_ASYNC)
        self.on_io(signal.SIGIO, None)  # what came before it was armed

    def on_io(self, signum: int, frame: object) -> None:
        while True:
            try:
                message = self.conn.recv(64, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            if message == b"WINCH":
                signal.raise_signal(signal.SIGWINCH)
            elif message == b"INT":
                raise KeyboardInterrupt
            elif message in (b"TERM", b"HUP"):
                signal.raise_signal(signal.SIGTERM if message == b"TERM" else signal.SIGHUP)
                return
            elif not message:  # the client is gone
                signal.signal(signal.SIGIO, signal.SIG_IGN)
                signal.raise_signal(signal.SIGHUP)
                return


def main[R](service: Service[R], argv: list[str] | None = None) -> int:
    """A server of `service`'s kind: `--root DIR --key KEY [--idle SECONDS]`."""
    import argparse

    parser = argparse.ArgumentParser(prog=service.PLACE.MODULE)
    parser.add_argument("--root", required=True, help="the server's directory")
    parser.add_argument("--key", required=True)
    parser.add_argument("--idle", type=float, default=IDLE_SECONDS)
    args = parser.parse_args(argv)
    os.chdir("/")
    state_root = os.path.dirname(os.path.abspath(args.root))
    place = service.PLACE(state_root, args.key)
    os.environ[HOME_ENV] = state_root  # absolute: the sessions start in /
    return run_resident(Server(place, service, args.idle))
