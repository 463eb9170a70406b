"""An exported Pod run with podman's own commands, as a kubelet would run it.

`podman kube play` (4.3, this machine's) cannot run the export as written: it runs every init
container to completion, one after another, so a native sidecar (an init container with
`restartPolicy: Always`, the gateway) never lets the pod start, and the play then fails trying
to remove it while it runs. Nor can a podman 4.3 pod join a given network namespace ("pods
presently do not support network mode path"), and the fake internet is one. So each container
of the exported spec is started here with `podman run --network ns:PATH`, all in the one
namespace (what a pod's containers share), in the kubelet's order: the init containers in turn
(a native sidecar detached, and waited for until its startup probe passes), then the app
containers. Each container's securityContext, env, command and mounts are translated to
podman's flags; every volume is a directory of the test's (an in-memory emptyDir on /dev/shm,
a ConfigMap's or Secret's items as files, with the Secret's mode).

The gateway's image is the project's own, built from images/gateway/Containerfile as written,
offline (OFFLINE=1: no registry of images is reachable here): its base, the Debian trixie it
names, is a root filesystem debootstrap makes with the packages the Containerfile's apt step
would install (cached per machine beside the tests' other images), and its wheels are this
checkout's, with the gateway's dependencies (`pip wheel '.[gateway]'`). The image is tagged by
a digest of what it is built from, so a changed checkout builds a new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.integration.podman_world import (
    CACHE,
    MIRROR,
    PodmanWorld,
    cache_lock,
    cached_tree,
    import_tree,
)

REPO = Path(__file__).resolve().parents[3]
CONTAINERFILE = REPO / "images" / "gateway" / "Containerfile"
BASE = "docker.io/library/debian:trixie-slim"  # what the Containerfile names
BASE_PACKAGES = "python3,python3-venv,nftables,ca-certificates"  # what its apt step installs


def _trixie(target: Path) -> None:
    r = subprocess.run(["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}",
                        "trixie", str(target), MIRROR], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, f"debootstrap trixie: {r.stdout[-500:]} {r.stderr[-500:]}"


def _sources_digest() -> str:
    """What the image is built from: the Containerfile, the project's metadata and code."""
    digest = hashlib.sha256(CONTAINERFILE.read_bytes())
    digest.update((REPO / "pyproject.toml").read_bytes())
    for path in sorted((REPO / "src" / "agentcage").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def ensure_gateway_image(world: PodmanWorld) -> str:
    """The gateway's image of this checkout, built if missing (the tests' image cache locked
    while it is). Call it without holding that cache (outside `podman_world`)."""
    tag = f"localhost/agentcage-gateway-test:{_sources_digest()}"
    if world.podman("image", "exists", tag).returncode == 0:
        return tag
    with cache_lock(CACHE, exclusive=True), tempfile.TemporaryDirectory() as scratch:
        if world.podman("image", "exists", tag).returncode == 0:
            return tag
        # Under the lock no run uses the images: the gateways of older checkouts go
        old = world.podman("images", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                           f"reference={tag.rsplit(':', 1)[0]}").stdout.split()
        if old:
            world.podman("rmi", "-f", *old)
        if world.podman("image", "exists", BASE).returncode != 0:
            import_tree(world, cached_tree(CACHE, "rootfs-trixie-gateway", _trixie), BASE)
        context = Path(scratch)
        r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir",
                            str(context / "dist"), f"{REPO}[gateway]"],
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"pip wheel: {r.stderr[-2000:]}"
        r = world.podman("build", "--network", "none", "--build-arg", "OFFLINE=1", "-f",
                         str(CONTAINERFILE), "-t", tag, str(context), timeout=900)
        assert r.returncode == 0, f"podman build: {r.stdout[-2000:]} {r.stderr[-2000:]}"
    return tag


