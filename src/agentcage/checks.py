"""Host checks: what the namespace backend needs, each with a fix. Used by `doctor` and `start`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentcage.errors import HostCheckError


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _binary(name: str, package: str) -> Check:
    path = shutil.which(name)
    if path:
        return Check(f"{name} installed", True, path)
    return Check(f"{name} installed", False, "not found", f"apt-get install {package}")


def _mode() -> Check:
    """Root, or rootless: what this user's cages are made with, and whether they can be."""
    from agentcage import rootless

    if rootless.active():
        return Check("mode", True, f"rootless (uid {rootless.host_uid()}), inside its "
                     "namespaces")
    if os.geteuid() == 0:
        return Check("mode", True, "root: cages in the host's namespaces")
    from agentcage.rootless.holder import requirements, subordinate_range

    missing = requirements()
    if missing:
        return Check("mode", False, f"uid {os.geteuid()}, and rootless cages cannot be made "
                     f"here: {missing[0]}", "the fix named, or run as root (sudo)")
    ids = ("its /etc/subuid range" if subordinate_range(Path("/etc/subuid"), os.getuid())
           and shutil.which("newuidmap") else "its own uid only (no /etc/subuid range)")
    return Check("mode", True, f"rootless (uid {os.geteuid()}): cages in a user namespace of "
                 f"yours mapping {ids}, uplink through slirp4netns")


def _userns() -> Check:
    try:
        limit = int(Path("/proc/sys/user/max_user_namespaces").read_text())
    except (OSError, ValueError):
        limit = 0
    clone = Path("/proc/sys/kernel/unprivileged_userns_clone")
    allowed = not clone.exists() or clone.read_text().strip() == "1"
    ok = limit > 0 and allowed
    return Check(
        "unprivileged user namespaces", ok, f"max_user_namespaces={limit}",
        "sysctl -w user.max_user_namespaces=15000 kernel.unprivileged_userns_clone=1",
    )


def _seccomp() -> Check:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        status = ""
    ok = "Seccomp:" in status
    return Check("seccomp filters", ok, "supported" if ok else "no Seccomp field",
                 "use a kernel built with CONFIG_SECCOMP_FILTER")


def _arch() -> Check:
    from agentcage.backends.seccomp import _ARCHES

    machine = os.uname().machine  # what platform.machine() says, without its import
    return Check("architecture", machine in _ARCHES, machine, "x86_64 or aarch64 is required")


def _netns() -> Check:
    ok = Path("/proc/self/ns/net").exists()
    return Check("network namespaces", ok, "/proc/self/ns/net", "use a kernel with CONFIG_NET_NS")


def _mitmproxy() -> Check:
    try:
        import mitmproxy.version as v
    except ImportError:
        return Check("mitmproxy 12", False, "not importable", "pip install 'agentcage[gateway]'")
    from agentcage.gateway.proxy import ADDON_MODULES

    # look for the files: importing mitmproxy.addons here would cost a second
    addons_dir = Path(v.__file__).parent / "addons"
    major = int(v.VERSION.split(".")[0])
    missing = [m for m in ADDON_MODULES if not (addons_dir / f"{m}.py").exists()]
    ok = major == 12 and not missing
    detail = v.VERSION + (f" (missing addons: {', '.join(missing)})" if missing else "")
    return Check("mitmproxy 12", ok, detail, "pip install 'mitmproxy>=12,<13'")


def _dnslib() -> Check:
    # looked up, not imported: every start runs this check, and the gateway imports it itself
    import importlib.util

    if importlib.util.find_spec("dnslib") is None:
        return Check("dnslib", False, "not installed", "pip install dnslib")
    return Check("dnslib", True, "installed")


def _limits() -> Check:
    from agentcage import rootless
    from agentcage.backends.cgroups import CONTROLLERS, Limits, detect

    layout = detect()
    missing = [c for c in CONTROLLERS if c not in layout.available()]
    if not missing and (rootless.active() or os.geteuid() != 0):
        refusal = layout.rootless_refusal(Limits(1, 1, 1.0))
        if refusal:
            return Check("resource limits", True, "rootless: none can be enforced, no cgroup "
                         "is delegated to you (a cage sets `limits: none`, or is refused)",
                         refusal.split("; ", 1)[1])
        return Check("resource limits", True, f"{layout.describe()}, rootless: delegated")
    return Check(
        "resource limits", not missing,
        f"{layout.describe()}: container.limits {'can' if not missing else 'cannot'} be enforced"
        + (f" (missing: {', '.join(missing)})" if missing else ""),
        "mount the cgroup controllers (memory, pids, cpu), or set the missing limits to null in "
        "cage.yaml to run without them",
    )


def _zygote() -> Check:
    """Whether this state root's gateway zygote runs (information: a cage starts without)."""
    from agentcage.backends import zygote
    from agentcage.state import state_root

    root = state_root()
    if not zygote.usable(root):
        return Check("gateway zygote", True, "not used here (turned off, not root, or a state "
                     "root path too long for a socket): every gateway is spawned")
    try:
        sock, pid = zygote.connect(zygote.place(root))
    except zygote.Absent:
        return Check("gateway zygote", True, "not running: the next cage starts one")
    except zygote.Unusable as e:
        return Check("gateway zygote", True, f"not used ({e}): gateways are spawned",
                     "agentcage zygote stop")
    sock.close()
    return Check("gateway zygote", True,
                 f"running, pid {pid}: cages' gateways are forked from it (`agentcage zygote`)")


CHECKS: tuple[Callable[[], Check], ...] = (
    _mode,
    lambda: _binary("bwrap", "bubblewrap"),
    lambda: _binary("nft", "nftables"),
    lambda: _binary("ip", "iproute2"),
    lambda: _binary("nsenter", "util-linux"),
    lambda: _binary("setpriv", "util-linux"),
    lambda: _binary("sysctl", "procps"),
    _userns,
    _seccomp,
    _arch,
    _netns,
    _mitmproxy,
    _dnslib,
)
# Reported by `doctor`, but not required by every cage: a cage that sets no limit, or whose
# limits the host offers, starts (the backend refuses one whose limits cannot be enforced).
ADVISORY: tuple[Callable[[], Check], ...] = (_limits, _zygote)


def run_checks(advisory: bool = True) -> list[Check]:
    results = []
    for check in CHECKS + (ADVISORY if advisory else ()):
        try:
            results.append(check())
        except Exception as e:  # a crashing check is a failed check, never a pass
            results.append(Check(getattr(check, "__name__", "check"), False, f"error: {e}"))
    return results


def require_host() -> None:
    failed = [c for c in run_checks(advisory=False) if not c.ok]
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more; run `agentcage doctor`)" if len(failed) > 1 else ""
        raise HostCheckError(
            f"cannot start a cage: {first.name}: {first.detail}; fix: {first.fix}{more}"
        )
