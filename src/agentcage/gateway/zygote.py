"""The gateway zygote: a process that has imported the gateway's code once and forks each
cage's gateway from it, so that no cage pays for importing mitmproxy (most of a cold start).

`python -m agentcage.gateway.zygote --root DIR --key KEY`, started by the CLI on first need
(backends/zygote.py: it finds, verifies, starts and stops zygotes), detached, as root, with the
gateway's built environment. One per state root and code version (KEY), serving on the unix
socket DIR/KEY.sock (0600, in a 0700 directory) while it holds an exclusive lock on DIR/KEY.lock.

What the zygote holds, so that a child inherits nothing but code: no thread, no event loop, no
open file but its lock, its log and its listener, nothing of any cage (it never opens a cage's
file: a request only names one). It does not make the cages' CAs: each child makes its own.

A request (one per connection, from a peer of its own uid) names a cage's gateway.json and
hands over the descriptor of its gateway.log. The zygote forks; the child closes the listener
and the lock, takes the log as stdout and stderr and /dev/null as stdin, joins a session of its
own, restores the signal dispositions of a fresh interpreter and makes the cage's CA. The reply
is the child's pid and start time: the identity the CLI records for `stop`. Only once the CLI
has recorded it, and says so on the connection, does the child go on to run what `python -m
agentcage.gateway` runs after its imports (`main.run`: the settings, the uplink, the gateway
namespace, the thread check, serving); if the CLI hangs up first (it gave up, or died), the
child exits having done nothing: no gateway runs that no runtime.json names.

The zygote refuses to fork, and exits, when it is not alone in its process (a thread) or
holds a descriptor it should not, when a file of its loaded code changed on disk since it
started (an upgrade: the next CLI starts a fresh zygote), and it exits when its socket is no
longer its own (its state root was removed), after IDLE_SECONDS without a request, on SIGTERM
and on a `stop` request (after FIRST_IDLE_SECONDS if it never forked: the command that started
it failed). A child never returns into the zygote's loop.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, Protocol

from agentcage.procfs import start_time

IDLE_SECONDS = 15 * 60
FIRST_IDLE_SECONDS = 60  # a zygote that has not forked a gateway yet (its cage failed early)
MAX_REQUEST = 4096
REQUEST_TIMEOUT = 5.0  # a peer that connects and says nothing does not hold the zygote up
ADOPT_TIMEOUT = 30.0  # for the CLI to record a forked gateway before it may go on
TICK = 0.5  # how often the zygote checks its socket and its idle time
LOCK_WAIT = 2.0  # for a zygote that is on its way out (stale, stopped) to release the lock


def socket_path(directory: Path, key: str) -> Path:
    return directory / f"{key}.sock"


def lock_path(directory: Path, key: str) -> Path:
    return directory / f"{key}.lock"


def ready_path(directory: Path, key: str) -> Path:
    """Present while the zygote holding the lock has done its imports (it is made then, and
    removed when it goes): a CLI asks it for a gateway before it needs one only then."""
    return directory / f"{key}.ready"


def send_message(sock: socket.socket, doc: dict, fds: tuple[int, ...] = ()) -> None:
    data = json.dumps(doc).encode() + b"\n"
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(
            f"{len(fds)}i", *fds))])
    else:
        sock.sendall(data)


def receive_message(sock: socket.socket, max_fds: int = 0) -> tuple[dict, list[int]]:
    """One JSON line (and up to `max_fds` descriptors); ValueError if it is not one, ({}, [])
    if the peer closed without sending anything."""
    data, fds = b"", []  # type: tuple[bytes, list[int]]
    while not data.endswith(b"\n"):
        if max_fds and not data:
            chunk, fds, _flags, _addr = socket.recv_fds(sock, MAX_REQUEST, max_fds)
        else:
            chunk = sock.recv(MAX_REQUEST)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            break
    if not data:
        return {}, fds  # the peer closed without a word
    try:
        doc = json.loads(data) if data.endswith(b"\n") and len(data) <= MAX_REQUEST else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        for fd in fds:
            os.close(fd)
        raise ValueError("not one JSON object on one line")
    return doc, fds


def preload() -> None:
    """Import what a gateway runs, so that a child has (almost) nothing left to import, and
    what it runs is covered by the check for changed code: the process entry, mitmproxy's
    part, and what the gateway imports only when it arms its inspectors or acknowledges a
    load."""
    from agentcage.gateway import main

    main.preload()
    import agentcage.inspect.registry
    import agentcage.secrets.inject
    import agentcage.secrets.redact
    import agentcage.secrets.rules
    import agentcage.secrets.staging
    import agentcage.state  # noqa: F401
    from agentcage.inspect.patterns import load_patterns

    # Every gateway compiles the built-in secret patterns (package data, nothing of a cage's):
    # once here, their modules are loaded and their expressions in the `re` module's cache.
    load_patterns()
    # The public suffix list (package data too), which a gateway reads when it meets its first
    # wildcard domain (a secret's injection rule as it arms, the watcher's first name): read
    # here once, ≈ 35 ms of every such gateway's start.
    from agentcage.domains import is_public_suffix

    is_public_suffix("example.com")
    # The settings' annotations, which every gateway resolves to read its settings (≈ 2 ms)
    from agentcage.gateway.relays.settings import RelaySettings
    from agentcage.gateway.settings import GatewaySettings
    from agentcage.typed import warm

    warm(GatewaySettings, RelaySettings)


def code_files() -> dict[str, tuple[int, int, int]]:
    """Every loaded module's file with its inode, size and modification time."""
    files = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            try:
                st = os.stat(path)
            except OSError:
                continue
            files[path] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return files


