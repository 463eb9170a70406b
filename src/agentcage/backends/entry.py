"""Into the cage's network namespace and down to its host uid, in the child before bwrap.

What `nsenter --net=/run/netns/CAGE` and then `setpriv --reuid=H --regid=G --clear-groups
--no-new-privs` did, with the same system calls and the same end state (tested against setpriv
itself: tests/agentcage/test_entry.py), in the process that then execs bubblewrap: two
programs fewer to start on every command in a cage.

Called between fork and exec (`preexec_fn`), after everything that still needs root (the
cgroup, the session keyring, the named volumes' staging). Nothing may be imported after the
uid is dropped (the interpreter's own files may not be readable by that uid), so everything is
imported with this module.
"""

from __future__ import annotations

import ctypes
import os

_PR_SET_NO_NEW_PRIVS = 38  # linux/prctl.h


def enter_netns(netns: str) -> None:
    """setns(2) into the named network namespace (`ip netns`' mount under /run/netns)."""
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.setns(fd, os.CLONE_NEWNET)
    finally:
        os.close(fd)


def drop_to(uid: int, gid: int, clear_groups: bool) -> None:
    """Become uid/gid (real, effective and saved: nothing to switch back to), with no
    supplementary group (where the user namespace lets groups be set; a rootless cage's that
    maps only the user's own gid keeps them, as `setpriv --keep-groups` did), and set
    no_new_privs: nothing exec'd from here on gains privileges (a setuid bit, file
    capabilities). Groups and gid first: after the uid changes, they could not be."""
    if clear_groups:
        os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if (os.getresuid(), os.getresgid()) != ((uid, uid, uid), (gid, gid, gid)):
        raise OSError(f"the uid/gid did not change to {uid}/{gid}")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"cannot set no_new_privs: {os.strerror(errno)}")


def enter(netns: str, uid: int, gid: int, clear_groups: bool) -> None:
    """The cage's network namespace, then its host uid (in that order: entering a namespace
    needs the privilege that dropping gives up)."""
    enter_netns(netns)
    drop_to(uid, gid, clear_groups)
