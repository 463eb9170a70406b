"""Talking to the host: run commands, find and stop processes.

Errors of the tools become BackendError here, where they are called.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from agentcage import procfs
from agentcage.errors import BackendError


def run(argv: list[str], *, check: bool = True, input: str | None = None,
        timeout: float = 30) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(argv, input=input, capture_output=True, text=True,
                                timeout=timeout, check=False)
    except FileNotFoundError:
        raise _not_installed(argv) from None
    except subprocess.TimeoutExpired:
        raise _timed_out(argv, timeout) from None
    return _checked(result) if check else result


class Running:
    """A command started by `start`, its input given; `result` is what `run` returns."""

    def __init__(self, argv: list[str], proc: subprocess.Popen[str]):
        self.argv, self.proc = argv, proc

    def result(self, *, check: bool = True,
               timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Wait for it (killed after `timeout`); with `check`, BackendError, as `run`, if it
        failed."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except BaseException as e:
            self.close()
            if isinstance(e, subprocess.TimeoutExpired):
                raise _timed_out(self.argv, timeout) from None
            raise
        result = subprocess.CompletedProcess(self.argv, self.proc.returncode, out, err)
        return _checked(result) if check else result

    def close(self) -> None:
        """Kill it unless it ended (for a start given up); reaped either way."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


PIPE_SIZE = 65536  # what a pipe holds before a writer waits (Linux's default)


