"""What `create` decides once for a cage's workload: the project, the host uid, the profile.

Stored as meta.json so that `exec` needs neither cage.yaml nor pydantic.
"""

from __future__ import annotations

import os

from agentcage import rootless
from agentcage.backends.sandbox import WORKSPACE
from agentcage.errors import BackendError
from agentcage.record import record

TYPE_CHECKING = False  # (typing.TYPE_CHECKING, without importing typing: `exec` reads this)
if TYPE_CHECKING:
    from pathlib import Path

    from agentcage.config.spec import CageSpec


NOBODY_AS_ROOT_OWNS = "host_user auto: nobody, as root owns the project"
ROOTLESS_OWN_UID = "rootless: your own uid"


@record
class CageMeta:
    """What `create` decided once, so that `exec` needs neither cage.yaml nor pydantic: where
    the project is, which host uid runs the workload, and the workload's fixed profile."""

    project: str
    host_uid: int
    host_gid: int
    volumes: tuple[tuple[str, str, str], ...]  # (host path, cage path, rw|ro)
    uid: int = 1000
    gid: int = 1000
    tmpfs: tuple[tuple[str, int | None], ...] = (("/tmp", None),)
    env: tuple[tuple[str, str], ...] = ()
    lifecycle: str = "interactive"
    # Env names with a secret injection rule: the cage gets their placeholders, never values.
    secret_env: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()  # (cage path, text): container.files
    # (name, cage path, rw|ro): the cage's named volumes (volumes.py keeps them)
    named_volumes: tuple[tuple[str, str, str], ...] = ()
    # (cage path, merge|text, content): container.seed_files (seeds.py)
    seed_files: tuple[tuple[str, str, str], ...] = ()
    mask_credentials: bool = True  # credmasks.py
    unmask: tuple[str, ...] = ()
    # container.image: the cage's root is its layer (layers.py), writable with read_only off
    image: str | None = None
    writable_root: bool = False

    def to_dict(self) -> dict:
        return {"project": self.project, "host_uid": self.host_uid, "host_gid": self.host_gid,
                "volumes": [list(v) for v in self.volumes], "uid": self.uid, "gid": self.gid,
                "tmpfs": [list(t) for t in self.tmpfs], "env": dict(self.env),
                "lifecycle": self.lifecycle, "secret_env": list(self.secret_env),
                "files": dict(self.files),
                "named_volumes": [list(v) for v in self.named_volumes],
                "seed_files": [list(s) for s in self.seed_files],
                "mask_credentials": self.mask_credentials, "unmask": list(self.unmask),
                "image": self.image, "writable_root": self.writable_root}

    @classmethod
    def from_dict(cls, d: dict) -> CageMeta:
        return cls(
            project=str(d["project"]),
            host_uid=int(d["host_uid"]),
            host_gid=int(d["host_gid"]),
            volumes=tuple((str(a), str(b), str(c)) for a, b, c in d["volumes"]),
            uid=int(d["uid"]),
            gid=int(d["gid"]),
            tmpfs=tuple((str(t), None if s is None else int(s)) for t, s in d["tmpfs"]),
            env=tuple(sorted((str(k), str(v)) for k, v in d["env"].items())),
            lifecycle=str(d["lifecycle"]),
            secret_env=tuple(str(n) for n in d.get("secret_env", ())),
            files=tuple(sorted((str(k), str(v)) for k, v in d.get("files", {}).items())),
            named_volumes=tuple((str(a), str(b), str(c))
                                for a, b, c in d.get("named_volumes", ())),
            seed_files=tuple((str(a), str(b), str(c)) for a, b, c in d.get("seed_files", ())),
            mask_credentials=bool(d.get("mask_credentials", True)),
            unmask=tuple(str(u) for u in d.get("unmask", ())),
            image=None if d.get("image") is None else str(d["image"]),
            writable_root=bool(d.get("writable_root", False)),
        )


def load_meta(path: str | Path) -> CageMeta:
    """meta.json, checked: a damaged one is refused in one line naming it."""
    from agentcage.errors import StateError
    from agentcage.state import read_json

    try:
        return CageMeta.from_dict(read_json(path, dict))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise StateError(f"{path} is damaged ({type(e).__name__}: {e}); recreate the cage "
                         "(`agentcage destroy -y NAME` still cleans up)") from None


def make_meta(spec: CageSpec, project: Path, host_uid: int, host_gid: int,
              volumes: tuple[tuple[str, str, str], ...],
              image_env: tuple[tuple[str, str], ...] = ()) -> CageMeta:
    """`image_env`: the environment the cage's image sets, beneath cage.yaml's own."""
    tmpfs = spec.tmpfs
    if not any(t == "/tmp" for t, _ in tmpfs):
        tmpfs += (("/tmp", None),)
    env = tuple(sorted({**dict(image_env), **dict(spec.env)}.items()))
    return CageMeta(str(project), host_uid, host_gid, volumes, spec.uid, spec.gid, tmpfs,
                    env, spec.lifecycle, spec.secret_env, spec.files, spec.named_volumes,
                    spec.seed_files, spec.mask_credentials, spec.unmask, spec.image,
                    spec.writable_root)


