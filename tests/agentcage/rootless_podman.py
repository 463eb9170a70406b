"""A user's own rootless podman, with images in its storage, on a host played by a namespace:
where a rootless cage finds the image `container.image` names.

The user is uid 1000, as in every rootless test, and has no /etc/subuid range on this machine
(none is given to it: other test runs use that uid's rootless cages at the same time). Rootless
podman then maps the user's uid alone, and stores an image's files all as the user's with
`ignore_chown_errors` (storage.conf), as such a user must configure it: that is the storage
written here, in the user's home, with the engine settings this machine needs (runc and
cgroupfs, DESIGN.md). A user made for one test with `useradd`, which gives a range here, as
Debian's adduser does (tests/integration/sandbox_worlds.py), has podman's ordinary storage,
each file under a subordinate id.

The images are imported by the user's podman, run on the fake host (its pause process ends
with the fake host's PID namespace); the root directories are the cached ones the rootful
podman tests import (tests/integration/podman_world.py).
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from tests.agentcage.hosted import AsUser
from tests.integration.podman_world import (
    BUSYBOX_ROOTFS,
    CACHE,
    PYTHON_ROOTFS,
    podman_world,
)

STORAGE_CONF = """\
[storage]
driver = "vfs"
"""
# what a user without subordinate ids must add: every file stored as theirs
SINGLE_UID = """
[storage.options]
ignore_chown_errors = "true"
"""
CONTAINERS_CONF = """\
[containers]
netns = "none"
default_ulimits = ["nofile=10000:10000", "nproc=4096:4096"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
class AsUserWithPodman(AsUser):
    """The CLI as the user, with the run directory their podman uses (a login's
    XDG_RUNTIME_DIR: `home`/run unless `podman_env` says otherwise, with whatever else the
    user's podman is given)."""

    def __init__(self, host, home: Path, uid: int, world=None, gid: int | None = None,
                 podman_env: dict[str, str] | None = None):
        super().__init__(host, home, uid, world, gid)
        self.user_env = podman_env or {"XDG_RUNTIME_DIR": str(home / "run")}

    @property
    def runtime_dir(self) -> Path:
        return Path(self.user_env["XDG_RUNTIME_DIR"])

    def __call__(self, *args: str, env: dict[str, str] | None = None, **kw):
        return super().__call__(*args, env={**self.user_env, **(env or {})}, **kw)

    def podman(self, *args: str, timeout: float = 300):
        """The user's own podman, on the fake host."""
        env = {"PATH": os.environ["PATH"], "HOME": str(self.home), "LANG": "C.UTF-8",
               **self.user_env}
        return self.host.run([*self.as_user, "env", *(f"{k}={v}" for k, v in env.items()),
                              "podman", *args], env=env, capture_output=True, text=True,
                             timeout=timeout, cwd=self.home)


def import_images(cli: AsUserWithPodman, names: dict[str, str],
                  single_uid: bool = True) -> None:
    """The user's podman configured as above, its storage holding each image of `names`
    (image name -> "python" or "busybox": which root directory it is made from). The
    storage goes with the user's home. `single_uid`: the user has no subordinate ids (else
    podman stores each file under the subordinate id its owner maps to)."""
    config = cli.home / ".config" / "containers"
    config.mkdir(parents=True)
    (config / "storage.conf").write_text(STORAGE_CONF + (SINGLE_UID if single_uid else ""))
    (config / "containers.conf").write_text(CONTAINERS_CONF)
    cli.runtime_dir.mkdir(mode=0o700)
    for path in (cli.home / ".config", config, *config.iterdir(), cli.runtime_dir):
        os.chown(path, cli.uid, cli.gid)
    with podman_world():  # the cached root directories, built if need be, and held
        for kind, rootfs in (("python", PYTHON_ROOTFS), ("busybox", BUSYBOX_ROOTFS)):
            wanted = [name for name, made_from in names.items() if made_from == kind]
            if not wanted:
                continue
            tarball = cli.home / f"{kind}.tar"
            with tarfile.open(tarball, "w") as archive:
                archive.add(CACHE / rootfs, arcname=".")
            tarball.chmod(0o644)
            try:
                r = cli.podman("import", str(tarball), wanted[0])
                assert r.returncode == 0, r.stderr[-1500:]
                for name in wanted[1:]:
                    r = cli.podman("tag", wanted[0], name)
                    assert r.returncode == 0, r.stderr
            finally:
                tarball.unlink()