def adopted(conn: socket.socket) -> bool:
    """In a forked gateway: whether the CLI says it recorded this process (`go`), rather than
    hanging up or saying nothing in time."""
    conn.settimeout(ADOPT_TIMEOUT)
    try:
        message, fds = receive_message(conn)
    except (OSError, ValueError):
        return False
    for fd in fds:
        os.close(fd)
    return message.get("op") == "go"


def other_threads() -> str | None:
    threads = os.listdir("/proc/self/task")
    return f"{len(threads)} threads" if len(threads) != 1 else None


def unexpected_descriptors(expected: set[int]) -> str | None:
    held = {int(fd) for fd in os.listdir("/proc/self/fd")}
    # exactly the expected ones, and the one the listing itself had open while it read
    if expected <= held and len(held) == len(expected) + 1:
        return None
    return f"unexpected open descriptors {sorted(held - expected)}"


def stale(expected_fds: set[int], exe: str, code: dict[str, tuple[int, int, int]]) -> str | None:
    """Why a resident process (this zygote, an exec or command server) may not fork what it
    serves now (None: it may): another thread, a descriptor it does not expect, its
    interpreter (`exe`, as it started) or its code (`code_files`) replaced on disk."""
    return (other_threads()
            or unexpected_descriptors(expected_fds)
            or ("its interpreter was replaced on disk"
                if os.readlink("/proc/self/exe") != exe else None)
            or changed_code(code))


def still_ours(path: str | Path, inode: int) -> bool:
    """Whether the socket file at `path` is still the one a resident bound (its `inode`)."""
    try:
        return os.lstat(path).st_ino == inode
    except OSError:
        return False


def accept_until(listener: socket.socket, handle: Callable[[socket.socket], None],
                 stopping: Callable[[], bool], gone: Callable[[], bool],
                 idle_seconds: Callable[[], float]) -> str:
    """Take the connections on `listener` one at a time (`handle` each) until `stopping()`,
    its socket `gone()` or no connection came for `idle_seconds()`; which of those ended
    it ("stopped", "gone", "idle")."""
    last = time.monotonic()
    while not stopping():
        ready, _, _ = select.select([listener], [], [], TICK)
        if ready:
            conn, _ = listener.accept()
            last = time.monotonic()
            with conn:
                handle(conn)
        elif gone():
            return "gone"
        elif time.monotonic() - last > idle_seconds():
            return "idle"
    return "stopped"


