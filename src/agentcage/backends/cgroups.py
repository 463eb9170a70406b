"""Resource limits of a cage: one cgroup per running cage, holding every process of its workload.

Memory (swap included), process count and CPU time are limited for the cage as a whole: every
command started in it (`exec`, `shell`, `run`, a service) joins the cage's cgroup before the
sandbox is built, so a fork bomb or a memory hog inside meets the cage's limits, never the
host's. cgroup v2 (one unified hierarchy) and v1 (a hierarchy per controller; hybrid hosts
such as this project's CI, where the unified one carries no controllers) are both handled. The
cgroup is also bound read-only into the cage at /sys/fs/cgroup, inside the cage's own cgroup
namespace, so a measurement from inside (`agentcage verify`) sees the limits that apply.

Where a configured limit cannot be enforced (no cgroup filesystem, a controller missing), the
cage does not start: a limit is never silently dropped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable

from agentcage import rootless
from agentcage.errors import BackendError
from agentcage.record import Factory, record

TYPE_CHECKING = False  # (typing.TYPE_CHECKING, without importing typing: `exec` reads this)
if TYPE_CHECKING:
    from pathlib import Path

PARENT = "agentcage"  # every cage's cgroup lives under this one, at the hierarchy's root


def parent_name(rootless_cages: bool | None = None) -> str:
    """The parent of every cage's cgroup: root's cages share one; each user's rootless cages
    have their own, which root delegates to that user (see `Layout.rootless_refusal`).
    `rootless_cages`: whose (default: this process's)."""
    if rootless_cages is None:
        rootless_cages = rootless.active()
    return f"{PARENT}-{rootless.host_uid()}" if rootless_cages else PARENT
CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000


def cpu_quota(cpus: float) -> int:
    """Microseconds of CPU time per period: `cpus` CPUs' worth."""
    return max(1000, int(cpus * CPU_PERIOD_US))


@record
class Limits:
    """What a cage may use at most; None is no limit of that kind."""

    memory_bytes: int | None = None
    pids: int | None = None
    cpus: float | None = None

    def needed(self) -> tuple[str, ...]:
        return tuple(c for c, v in zip(CONTROLLERS, (self.memory_bytes, self.pids, self.cpus),
                                       strict=True) if v is not None)

    def to_dict(self) -> dict:
        return {"memory_bytes": self.memory_bytes, "pids": self.pids, "cpus": self.cpus}

    @classmethod
    def from_dict(cls, d: dict | None) -> Limits:
        d = d or {}
        return cls(d.get("memory_bytes"), d.get("pids"), d.get("cpus"))


@record
class Layout:
    """Where the cgroup hierarchies are mounted: v1 controller -> mount point, and the v2
    (unified) mount with the controllers it offers."""

    v1: dict[str, Path] = Factory(dict)  # type: ignore[assignment]
    v2: Path | None = None
    v2_controllers: tuple[str, ...] = ()

    @property
    def version(self) -> int | None:
        # a hybrid host mounts the unified hierarchy too, but with none of these controllers
        if self.v2 is not None and set(CONTROLLERS) & set(self.v2_controllers):
            return 2
        return 1 if self.v1 else None

    def available(self) -> tuple[str, ...]:
        if self.version == 2:
            return tuple(c for c in CONTROLLERS if c in self.v2_controllers)
        return tuple(c for c in CONTROLLERS if c in self.v1)

    def parents(self, rootless_cages: bool | None = None) -> tuple[Path, ...]:
        """The directories every cage's cgroup is made in (one per hierarchy in use)."""
        parent = parent_name(rootless_cages)
        if self.version == 2:
            assert self.v2 is not None
            return (self.v2 / parent,)
        return tuple(sorted({m / parent for m in self.v1.values()}))

    def rootless_refusal(self, limits: Limits) -> str | None:
        """Why a rootless cage cannot enforce `limits` here (None: it can, or none is set).
        A user may make cgroups only below one delegated to them: here, the parent directory
        of their cages, made and given to them once by root."""
        if not limits.needed() or self.version is None:
            return None
        lacking = [p for p in self.parents(rootless_cages=True)
                   if not os.access(p, os.W_OK | os.X_OK)]
        if not lacking:
            return None
        user = rootless.host_uid()
        fix = (f"as root, once: mkdir {' '.join(map(str, lacking))} && chown -R {user} "
               f"{' '.join(map(str, lacking))}")
        if self.version == 2:
            fix += f" (and enable {' '.join(limits.needed())} in the subtree_control above it)"
        return (f"container.limits: a rootless cage cannot enforce {', '.join(limits.needed())} "
                f"here: no cgroup is delegated to uid {user}; {fix}; or run it as root, or set "
                "`limits: none` in cage.yaml's container section")

    def describe(self) -> str:
        if self.version is None:
            return "no cgroup hierarchy with memory, pids or cpu controllers is mounted"
        return f"cgroup v{self.version} ({', '.join(self.available()) or 'no controllers'})"


def detect(mountinfo: str | None = None) -> Layout:
    """The host's cgroup hierarchies, from /proc/self/mountinfo."""
    from pathlib import Path  # here: `exec` imports this module for `join` and `binds`

    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    v1: dict[str, Path] = {}
    v2: Path | None = None
    for line in mountinfo.splitlines():
        pre, _, post = line.partition(" - ")
        fields_pre, fields_post = pre.split(), post.split()
        if len(fields_pre) < 5 or len(fields_post) < 3:
            continue
        root, mountpoint = fields_pre[3], fields_pre[4]
        fstype, options = fields_post[0], fields_post[2].split(",")
        if root != "/":
            continue  # a bind of a sub-cgroup, not a hierarchy's root
        if fstype == "cgroup2" and v2 is None:
            v2 = Path(mountpoint)
        elif fstype == "cgroup":
            for controller in CONTROLLERS:
                if controller in options:
                    v1.setdefault(controller, Path(mountpoint))
    controllers: tuple[str, ...] = ()
    if v2 is not None:
        with contextlib.suppress(OSError):
            controllers = tuple((v2 / "cgroup.controllers").read_text().split())
    return Layout(v1, v2, controllers)


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as e:
        raise BackendError(f"cannot set {path}: {e.strerror}") from None


@record
class CageCgroup:
    """The cgroup(s) of one running cage: one directory per v1 controller, or one in v2."""

    layout: Layout
    name: str  # unique per running cage (its network suffix)

    def directories(self) -> dict[str, Path]:
        """controller -> the cage's directory for it (one directory for all in v2)."""
        if self.layout.version == 2:
            return dict.fromkeys(CONTROLLERS, self.layout.parents()[0] / self.name)
        return {c: m / parent_name() / self.name for c, m in self.layout.v1.items()}

    def create(self, limits: Limits) -> tuple[Path, ...]:
        """Make the cgroup and set the limits; the directories that processes must join."""
        missing = [c for c in limits.needed() if c not in self.layout.available()]
        if missing:
            raise BackendError(
                f"container.limits: cannot enforce {', '.join(missing)} here "
                f"({self.layout.describe()}); mount the cgroup controllers, or set those limits "
                "to null in cage.yaml to run without them"
            )
        if not limits.needed():
            return ()
        if rootless.active():
            refusal = self.layout.rootless_refusal(limits)
            if refusal:
                raise BackendError(refusal)
        if self.layout.version == 2:
            self._create_v2(limits)
        else:
            self._create_v1(limits)
        return self.joined()

    def joined(self) -> tuple[Path, ...]:
        existing = {d for d in self.directories().values() if d.is_dir()}
        return tuple(sorted(existing))

    def _create_v1(self, limits: Limits) -> None:
        dirs = self.directories()
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        if limits.memory_bytes is not None:
            memory = dirs["memory"]
            _write(memory / "memory.limit_in_bytes", str(limits.memory_bytes))
            swap = memory / "memory.memsw.limit_in_bytes"  # memory + swap: no swap beyond it
            if swap.exists():
                _write(swap, str(limits.memory_bytes))
        if limits.pids is not None:
            _write(dirs["pids"] / "pids.max", str(limits.pids))
        if limits.cpus is not None:
            cpu = dirs["cpu"]
            quota = cpu_quota(limits.cpus)
            _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(cpu / "cpu.cfs_quota_us", str(quota))
            if (cpu / "cpu.cfs_burst_us").exists():
                _write(cpu / "cpu.cfs_burst_us", str(quota))

    def _create_v2(self, limits: Limits) -> None:
        assert self.layout.v2 is not None
        parent = self.layout.v2 / parent_name()
        parent.mkdir(exist_ok=True)
        wanted = " ".join(f"+{c}" for c in limits.needed())
        # controllers must be enabled in every ancestor's subtree_control for the child to
        # have them (the parent holds no process, as cgroup v2 requires); the root's is
        # root's to write, and a rootless cage's delegation has done it
        for d in (() if rootless.active() else (self.layout.v2,)) + (parent,):
            _write(d / "cgroup.subtree_control", wanted)
        d = parent / self.name
        d.mkdir(exist_ok=True)
        if limits.memory_bytes is not None:
            _write(d / "memory.max", str(limits.memory_bytes))
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", "0")
        if limits.pids is not None:
            _write(d / "pids.max", str(limits.pids))
        if limits.cpus is not None:
            quota = cpu_quota(limits.cpus)
            _write(d / "cpu.max", f"{quota} {CPU_PERIOD_US}")
            if (d / "cpu.max.burst").exists():
                _write(d / "cpu.max.burst", str(quota))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.joined():
            with contextlib.suppress(OSError):
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return found

    def destroy(self, grace: float = 2.0) -> None:
        """Kill whatever is still in the cgroup and remove it. Idempotent."""
        deadline = time.monotonic() + grace
        while (left := self.pids()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        for d in set(self.directories().values()):
            with contextlib.suppress(FileNotFoundError):
                d.rmdir()


def join(directories: Iterable[str]) -> None:
    """Move the calling process into the cage's cgroup(s): for a child between fork and exec,
    a process of one thread (a fork has only the thread that forked).

    In a v1 hierarchy the thread is moved (its `tasks` file, "0": the caller): for a process
    of one thread that is the process, and everything it starts is born there. Writing
    `cgroup.procs` instead takes the kernel's lock over every thread group of the host, whose
    first taking after a pause waits out an RCU grace period (7-20 ms on this project's
    cgroup-v1 VM, on every `exec`); moving the caller's own thread needs no such lock. A v2
    directory has only `cgroup.procs` (`cgroup.threads` is for threaded cgroups)."""
    for d in directories:
        tasks = os.path.join(d, "tasks")
        if os.path.exists(tasks):  # v1 (a v2 directory has no `tasks` file)
            with open(tasks, "w") as f:
                f.write("0")
        else:
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))


def binds(directories: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """(host directory, cage path) to bind read-only into the cage, so that its limits can be
    read inside (where its cgroup namespace makes its own cgroup the root): a v1 controller's
    directory at /sys/fs/cgroup/<the hierarchy's name>, the v2 one at /sys/fs/cgroup."""
    found = []
    for d in directories:
        if os.path.exists(os.path.join(d, "cgroup.controllers")):
            found.append((d, "/sys/fs/cgroup"))
        else:  # <mount point>/agentcage/<name>
            hierarchy = os.path.basename(os.path.dirname(os.path.dirname(d.rstrip("/"))))
            found.append((d, f"/sys/fs/cgroup/{hierarchy}"))
    return tuple(found)