class PodmanPod:
    """The exported pod `spec` as a podman pod in network namespace `netns`; `files`: what
    its ConfigMaps and Secrets hold, by object name ({key: text}); `dns`: the resolver its
    containers' resolv.conf names (the cluster's DNS)."""

    def __init__(self, world: PodmanWorld, name: str, spec: dict, files: dict[str, dict],
                 netns: str, dns: str, node_files: dict[str, str],
                 binds: dict[str, list[tuple[str, str]]] | None = None):
        """`binds`: host files bound read-only into a container, by its name (what its
        image would hold: an agent's binary)."""
        self.world, self.name, self.spec = world, name, spec
        self.binds = binds or {}
        self.files, self.netns, self.dns = files, netns, dns
        self.scratch = Path(tempfile.mkdtemp(prefix=f"agentcage-{name}-"))
        for relative, text in node_files.items():  # what the kubelet's node holds
            (self.scratch / "node" / relative).parent.mkdir(parents=True, exist_ok=True)
            (self.scratch / "node" / relative).write_text(text)
        self.memory = Path(tempfile.mkdtemp(prefix=f"agentcage-{name}-", dir="/dev/shm"))
        self.volumes: dict[str, Path] = {}
        self.started: list[str] = []

    # ---- volumes ----------------------------------------------------------------------------

    def _volume(self, volume: dict) -> Path:
        name = volume["name"]
        if "emptyDir" in volume:
            base = self.memory if volume["emptyDir"].get("medium") == "Memory" else self.scratch
            path = base / f"vol-{name}"
            path.mkdir(mode=0o777)
            path.chmod(0o777)  # an emptyDir is world-writable, as the kubelet makes it
            return path
        source = volume.get("configMap", {}).get("name") or volume["secret"]["secretName"]
        mode = volume.get("secret", {}).get("defaultMode", 0o644)
        base = self.memory if "secret" in volume else self.scratch
        path = base / f"vol-{name}"
        path.mkdir(mode=0o755)
        for key, text in self.files[source].items():
            (path / key).write_text(text)
            (path / key).chmod(mode)
        return path

    def _mounts(self, container: dict) -> list[str]:
        flags = []
        for mount in container.get("volumeMounts", []):
            source = self.volumes[mount["name"]]
            if "subPath" in mount:
                source = source / mount["subPath"]
            mode = "ro" if mount.get("readOnly") else "rw"
            flags += ["-v", f"{source}:{mount['mountPath']}:{mode}"]
        return flags

    # ---- containers -------------------------------------------------------------------------

    def _flags(self, container: dict) -> list[str]:
        sc = container.get("securityContext", {})
        name = f"{self.name}-{container['name']}"
        self.started.append(name)
        # one network namespace and one hostname for all, as a pod's containers have
        flags = ["--name", name, "--network", f"ns:/run/netns/{self.netns}", "--dns", self.dns,
                 "--hostname", self.name]
        if "runAsUser" in sc:
            flags += ["--user", f"{sc['runAsUser']}:{sc.get('runAsGroup', sc['runAsUser'])}"]
        if sc.get("runAsNonRoot"):
            assert sc.get("runAsUser", 0) != 0
        caps = sc.get("capabilities", {})
        flags += [f"--cap-drop={c}" for c in caps.get("drop", [])]
        flags += [f"--cap-add={c}" for c in caps.get("add", [])]
        if sc.get("readOnlyRootFilesystem"):
            flags += ["--read-only", "--read-only-tmpfs=false"]
        if sc.get("allowPrivilegeEscalation") is False:
            flags += ["--security-opt", "no-new-privileges"]
        profile = sc.get("seccompProfile", {})
        if profile.get("type") == "Localhost":  # the kubelet's seccomp root is the node's
            flags += ["--security-opt",
                      f"seccomp={self.scratch / 'node' / 'seccomp' / profile['localhostProfile']}"]
        else:
            assert profile.get("type") == "RuntimeDefault", profile
        for env in container.get("env", []):
            flags += ["-e", f"{env['name']}={env['value']}"]
        if container.get("stdin") and container.get("tty"):
            flags += ["-i", "-t"]
        for source, target in self.binds.get(container["name"], []):
            flags += ["-v", f"{source}:{target}:ro"]
        if container.get("workingDir"):
            flags += ["-w", container["workingDir"]]
        flags += self._mounts(container)
        command = container.get("command", [])
        if command:
            flags += ["--entrypoint", command[0]]
        return [*flags, container["image"], *command[1:]]

    def _podman(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.world.podman(*args, timeout=timeout)

    def _wait_started(self, container: dict, timeout: float = 90) -> None:
        probe = container["startupProbe"]["exec"]["command"]
        deadline = time.monotonic() + timeout
        name = f"{self.name}-{container['name']}"
        while self._podman("exec", name, *probe).returncode != 0:
            state = self._podman("inspect", "-f", "{{.State.Status}}", name).stdout.strip()
            assert state == "running", f"{name} {state}: {self.logs(container['name'])}"
            assert time.monotonic() < deadline, self.logs(container["name"])
            time.sleep(0.5)

    def start(self) -> None:
        for volume in self.spec["volumes"]:
            self.volumes[volume["name"]] = self._volume(volume)
        for container in self.spec["initContainers"]:
            if container.get("restartPolicy") == "Always":  # a native sidecar
                r = self._podman("run", "-d", *self._flags(container))
                assert r.returncode == 0, r.stderr
                self._wait_started(container)
            else:
                r = self._podman("run", *self._flags(container), timeout=120)
                assert r.returncode == 0, f"{container['name']}: {r.stdout}{r.stderr}"
        for container in self.spec["containers"]:
            r = self._podman("run", "-d", *self._flags(container))
            assert r.returncode == 0, r.stderr

    def exec(self, container: str, *argv: str, env: dict[str, str] | None = None,
             input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        # a CRI exec has the container's environment, HOSTNAME included (podman's, not)
        flags = [f"-e={k}={v}" for k, v in {"HOSTNAME": self.name, **(env or {})}.items()]
        if input is not None:
            flags.append("-i")
        return subprocess.run(["podman", "exec", *flags, f"{self.name}-{container}", *argv],
                              env={**os.environ, **self.world.env},
                              input=input, capture_output=True, text=True, timeout=timeout)

    def logs(self, container: str) -> str:
        r = self._podman("logs", f"{self.name}-{container}")
        return (r.stdout + r.stderr)[-3000:]

    def volume(self, name: str) -> Path:
        return self.volumes[name]

    def close(self) -> None:
        if self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._podman("rm", "-f", "-t", "0", *self.started, timeout=120)
        shutil.rmtree(self.scratch, ignore_errors=True)
        shutil.rmtree(self.memory, ignore_errors=True)


def exported_files(objects: tuple[dict, ...]) -> dict[str, dict[str, Any]]:
    """{object name: items} of the ConfigMaps and Secrets (a Secret's values decoded)."""
    import base64

    files: dict[str, dict[str, Any]] = {}
    for obj in objects:
        if obj["kind"] == "ConfigMap":
            files[obj["metadata"]["name"]] = dict(obj["data"])
        elif obj["kind"] == "Secret":
            files[obj["metadata"]["name"]] = {k: base64.b64decode(v).decode()
                                              for k, v in obj["data"].items()}
    return files
