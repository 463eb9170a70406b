"""OCI images, as podman keeps them: which one `container.image` names, and its files.

agentcage uses podman only as the place images live (`podman pull`, `podman load`, `podman
import`, `podman build` all put them there): it reads an image's identity and configuration,
and its files as one tar stream (`podman export` of a container created and never started).
Nothing of podman runs the cage, so podman's own networking (whose bridge rewrites the host's
firewall) is never involved; layers.py makes the files a cage's root.

Rootless, the images are the user's own: rootless podman's storage, in their home. podman is
then run in the rootless cages' user namespace (rootless/), which maps the user's ids as
rootless podman's own namespace does (uid 0 the user, 1.. their first /etc/subuid range, or
the user alone), and told so the way `podman unshare` tells the commands it starts
(`_CONTAINERS_USERNS_CONFIGURED`, `_CONTAINERS_ROOTLESS_UID`): podman then reads the user's
storage and configuration, as the user's own podman does, and makes no namespace of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass

from agentcage import rootless
from agentcage.errors import BackendError

PODMAN_TIMEOUT = 120.0  # one inspect, create or rm; a pull has PULL_TIMEOUT
PULL_TIMEOUT = 1800.0


@dataclass(frozen=True)
class Image:
    reference: str  # as cage.yaml names it
    id: str  # podman's image id (a sha256 of its configuration)
    env: tuple[tuple[str, str], ...]  # the image's own environment (its Config.Env)
    size: int  # bytes, as podman reports them


def _podman() -> str:
    found = shutil.which("podman")
    if found is None:
        raise BackendError("container.image needs podman, where images are kept: install it "
                           "(apt-get install podman), then pull or load the image")
    return found


def environment() -> dict[str, str] | None:
    """podman's environment: the caller's (None), or in a rootless cage's namespace, what
    makes it the user's rootless podman (see the module's docstring)."""
    if not rootless.active():
        return None
    env = {**os.environ, "_CONTAINERS_USERNS_CONFIGURED": "done",
           "_CONTAINERS_ROOTLESS_UID": str(rootless.host_uid()),
           "_CONTAINERS_ROOTLESS_GID": str(rootless.host_gid())}
    if "XDG_RUNTIME_DIR" not in env:
        # where the user's podman keeps its run state when nothing says otherwise: their
        # /run/user directory, if there is one (the user's own: uid 0 in this namespace)
        own = f"/run/user/{rootless.host_uid()}"
        with contextlib.suppress(OSError):
            if os.stat(own).st_uid == os.getuid():
                env["XDG_RUNTIME_DIR"] = own
    return env


def _run(args: list[str], timeout: float = PODMAN_TIMEOUT) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([_podman(), *args], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, env=environment())
    except subprocess.TimeoutExpired:
        raise BackendError(f"podman {args[0]} did not answer in {timeout:.0f} s") from None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1].removeprefix("Error: ") if lines else "no output"


def inspect(reference: str) -> Image | None:
    """The image `reference` names in podman's storage; None if it is not there."""
    proc = _run(["image", "inspect", reference])
    if proc.returncode != 0:
        if "image not known" in proc.stderr or "no such" in proc.stderr.lower():
            return None
        raise BackendError(f"podman cannot read image {reference}: {_last_line(proc.stderr)}")
    try:
        doc = json.loads(proc.stdout)[0]
        env = (doc.get("Config") or {}).get("Env") or []
        pairs = tuple(tuple(item.split("=", 1)) for item in env if "=" in item)
        return Image(reference, str(doc["Id"]), pairs, int(doc.get("Size") or 0))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise BackendError(f"podman described image {reference} in a form agentcage does not "
                           "read") from None


def find_or_pull(reference: str, say=None) -> Image:
    """The image, pulled first when podman's storage lacks it (`say`: progress lines)."""
    image = inspect(reference)
    if image is not None:
        return image
    if say is not None:
        say(f"image {reference} is not in podman's storage: pulling it")
    try:
        proc = subprocess.run([_podman(), "pull", reference], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              timeout=PULL_TIMEOUT, env=environment())
    except subprocess.TimeoutExpired:
        raise BackendError(f"pulling image {reference} took over {PULL_TIMEOUT:.0f} s") from None
    if proc.returncode != 0:
        raise BackendError(
            f"image {reference} is not in podman's storage and cannot be pulled "
            f"({_last_line(proc.stderr)}); put it there first (podman pull, podman load -i "
            "FILE, or podman import ROOTFS.tar NAME)")
    image = inspect(reference)
    if image is None:
        raise BackendError(f"podman pulled {reference} but does not list it")
    return image


class Export:
    """The image's files as one tar stream (`stream`), from a container created for it and
    removed by `close`, whatever happened."""

    def __init__(self, image: Image):
        self.image = image
        created = _run(["create", "--pull", "never", "--network", "none",
                        "--name", f"agentcage-export-{os.getpid()}-{image.id[:12]}",
                        image.id, "/agentcage-never-runs"])
        if created.returncode != 0:
            raise BackendError(f"podman cannot prepare image {image.reference} for export: "
                               f"{_last_line(created.stderr)}")
        self.container = created.stdout.strip().splitlines()[-1]
        try:
            self.proc = subprocess.Popen([_podman(), "export", self.container],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=environment())
        except OSError as e:
            self._remove()
            raise BackendError(f"cannot run podman export: {e}") from None
        assert self.proc.stdout is not None
        self.stream = self.proc.stdout

    def close(self) -> str | None:
        """Ends the export; its error (podman's last line) if it failed."""
        self.proc.stdout.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=PODMAN_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        err = self.proc.stderr.read().decode(errors="replace")  # type: ignore[union-attr]
        self.proc.stderr.close()  # type: ignore[union-attr]
        self._remove()
        return None if self.proc.returncode == 0 else _last_line(err)

    def _remove(self) -> None:
        _run(["rm", "--force", self.container])
