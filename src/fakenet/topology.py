"""Network namespaces, veth links, addresses, routes and /etc/netns files: made and unmade.

Everything is created inside namespaces (veths are born in their namespaces), so nothing ever
appears in the host's own network namespace, and nothing here touches host sysctls or the host
firewall. Each step that creates something records how to undo it; `close()` undoes in reverse.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from fakenet.errors import FakeNetError

NETNS_RUN_DIR = Path("/run/netns")
NETNS_ETC_DIR = Path("/etc/netns")
MAX_IFNAME = 15


def run(cmd: list[str], *, stdin: str | None = None, check: bool = True,
        timeout: float = 30) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise FakeNetError(f"{' '.join(cmd)} failed ({result.returncode}): "
                           f"{(result.stderr or result.stdout).strip()[:600]}")
    return result


def exec_prefix(netns: str) -> list[str]:
    return ["ip", "netns", "exec", netns]


def namespace_exists(netns: str) -> bool:
    return (NETNS_RUN_DIR / netns).exists()


def leaked_namespaces(prefix: str) -> list[str]:
    """Namespaces and /etc/netns/ directories whose names start with `prefix`.

    Use the instance's own prefix (`FakeInternet.name_prefix`) in tests so that other test runs
    on the same machine cannot make yours fail.
    """
    found: set[str] = set()
    for directory in (NETNS_RUN_DIR, NETNS_ETC_DIR):
        with contextlib.suppress(FileNotFoundError):
            found.update(n for n in os.listdir(directory) if n.startswith(prefix))
    return sorted(found)


class Topology:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._undo: list[tuple[str, Callable[[], None]]] = []

    # --- creating -----------------------------------------------------------------------------

    def add_namespace(self, role: str) -> str:
        name = self.prefix + role
        run(["ip", "netns", "add", name])
        self._undo.append((f"delete namespace {name}", lambda: _delete_namespace(name)))
        self.ip_batch(name, ["link set lo up"])
        return name

    def add_veth(self, netns_a: str, if_a: str, netns_b: str, if_b: str, *,
                 foreign_b: bool = False) -> None:
        """A veth pair with one end in each namespace.

        `foreign_b`: netns_b belongs to someone else and may outlive ours, so the link is deleted
        explicitly (from that side) to leave it as we found it. Links between our own namespaces
        go away with them.
        """
        for ifname in (if_a, if_b):
            if len(ifname) > MAX_IFNAME:
                raise FakeNetError(f"interface name {ifname!r} is longer than {MAX_IFNAME}")
        run(["ip", "link", "add", if_a, "netns", netns_a, "type", "veth",
             "peer", "name", if_b, "netns", netns_b])
        if foreign_b:
            self._undo.append((f"delete link {if_b} in {netns_b}",
                               lambda: _delete_link(netns_b, if_b)))

    def write_resolv_conf(self, netns: str, nameserver: str) -> None:
        """`ip netns exec` bind-mounts /etc/netns/NAME/resolv.conf over /etc/resolv.conf."""
        directory = NETNS_ETC_DIR / netns
        directory.mkdir(parents=True, exist_ok=True)
        self._undo.append((f"remove {directory}", lambda: shutil.rmtree(directory,
                                                                         ignore_errors=True)))
        (directory / "resolv.conf").write_text(f"nameserver {nameserver}\n")

    # --- configuring (nothing to undo: it goes away with the namespace or link) ---------------

    @staticmethod
    def ip_batch(netns: str, commands: Iterable[str]) -> None:
        """Run `ip` commands in one process (each line is an `ip` command without `ip`)."""
        run(["ip", "-n", netns, "-batch", "-"], stdin="\n".join(commands) + "\n")

    @staticmethod
    def sysctl(netns: str, key: str, value: str) -> None:
        run([*exec_prefix(netns), "sysctl", "-q", "-w", f"{key}={value}"])

    @staticmethod
    def nft(netns: str, ruleset: str) -> None:
        run([*exec_prefix(netns), "nft", "-f", "-"], stdin=ruleset)

    # --- unmaking -----------------------------------------------------------------------------

    def close(self) -> list[str]:
        """Undo everything, newest first; return what could not be undone (empty when clean)."""
        errors = []
        while self._undo:
            what, action = self._undo.pop()
            try:
                action()
            except Exception as exc:
                errors.append(f"{what}: {exc}")
        return errors


def _delete_namespace(netns: str) -> None:
    if namespace_exists(netns):
        run(["ip", "netns", "delete", netns], check=False)
    if namespace_exists(netns):
        raise FakeNetError(f"namespace {netns} still exists")


def _delete_link(netns: str, ifname: str) -> None:
    if not namespace_exists(netns):
        return  # the namespace went, and the link with it
    run(["ip", "-n", netns, "link", "delete", ifname], check=False)
    if run(["ip", "-n", netns, "link", "show", ifname], check=False).returncode == 0:
        raise FakeNetError(f"link {ifname} in {netns} still exists")
