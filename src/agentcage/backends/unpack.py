"""An image's files unpacked into a cage's layer, in a process of its own that cannot reach
anything else: `python -m agentcage.backends.unpack DIR UID GID` reads a tar stream (what
`podman export` writes) on stdin and prints one JSON line of what it did.

An image is data from somewhere else, and unpacked as root. So the process first makes DIR its
root (chroot): every path, link and hard link in the archive is then resolved inside DIR, by
the kernel, and an absolute link (`/etc/alternatives/x -> /usr/bin/y`, common in images) means
what it means inside the cage. What Python's tar filter would refuse there (a path that climbs
out through `..`) cannot leave DIR anyway; it is refused all the same, and counted.

Every file becomes the workload's (UID:GID), without setuid, setgid or sticky bits and without
group or other write: nothing in the layer can raise privileges, and a cage where no process
has a capability could not use them anyway. Device nodes and FIFOs are left out (the cage gets
its own /dev). The files an image keeps for root alone (password hashes, private keys) would
be the agent's to read once the agent owns them, so they get no permission at all (ROOT_ONLY):
no process in the cage holds the capability that reads such a file.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import tarfile

# Files of root's alone in an image (as tar names them, relative).
ROOT_ONLY = ("etc/shadow", "etc/shadow-", "etc/gshadow", "etc/gshadow-", "etc/ssl/private/*",
             "etc/ssh/ssh_host_*_key")


class Unpacker:
    """The tar filter: each member made safe, or skipped (None) with the reason counted."""

    def __init__(self, uid: int, gid: int):
        self.uid, self.gid = uid, gid
        self.files = 0
        self.bytes = 0
        self.skipped: dict[str, int] = {}

    def _skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def __call__(self, member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        if member.ischr() or member.isblk() or member.isfifo():
            self._skip("device or fifo")
            return None
        if not _inside(member.name):  # harmless in the chroot (it stops at /), but refused
            self._skip("path outside the image")
            return None
        try:
            member = tarfile.tar_filter(member, dest)
        except tarfile.FilterError:
            self._skip("path outside the image")
            return None
        if member.islnk() and not _inside(member.linkname):
            self._skip("hard link outside the image")
            return None
        self.files += 1
        self.bytes += member.size if member.isreg() else 0
        mode = None if member.mode is None else member.mode & 0o755
        if member.isreg() and any(fnmatch.fnmatchcase(member.name.lstrip("./"), pattern)
                                  for pattern in ROOT_ONLY):
            mode = 0
        return member.replace(uid=self.uid, gid=self.gid, uname="", gname="", mode=mode,
                              deep=False)


def _inside(path: str) -> bool:
    """Whether a path (a member's, a hard link's target) stays in the image, never climbing
    above its root by `..`."""
    depth = 0
    for part in path.strip("/").split("/"):
        depth += -1 if part == ".." else (0 if part in ("", ".") else 1)
        if depth < 0:
            return False
    return True


def unpack(stream, root: str, uid: int, gid: int) -> Unpacker:
    """Everything of the tar `stream` under `root`, as the module's docstring says. The caller
    is a process of its own: this changes its root directory for good."""
    unpacker = Unpacker(uid, gid)
    os.umask(0o022)
    os.chroot(root)
    os.chdir("/")
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        archive.extractall("/", filter=unpacker, numeric_owner=True)
    return unpacker


def main(argv: list[str]) -> int:
    root, uid, gid = argv[0], int(argv[1]), int(argv[2])
    try:
        done = unpack(sys.stdin.buffer, root, uid, gid)
    except (OSError, tarfile.TarError, EOFError) as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    print(json.dumps({"files": done.files, "bytes": done.bytes, "skipped": done.skipped}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
