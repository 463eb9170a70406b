"""Helpers for running the real probe in real namespaces (no mocks).

Every probe run happens in a network namespace of its own: `unshare --net` (only a loopback that is
down, so every connect fails at once), bubblewrap with --unshare-net, or a named namespace whose
loopback carries the local services below. No test sends a packet anywhere else.
"""

import errno
import importlib.util
import json
import os
import secrets
import selectors
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

import pytest

PROBE_PATH = Path(__file__).resolve().parents[2] / "src" / "agentsec" / "probe" / "blast_probe.py"
NO_ROUTE = ("unshare", "--net", "--")


class ProbeRun(NamedTuple):
    returncode: int
    stdout: str
    stderr: str
    wall_s: float

    @property
    def report(self):
        return json.loads(self.stdout)

    def section(self, name):
        return self.report["sections"][name]

    def data(self, name):
        section = self.section(name)
        assert section["ok"], section
        return section["data"]


def require_namespaces():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to give the probe a network namespace of its own")


def launch_probe(*, env=None, wrapper=NO_ROUTE, python=None, cwd=None, via_stdin=False,
                 pass_fds=(), timeout=60):
    """Run the probe script in a fresh process (in its own network namespace by default)."""
    argv = [*wrapper, python or sys.executable, "-" if via_stdin else str(PROBE_PATH)]
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    full_env.update(env or {})
    started = time.monotonic()
    with open(PROBE_PATH, "rb") as source:
        completed = subprocess.run(
            argv,
            stdin=source if via_stdin else subprocess.DEVNULL,
            capture_output=True,
            env=full_env,
            cwd=cwd,
            pass_fds=pass_fds,
            timeout=timeout,
        )
    return ProbeRun(completed.returncode, completed.stdout.decode(), completed.stderr.decode(),
                    time.monotonic() - started)


@pytest.fixture
def run_probe():
    """launch_probe, after making sure the probe can be given a network namespace."""
    require_namespaces()
    return launch_probe


