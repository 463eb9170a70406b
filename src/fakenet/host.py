"""FakeHost: a machine of its own, for testing what touches "the host" without touching it.

A network namespace linked to the fake internet (default route into it, like a host's uplink),
entered together with a PID and a mount namespace of its own. In that mount namespace
/etc/resolv.conf is the host's resolver configuration of your choosing, so a tool that reads
the host's resolvers, creates named network namespaces (`ip netns add` mounts them under
/run/netns, here only), or looks at "its own" network sees this machine and never the real
one. A sleeping process is the PID namespace's init and holds everything: `close()` kills it,
and with it every process started inside, every namespace they made and every mount.

`nsenter --net` is used rather than `ip netns exec`, which would remount /sys (and lose the
cgroup hierarchies under it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from fakenet.errors import FakeNetError

if TYPE_CHECKING:
    from fakenet.internet import Client, FakeInternet


class FakeHost:
    """Use as a context manager: `with FakeHost(net) as host: host.run([...])`.

    `nameservers`: the resolvers this host's /etc/resolv.conf names (default: the fake
    internet's DNS server; () for a host with no resolver configured).
    """

    def __init__(self, internet: FakeInternet, nameservers: Sequence[str] | None = None):
        self.internet = internet
        self.nameservers = (internet.dns_address,) if nameservers is None else tuple(nameservers)
        self.client: Client | None = None
        self.init_pid: int | None = None
        self._holder: subprocess.Popen[bytes] | None = None
        self._resolv: Path | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def netns(self) -> str:
        return self._started(self.client).netns

    @property
    def address(self) -> str:
        """This host's address on its link to the internet."""
        address = self._started(self.client).address
        assert address is not None
        return address

    def start(self, timeout: float = 10.0) -> None:
        self.client = self.internet.add_client()
        self._resolv = self.internet.workdir / f"resolv-{self.client.netns}.conf"
        self._resolv.write_text("".join(f"nameserver {ns}\n" for ns in self.nameservers)
                                or "# no resolver configured\n")
        script = f"mount --bind {self._resolv} /etc/resolv.conf && echo ready && exec sleep inf"
        self._holder = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.client.netns}", "--",
             "unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc",
             "--", "sh", "-c", script],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        try:
            assert self._holder.stdout is not None
            line = self._holder.stdout.readline()
            if line.strip() != b"ready":
                err = self._holder.stderr.read() if self._holder.stderr else b""
                raise FakeNetError(f"the fake host did not start: {err.decode(errors='replace')}")
            self.init_pid = self._find_init(timeout)
        except BaseException:
            self.close()
            raise

    def _find_init(self, timeout: float) -> int:
        """The PID namespace's init (the `sleep`), a child of `unshare`."""
        assert self._holder is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{self._holder.pid}/task/{self._holder.pid}/children")
                for pid in children.read_text().split():
                    if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep"):
                        return int(pid)
            time.sleep(0.01)
        raise FakeNetError("the fake host's init process did not appear")

    def command(self, argv: Sequence[str], cwd: str | Path | None = None) -> list[str]:
        """`argv` as run on this host (its network, mounts and PID namespace), in `cwd`
        (entering a mount namespace resets the working directory to /)."""
        wd = [f"--wd={cwd}"] if cwd is not None else []
        return ["nsenter", "-t", str(self._started(self.init_pid)), "--net", "--mount", "--pid",
                *wd, "--", *argv]

    def run(self, argv: Sequence[str], cwd: str | Path | None = None,
            **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        return subprocess.run(self.command(argv, cwd), **kwargs)

    def popen(self, argv: Sequence[str], cwd: str | Path | None = None,
              **kwargs: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(self.command(argv, cwd), **kwargs)

    def open_to_users(self, paths: Sequence[str | Path]) -> None:
        """Make `paths` readable by every user of this host, in its mount namespace alone: a
        directory closed to others above one (e.g. /root, 0700, where pyenv keeps Python) is
        covered here by an open tmpfs holding only the paths below it. The real host's
        permissions never change."""
        closed: dict[Path, list[Path]] = {}
        for path in (Path(p).resolve() for p in paths):
            for ancestor in reversed(path.parents):
                if ancestor != Path("/") and not ancestor.stat().st_mode & 0o001:
                    closed.setdefault(ancestor, []).append(path)
                    break
        lines = ["set -e", "mount -t tmpfs -o mode=0755 stage /mnt"]
        for i, (ancestor, inside) in enumerate(closed.items()):
            for j, path in enumerate(inside):
                lines += [f"mkdir -p /mnt/{i}-{j}", f"mount --rbind {path} /mnt/{i}-{j}"]
            lines.append(f"mount -t tmpfs -o mode=0755 open {ancestor}")
            for j, path in enumerate(inside):
                lines += [f"mkdir -p {path}", f"mount --move /mnt/{i}-{j} {path}"]
        r = self.run(["sh", "-c", "\n".join(lines)], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise FakeNetError(f"cannot open {', '.join(map(str, paths))} to users: "
                               f"{r.stderr.strip()}")

    def close(self) -> None:
        """Kill everything that runs on this host (the PID namespace goes with its init), and
        with it every namespace and mount made inside. Safe to repeat."""
        if self.init_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
            self.init_pid = None
        if self._holder is not None:
            with contextlib.suppress(ProcessLookupError):
                self._holder.kill()
            self._holder.wait(timeout=10)
            for stream in (self._holder.stdout, self._holder.stderr):
                if stream is not None:
                    stream.close()
            self._holder = None

    @staticmethod
    def _started[T](value: T | None) -> T:
        if value is None:
            raise FakeNetError("the fake host is not running")
        return value