class Resident(Protocol):
    """A resident process's server: this zygote, an exec or command server (resident.py)."""

    stopping: bool

    def claim(self) -> bool: ...

    def serve(self) -> int: ...

    def release(self) -> None: ...


def run_resident(resident: Resident) -> int:
    """Claim the resident's socket (0 at once if another process has it), then serve until
    SIGTERM or its own end; the socket is released either way. Its children (a gateway, a
    session) are reaped by the kernel."""
    if not resident.claim():
        return 0
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)

    def on_term(signum, frame):
        resident.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    try:
        return resident.serve()
    finally:
        resident.release()


def changed_code(code: dict[str, tuple[int, int, int]]) -> str | None:
    """Which file of the code loaded at start changed on disk since (an upgrade, an edit)."""
    for path, ident in code.items():
        try:
            st = os.stat(path)
        except OSError:
            return f"{path} is gone"
        if (st.st_ino, st.st_size, st.st_mtime_ns) != ident:
            return f"{path} changed on disk"
    return None


class Zygote:
    def __init__(self, directory: Path, key: str, idle: float = IDLE_SECONDS):
        self.directory, self.key, self.idle = directory, key, idle
        self.path = socket_path(directory, key)
        self.lock_fd = -1
        self.listener: socket.socket | None = None
        self.inode = 0
        self.code: dict[str, tuple[int, int, int]] = {}
        self.exe = os.readlink("/proc/self/exe")
        self.stopping = False
        self.forks = 0

    # ---- life ----------------------------------------------------------------------------

    def claim(self) -> bool:
        """The lock, then the socket (a stale one removed); False if another zygote has it."""
        self.lock_fd = os.open(lock_path(self.directory, self.key),
                               os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.02)
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()  # the lock is ours: whoever made this socket is gone
        with contextlib.suppress(FileNotFoundError):
            ready_path(self.directory, self.key).unlink()  # and whoever was ready
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket file is 0600 from the moment it exists
        try:
            listener.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        listener.listen(64)  # bound before the imports: a CLI can connect and wait for them
        self.listener, self.inode = listener, os.lstat(self.path).st_ino
        return True

    def serve(self) -> int:
        assert self.listener is not None
        preload()
        self.code = code_files()
        os.close(os.open(ready_path(self.directory, self.key),
                         os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        print(f"agentcage-zygote {self.key}: ready, pid {os.getpid()}, "
              f"{len(self.code)} code files", file=sys.stderr, flush=True)
        ended = accept_until(
            self.listener, self.handle, lambda: self.stopping, lambda: not self.still_ours(),
            lambda: self.idle if self.forks else min(self.idle, FIRST_IDLE_SECONDS))
        if ended == "gone":
            print(f"agentcage-zygote {self.key}: its socket is gone; exiting",
                  file=sys.stderr, flush=True)
            return 0
        if ended == "idle":
            print(f"agentcage-zygote {self.key}: idle; exiting", file=sys.stderr, flush=True)
        self.release()
        return 0

    def still_ours(self) -> bool:
        return still_ours(self.path, self.inode)

    def release(self) -> None:
        if self.still_ours():
            self.path.unlink()
            with contextlib.suppress(FileNotFoundError):
                ready_path(self.directory, self.key).unlink()

    # ---- requests ------------------------------------------------------------------------

    def handle(self, conn: socket.socket) -> None:
        conn.settimeout(REQUEST_TIMEOUT)
        fds: list[int] = []
        try:
            _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
            if uid != os.geteuid():
                return  # the socket is 0600: only a misconfigured peer gets here
            request, fds = receive_message(conn, max_fds=1)
            if not request:
                return  # a CLI that only looked whether the zygote is up
            op = request.get("op")
            if op == "ping":
                send_message(conn, {"ok": True, "pid": os.getpid(), "key": self.key,
                                    "forks": self.forks})
            elif op == "stop":
                # `unless_forked`: from a command that started this zygote and then failed
                self.stopping = not (request.get("unless_forked") and self.forks)
                with contextlib.suppress(OSError):  # that one does not wait for the answer
                    send_message(conn, {"ok": True, "pid": os.getpid(),
                                        "stopping": self.stopping})
            elif op == "fork":
                self.fork(conn, request, fds)
            else:
                send_message(conn, {"ok": False, "error": f"unknown request {op!r}"})
        except (OSError, ValueError) as e:
            print(f"agentcage-zygote {self.key}: bad request: {e}", file=sys.stderr, flush=True)
        finally:
            for fd in fds:
                os.close(fd)

    def unfit(self, conn: socket.socket, log_fd: int) -> str | None:
        """Why this process may not fork a gateway now (None: it may)."""
        assert self.listener is not None
        return stale({0, 1, 2, self.lock_fd, self.listener.fileno(), conn.fileno(), log_fd},
                     self.exe, self.code)

    def fork(self, conn: socket.socket, request: dict, fds: list[int]) -> None:
        settings, wait = request.get("settings"), request.get("wait", 0.0)
        if (len(fds) != 1 or not isinstance(settings, str) or not os.path.isabs(settings)
                or not isinstance(wait, int | float) or not 0 <= wait <= 300):
            send_message(conn, {"ok": False, "error": "a fork names an absolute settings path "
                                "and hands over one log descriptor"})
            return
        log_fd = fds[0]
        reason = self.unfit(conn, log_fd)
        if reason is not None:
            # fail closed: this zygote forks nothing more (the CLI spawns the gateway itself)
            send_message(conn, {"ok": False, "error": f"stale zygote: {reason}"})
            print(f"agentcage-zygote {self.key}: refusing to fork ({reason}); exiting",
                  file=sys.stderr, flush=True)
            self.stopping = True
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self.become_gateway(conn, log_fd, Path(settings), float(wait))
        self.forks += 1
        send_message(conn, {"ok": True, "pid": pid, "start": start_time(pid)})

    def become_gateway(self, conn: socket.socket, log_fd: int, settings: Path,
                       wait: float) -> NoReturn:
        """In the child: shed everything of the zygote, then run the gateway; never returns."""
        code = 1
        try:
            t0 = time.monotonic()
            assert self.listener is not None
            self.listener.close()
            os.close(self.lock_fd)  # the lock stays the zygote's alone
            os.setsid()
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            os.close(log_fd)
            from agentcage.gateway import main

            # while the CLI records this process (and builds the network)
            ca, prepared = main.make_ca(), main.prepare()
            if not adopted(conn):
                print("agentcage-gateway: the CLI did not record this gateway; exiting",
                      file=sys.stderr)
                code = 0
            else:
                conn.close()
                # as a spawned gateway: this process, the one the CLI recorded, becomes the
                # supervisor that records the gateway's end; the gateway runs in its child
                from agentcage.gateway import obituary

                obituary.supervise(settings)
                code = main.run(settings, wait, t0, ca, prepared)
        except SystemExit as e:
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)


def main(argv: list[str] | None = None) -> int:
    import argparse  # here: the CLI imports this module for the protocol's few functions

    parser = argparse.ArgumentParser(prog="agentcage-zygote")
    parser.add_argument("--root", required=True, type=Path, help="the zygote directory")
    parser.add_argument("--key", required=True)
    parser.add_argument("--idle", type=float, default=IDLE_SECONDS)
    args = parser.parse_args(argv)
    os.chdir("/")
    return run_resident(Zygote(args.root, args.key, args.idle))


if __name__ == "__main__":
    sys.exit(main())