@pytest.fixture(scope="session")
def probe_module():
    """The probe file loaded as a module, for its pure helpers (it does not run on import)."""
    spec = importlib.util.spec_from_file_location("blast_probe_under_test", PROBE_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def empty_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    return home


def dns_reply(query):
    """Echo the question back with QR set and no answers: enough to be an answer to the probe."""
    flags = struct.pack("!H", 0x8180)
    return query[:2] + flags + query[4:]


class LocalServices:
    """Real listeners on 127.0.0.1 in a named network namespace that has only a loopback:
    a TCP sink recording every byte it gets, an HTTP proxy recording each request (407 without
    Proxy-Authorization, 200 with it), a proxy that answers every request 403 ("forbid"), one
    that closes each connection without a word ("mute"), and a UDP responder recording each
    datagram."""

    def __init__(self):
        self.netns = "agentsec-probe-" + secrets.token_hex(4)
        subprocess.run(["ip", "netns", "add", self.netns], check=True)
        subprocess.run(["ip", "-n", self.netns, "link", "set", "lo", "up"], check=True)
        self.wrapper = ("nsenter", "--net=/run/netns/" + self.netns, "--")
        self.ports = {}
        self._received = {"tcp": [], "proxy": [], "forbid": [], "mute": [], "udp": []}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        assert ready.wait(5), "local services did not start"

    def received(self, kind, count, timeout=5.0):
        """The first `count` payloads of this kind (a connection's bytes once it closed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self._received[kind]) >= count:
                    return list(self._received[kind])
            time.sleep(0.02)
        with self._lock:
            return list(self._received[kind])

    def close(self):
        self._stop.set()
        self._thread.join(5)
        subprocess.run(["ip", "netns", "delete", self.netns], check=False)

    def _serve(self, ready):
        # setns moves only this thread; every socket it makes belongs to the test namespace.
        fd = os.open("/run/netns/" + self.netns, os.O_RDONLY)
        try:
            os.setns(fd, os.CLONE_NEWNET)
        finally:
            os.close(fd)
        selector = selectors.DefaultSelector()
        for kind in ("tcp", "proxy", "forbid", "mute"):
            listener = socket.create_server(("127.0.0.1", 0))
            listener.setblocking(False)
            selector.register(listener, selectors.EVENT_READ, ("listener", kind))
            self.ports[kind] = listener.getsockname()[1]
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("127.0.0.1", 0))
        selector.register(udp, selectors.EVENT_READ, ("udp", "udp"))
        self.ports["udp"] = udp.getsockname()[1]
        ready.set()
        while not self._stop.is_set():
            for key, _ in selector.select(timeout=0.05):
                self._handle(selector, key)
        for key in list(selector.get_map().values()):
            key.fileobj.close()
        selector.close()

    def _handle(self, selector, key):
        role, kind = key.data[0], key.data[1]
        if role == "listener":
            connection, _ = key.fileobj.accept()
            if kind == "mute":
                connection.close()
                self._record(kind, b"")
                return
            connection.setblocking(False)
            selector.register(connection, selectors.EVENT_READ, ("connection", kind, bytearray()))
        elif role == "udp":
            datagram, peer = key.fileobj.recvfrom(4096)
            self._record("udp", bytes(datagram))
            key.fileobj.sendto(dns_reply(datagram), peer)
        else:
            self._read_connection(selector, key, kind, key.data[2])

    def _read_connection(self, selector, key, kind, buffer):
        try:
            chunk = key.fileobj.recv(4096)
        except ConnectionError:
            chunk = b""
        if chunk:
            buffer.extend(chunk)
            if kind == "proxy" and buffer.endswith(b"\r\n\r\n"):
                authorized = b"\r\nProxy-Authorization: " in buffer
                status = b"200 Connection established" if authorized else b"407 Auth Required"
                key.fileobj.sendall(b"HTTP/1.1 " + status + b"\r\n\r\n")
            elif kind == "forbid" and buffer.endswith(b"\r\n\r\n"):
                key.fileobj.sendall(b"HTTP/1.1 403 Forbidden\r\n\r\n")
            return
        selector.unregister(key.fileobj)
        key.fileobj.close()
        self._record(kind, bytes(buffer))

    def _record(self, kind, payload):
        with self._lock:
            self._received[kind].append(payload)


@pytest.fixture
def local_services():
    require_namespaces()
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        pytest.skip("needs ip(8) and nsenter(1)")
    services = LocalServices()
    try:
        yield services
    finally:
        services.close()


# --- Sandbox ingredients shared by the probe's tests ----------------------------------------

X86_64_SYSCALLS = {"socket": 41, "connect": 42, "keyctl": 250, "unshare": 272,
                   "io_uring_setup": 425, "landlock_create_ruleset": 444}
AUDIT_ARCH_X86_64 = 0xC000003E
AF_UNIX = 1


def seccomp_filter(denied):
    """A classic-BPF seccomp program for x86_64. Each rule in denied is (syscall number, errno)
    or (syscall number, errno, first argument): the call fails with that errno (only when its
    first argument is that value, for the three-item form); everything else is allowed."""

    def instruction(code, jump_true, jump_false, k):
        return struct.pack("HBBI", code, jump_true, jump_false, k)

    load, jump_equal, give = 0x20, 0x15, 0x06
    nr_offset, arg0_offset = 0, 16  # seccomp_data.nr, the low half of seccomp_data.args[0]
    body = []
    for rule in denied:
        number, code = rule[0], rule[1]
        if len(rule) == 2:
            body.append(instruction(jump_equal, 0, 1, number))
            body.append(instruction(give, 0, 0, 0x00050000 | code))  # SECCOMP_RET_ERRNO
        else:
            body.append(instruction(jump_equal, 0, 4, number))
            body.append(instruction(load, 0, 0, arg0_offset))
            body.append(instruction(jump_equal, 0, 1, rule[2]))
            body.append(instruction(give, 0, 0, 0x00050000 | code))
            body.append(instruction(load, 0, 0, nr_offset))  # the next rules compare nr again
    return b"".join([
        instruction(load, 0, 0, 4),  # seccomp_data.arch
        instruction(jump_equal, 0, len(body) + 1, AUDIT_ARCH_X86_64),
        instruction(load, 0, 0, nr_offset),
        *body,
        instruction(give, 0, 0, 0x7FFF0000),  # SECCOMP_RET_ALLOW
    ])


def own_v1_cgroup_dir(controller):
    with open("/proc/self/cgroup") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(","):
                return os.path.normpath(f"/sys/fs/cgroup/{controller}/{path}")
    return None


LIMITS = (("memory", "memory.limit_in_bytes", 512 << 20), ("pids", "pids.max", 256))


def make_cgroups(with_limits):
    """A memory and a pids cgroup (v1, as on this machine) under this process's own, with the
    limits above or none. Returns the directories; the caller removes them."""
    name = "agentsec-probe-" + secrets.token_hex(4)
    made = []
    try:
        for controller, limit_file, limit in LIMITS:
            parent = own_v1_cgroup_dir(controller)
            assert parent is not None and os.path.isdir(parent), f"no cgroup v1 {controller}"
            directory = os.path.join(parent, name)
            os.mkdir(directory)
            made.append(directory)
            if with_limits:
                with open(os.path.join(directory, limit_file), "w") as handle:
                    handle.write(str(limit))
    except BaseException:
        remove_cgroups(made)
        raise
    return made


def remove_cgroups(directories, patience_s=5.0):
    """Remove the cgroups once empty: the probe's namespace child may still be exiting (tearing
    down the namespaces it made) for a moment after the probe itself has."""
    deadline = time.monotonic() + patience_s
    for directory in directories:
        while True:
            try:
                os.rmdir(directory)
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)


def joining(directories):
    """A wrapper prefix that moves the command into these cgroups before running it."""
    join = " && ".join(f'echo $$ > "{d}/cgroup.procs"' for d in directories)
    return ("sh", "-c", join + ' && exec "$@"', "sh")


@pytest.fixture
def limited_cgroups():
    made = make_cgroups(with_limits=True)
    try:
        yield made
    finally:
        remove_cgroups(made)


@pytest.fixture
def unlimited_cgroups():
    made = make_cgroups(with_limits=False)
    try:
        yield made
    finally:
        remove_cgroups(made)