def choose_host_user(spec: CageSpec, project: Path) -> tuple[int, int, str]:
    """The real unprivileged host uid/gid the workload runs as (never 0), and why that one."""
    if rootless.active():
        # uid 0 of the namespace is the user who made the cage: the only uid it may use
        if spec.host_user is not None:
            raise BackendError("container.host_user: a rootless cage runs as your own uid; "
                               "remove host_user (or --as-user), or make the cage as root")
        return 0, 0, ROOTLESS_OWN_UID
    if spec.host_user is not None:
        return spec.host_user, spec.host_user, "container.host_user"
    st = project.stat()
    if st.st_uid != 0:
        return st.st_uid, _unprivileged_gid(st.st_uid, st.st_gid), \
            "host_user auto: the project's owner"
    sudo_uid = os.environ.get("SUDO_UID")
    if sudo_uid and sudo_uid.isdigit() and int(sudo_uid) != 0:
        sudo_gid = os.environ.get("SUDO_GID", "")
        return int(sudo_uid), _unprivileged_gid(
            int(sudo_uid), int(sudo_gid) if sudo_gid.isdigit() else 0), \
            "host_user auto: SUDO_UID"
    return 65534, 65534, NOBODY_AS_ROOT_OWNS


def _unprivileged_gid(uid: int, gid: int) -> int:
    """The group the workload runs in: `gid`, unless that is root's group (a project a user
    owns in group 0, as a copy made by root often is), which a cage never runs in: then the
    user's own primary group, or a group numbered as the user (as `host_user` picks)."""
    if gid != 0:
        return gid
    import pwd  # here: `exec` imports this module, and needs none of this

    try:
        primary = pwd.getpwuid(uid).pw_gid
    except KeyError:
        return uid
    return primary if primary != 0 else uid


def check_access(host_uid: int, host_gid: int,
                 volumes: tuple[tuple[str, str, str], ...], how: str) -> None:
    """Every volume must be reachable by the host uid the workload runs as (read, and write
    for rw), or every command in the cage would fail later. Checked as that uid, by the kernel
    (`test`, run as that uid and gid, with no supplementary group where they can be dropped),
    so permissions, ACLs and parent directories all count."""
    import subprocess  # here: `exec` imports this module, and needs none of this

    groups: list[int] | None = [] if rootless.groups_settable() else None  # None: kept
    for src, target, mode in volumes:
        test = ["test", "-r", src, "-a", "-x", src] + (["-a", "-w", src] if mode == "rw" else [])
        r = subprocess.run(test, user=host_uid, group=host_gid, extra_groups=groups,
                           capture_output=True, timeout=10)
        if r.returncode != 0:
            if how == NOBODY_AS_ROOT_OWNS and target == WORKSPACE:
                raise BackendError(
                    f"the project {src} belongs to root, and a cage never runs as root: give "
                    f"it to the user who works in it (chown -R USER {src}) or run the cage as "
                    "a uid that can write it (--as-user UID, or container.host_user)")
            need = "read and write" if mode == "rw" else "read"
            raise BackendError(
                f"volume {src} ({target}): host uid {host_uid} ({how}) cannot {need} it; make "
                "it and its parent directories reachable by that uid, or run the cage as a "
                "uid that can (--as-user UID, or container.host_user)"
            )


def resolve_volumes(spec: CageSpec, base: Path, project: Path | None,
                    protected: tuple[Path, ...] = ()) -> tuple[
        Path, tuple[tuple[str, str, str], ...]]:
    """(project dir, all volumes with absolute host paths); --project overrides /workspace.

    Every source is checked again once resolved (`~`, relative paths, `..`, symlinks): what
    cage.yaml spells and what it names can differ. `protected`: directories no mount may reach
    (agentcage's own state)."""
    from pathlib import Path

    from agentcage.mounts import resolved_source_refusal

    volumes = []
    proj = project
    for host, target, mode in spec.volumes:
        src = Path(os.path.expanduser(host))
        src = (base / src).resolve() if not src.is_absolute() else src.resolve()
        if target == WORKSPACE:
            if project is not None:
                src = project.resolve()
            proj = src
        volumes.append((str(src), target, mode))
    if proj is None:
        proj = (project or base).resolve()
        volumes.append((str(proj), WORKSPACE, "rw"))
    for source, _, _ in volumes:
        if not Path(source).is_dir():
            raise BackendError(
                f"volume source {source} is not a directory; create it or fix the path")
        refusal = resolved_source_refusal(Path(source), protected)
        if refusal:
            raise BackendError(f"volume {source}: {refusal}")
    return proj, tuple(volumes)
