"""Rootless cages: the same cage, made by an ordinary user, with no sudo and no setuid helper of
ours.

Everything a cage needs root for (network namespaces and their veth, nftables, sysctls, bind
mounts, `ip netns` under /run/netns) is allowed to the owner of a user namespace over what that
namespace owns. So a user's cages live inside one user namespace of theirs, kept by a small
process (the *holder*, holder.py), with:

- a mount namespace of its own, whose /run is a tmpfs of the holder's (the host's /run is bound
  back into it, but for /run/netns, where the cages' network namespaces are mounted);
- a network namespace of its own, linked to the host's network by `slirp4netns`, which makes
  its connections as the user, from the host's namespace: the gateways' uplink. The host's
  loopback is not reachable through it (`--disable-host-loopback`), and the gateway refuses
  the host's own addresses (see gateway/uplink.py) as it does for a root cage.

A command of the user's joins the holder's namespaces first thing (`enter`, before the CLI
loads anything), and from there the cage code runs as it does for root: in that namespace its
uid is 0, with the capabilities of the namespace, none of the host. The workload runs as the
user's own uid (uid 0 of the namespace, with every capability dropped and bubblewrap's user
namespace inside that); resource limits need a cgroup the user may write (see cgroups.py);
`agentcage doctor` says whether this host can do it.
"""

from __future__ import annotations

import os

INIT_UID_MAP = ("0", "0", "4294967295")  # /proc/self/uid_map of the initial user namespace
DIRECTORY = "rootless"  # the holder's, in the state root
HOST_ROUTES = "host-routes.sock"  # where gateways get a netlink socket of the host's namespace
HOST_PORTS = "host-ports.sock"  # where gateways get listeners on the host's loopback (hostports.py)
# slirp4netns's own resolver in the holder's namespace (its default address), which forwards to
# the host's
SLIRP_DNS = "10.0.2.3"


def active() -> bool:
    """Whether this process runs in a user namespace (a rootless cage's, once `enter`ed): its
    "root" is then an ordinary user of the host. Read once (`forget_mode` after entering
    one); cached by hand, as functools would cost every `exec` its import."""
    if _mode:
        return _mode[0]
    try:
        first = _read("/proc/self/uid_map").split("\n", 1)[0].split()
    except OSError:
        first = list(INIT_UID_MAP)
    _mode.append(tuple(first) != INIT_UID_MAP)
    return _mode[0]


_mode: list[bool] = []  # what `active` found, once it looked


def forget_mode() -> None:
    """After this process entered (or left) a user namespace: `active` looks again."""
    _mode.clear()


def host_uid() -> int:
    """The host uid this process is: the one uid 0 of a rootless namespace maps to."""
    return _host_id("uid_map", os.getuid())


def host_gid() -> int:
    """The host gid this process is, as `host_uid`."""
    return _host_id("gid_map", os.getgid())


def _host_id(map_name: str, own: int) -> int:
    if not active():
        return own
    for line in _read(f"/proc/self/{map_name}").splitlines():
        inside, outside, _count = line.split()
        if inside == str(own):
            return int(outside)
    return own


def groups_settable() -> bool:
    """Whether setgroups(2) is allowed here (a namespace whose gids were mapped by newgidmap;
    not one that maps only the user's own gid, where it is denied)."""
    try:
        return _read("/proc/self/setgroups").strip() != "deny"
    except OSError:
        return True


def _read(path: str) -> str:
    # (not pathlib: every command, `exec` first, imports this module)
    with open(path) as f:
        return f.read()


# Commands that never touch a cage's namespaces: they run where they are called, starting
# nothing (`ls` reads state files and /proc, which look the same from outside).
_OUTSIDE = frozenset({"doctor", "init", "ls", "scaffold", "--help", "-h", "--version",
                      "help"})


def join_for(args: list[str]) -> None:
    """For a user who is not root: join the rootless cages' namespaces (the holder started
    first if need be) before a command that may touch a cage. Nothing for root, for a process
    already inside, or for a command of `_OUTSIDE`. HostCheckError when this host cannot."""
    verb = args[1:2] if args[:1] == ["cage"] else args[:1]
    if os.geteuid() == 0 or not verb or verb[0] in _OUTSIDE or "--help" in args:
        return
    from agentcage.rootless import holder
    from agentcage.state import locked_dir, state_root

    directory = state_root() / DIRECTORY
    with locked_dir(directory):
        found = holder.ensure(directory)
    holder.enter(found)
    forget_mode()