def start(argv: list[str], *, input: str = "") -> Running:
    """Start `argv` with `input` on its stdin and return at once (`Running.result` waits),
    so that the caller can do other things while it runs. The input, a pipe's worth at most,
    is written (and the pipe closed) before it starts."""
    data = input.encode()
    if len(data) > PIPE_SIZE:
        raise ValueError(f"{len(data)} bytes of input do not fit a pipe")
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)
        os.close(write_end)
        write_end = -1
        proc = subprocess.Popen(argv, stdin=read_end, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    except FileNotFoundError:
        raise _not_installed(argv) from None
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    return Running(argv, proc)


def _not_installed(argv: list[str]) -> BackendError:
    return BackendError(f"{argv[0]} is not installed; run `agentcage doctor`")


def _timed_out(argv: list[str], timeout: float) -> BackendError:
    return BackendError(f"{' '.join(argv[:4])} timed out after {timeout:g}s")


def _checked(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise BackendError(f"{' '.join(result.args)}: {detail[-1] if detail else 'failed'}")
    return result


def run_batch(batch: tuple[list[str], list[str]], *, check: bool = True,
              timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run a command that reads its steps on stdin, one per line (`ip -batch -`)."""
    argv, lines = batch
    return run(argv, check=check, input="".join(f"{line}\n" for line in lines),
               timeout=timeout)


def start_batch(batch: tuple[list[str], list[str]]) -> Running:
    """`run_batch`, returning at once (see `start`)."""
    argv, lines = batch
    return start(argv, input="".join(f"{line}\n" for line in lines))


def write_sysctls(ns: str, values: Mapping[str, str]) -> None:
    """Set kernel settings of the network namespace `ns`, never the caller's (see
    `start_sysctls`); BackendError if they could not be."""
    start_sysctls(ns, values).result()


class Background[T]:
    """`work` run on a thread of its own, while the caller does something else: for a wait
    that is the kernel's or another process's (a sysctl that waits on the kernel, a secrets
    backend that is a process per secret). `result` joins it: what it returned, or raised."""

    def __init__(self, work: Callable[[], T], name: str):
        self._value: tuple[T] | None = None  # (what it returned,) once it did
        self._failure: BaseException | None = None
        self._worker = threading.Thread(target=self._run, args=(work,), name=name)
        self._worker.start()

    def _run(self, work: Callable[[], T]) -> None:
        try:
            self._value = (work(),)
        except BaseException as e:
            self._failure = e

    def result(self) -> T:
        self._worker.join()
        if self._failure is not None:
            raise self._failure
        assert self._value is not None  # it returned, or it failed
        return self._value[0]


def start_sysctls(ns: str, values: Mapping[str, str]) -> Background[None]:
    """Begin setting kernel settings of the network namespace `ns`, never the caller's: by a
    thread of our own that joins `ns`, proves it is there, writes /proc/sys/net/... (which the
    kernel resolves in the namespace of the thread that opens it) and ends, its namespace with
    it. What `nsenter --net=... sysctl -w` does, without starting two processes per namespace;
    a write can wait on the kernel for milliseconds, which the caller may spend elsewhere.
    `result()`: once written; BackendError if they could not be."""

    def in_namespace() -> None:
        try:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                target = os.fstat(fd).st_ino
                os.setns(fd, os.CLONE_NEWNET)
            finally:
                os.close(fd)
            if os.stat("/proc/thread-self/ns/net").st_ino != target:
                raise OSError(f"not in namespace {ns} after setns")
            for key, value in values.items():
                with open(f"/proc/sys/{key.replace('.', '/')}", "w") as f:
                    f.write(value)
        except OSError as e:
            raise BackendError(f"cannot set {', '.join(values)} in {ns}: {e}") from None

    return Background(in_namespace, f"sysctl-{ns}")


def netns_inode(ns: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{ns}").st_ino
    except OSError:
        return None


def pids_in_netnses(*names: str) -> list[int]:
    """Every process whose network namespace is one of `names` (one pass over /proc)."""
    inodes = {i for i in map(netns_inode, names) if i is not None}
    if not inodes:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                    found.append(int(entry))
    return [p for p in found if p != os.getpid()]


GATEWAY_LOG = "gateway.log"


def gateway_state_dir(pid: int) -> Path | None:
    """The state directory of the cage whose gateway process `pid` is, or None for any other
    process. A spawned gateway names its cage's settings file on its command line; a gateway
    forked from the zygote carries the zygote's, but writes to its cage's gateway.log (its
    stdout). Either way the answer is found even when the directory was deleted since."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if not any(a.startswith(b"agentcage.gateway") for a in args):
        return None
    if b"--settings" in args:
        i = args.index(b"--settings")
        if i + 1 < len(args):
            return Path(args[i + 1].decode(errors="replace")).parent
    try:
        target = os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return None
    path = Path(target.removesuffix(" (deleted)"))
    return path.parent if path.name == GATEWAY_LOG else None


def gateways_of(state_dir: Path) -> list[int]:
    """The gateway processes (a supervisor included) of the cage whose state is `state_dir`."""
    wanted = Path(state_dir).resolve()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            where = gateway_state_dir(int(entry))
            if where is not None and where.resolve() == wanted:
                found.append(int(entry))
    return found


def cage_suffix_of(pid: int) -> str | None:
    """The suffix of the cage gateway namespace (`agc-<suffix>-gw`) process `pid` lives in."""
    try:
        inode = os.stat(f"/proc/{pid}/ns/net").st_ino
        names = os.listdir("/run/netns")
    except OSError:
        return None
    for name in names:
        if name.startswith("agc-") and name.endswith("-gw") and netns_inode(name) == inode:
            return name.removeprefix("agc-").removesuffix("-gw")
    return None


def pids_in_netns(ns: str) -> list[int]:
    """Every process whose network namespace is `ns` (found through /proc/PID/ns/net)."""
    return pids_in_netnses(ns)


# (in procfs: `ls` and `exec` use them, and this module's imports are not for them)
alive = procfs.alive
is_process = procfs.is_process
pid_matches = procfs.pid_matches
recorded_gateway = procfs.recorded_gateway


def terminate(pids: list[int], grace: float = 3.0) -> None:
    """SIGTERM, wait up to `grace`, then SIGKILL whatever is left."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
    _wait_gone(pids, grace)
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    _wait_gone(pids, 2)


def _wait_gone(pids: list[int], timeout: float) -> None:
    """Until none of `pids` is alive, or `timeout`. Looked at after 1 ms, then less and less
    often: a killed process is usually gone at once, and a stop should not wait 20 ms for it."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
