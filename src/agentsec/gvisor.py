"""gVisor's runsc as podman's OCI runtime: whether this host can run a runsc preset, and if not,
why, in one line (for `agentsec presets` and before a run).

runsc's own network stack (its default, ``network=sandbox``) copies the interfaces of the
container's network namespace into the sandbox, and first refuses the host's namespace, which
releases before August 2024 tell by a sysctl that only the initial namespace used to have:
``net.core.rmem_default``. Newer kernels show it in every namespace, and those releases then
refuse every namespace ("cannot run with network enabled in root network namespace"): the
container does not start. ``--runtime-flag network=host`` (the container's own namespace,
through the host's kernel) and ``network=none`` do not go through that check.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence

RUNTIME = "runsc"
NETSTACK = "sandbox"  # runsc's default network: its own stack
# Releases from this date on tell the host's network namespace by another sysctl.
FIXED_RELEASE = 20240801
RMEM_DEFAULT = "/proc/sys/net/core/rmem_default"
# Registered in the initial network namespace only, on every kernel this runs on.
INITIAL_NET_ONLY = "/proc/sys/net/core/netdev_max_backlog"
CHECK_TIMEOUT_S = 10


def runsc_network(flags: Sequence[str]) -> str:
    """The network mode runsc gets from podman's `--runtime-flag network=MODE` (last wins)."""
    mode = NETSTACK
    for index, flag in enumerate(flags):
        value = None
        if flag == "--runtime-flag" and index + 1 < len(flags):
            value = flags[index + 1]
        elif flag.startswith("--runtime-flag="):
            value = flag.partition("=")[2]
        if value and value.lstrip("-").startswith("network="):
            mode = value.lstrip("-").partition("=")[2]
    return mode


def release_date(binary: str) -> int | None:
    """runsc's release as a date (20221219 from Debian's 'runsc version 0.0~20221219.0',
    20240807 from 'runsc version release-20240807.0'), or None when it does not say."""
    try:
        proc = subprocess.run([binary, "--version"], capture_output=True, text=True,
                              timeout=CHECK_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = proc.stdout.splitlines()[0] if proc.stdout else ""
    found = re.search(r"(?:~|release-)(\d{8})\b", first)
    return int(found.group(1)) if found else None


def sysctl_in_every_namespace() -> bool | None:
    """Whether this kernel shows net.core.rmem_default in a network namespace that is not the
    initial one; None when that cannot be found out here."""
    if not os.path.exists(INITIAL_NET_ONLY):  # already in a namespace of our own
        return os.path.exists(RMEM_DEFAULT)
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    own_user = () if os.geteuid() == 0 else ("--user", "--map-root-user")
    try:
        proc = subprocess.run([unshare, *own_user, "--net", "--", "test", "-e", RMEM_DEFAULT],
                              capture_output=True, timeout=CHECK_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode not in (0, 1) or proc.stderr:
        return None
    return proc.returncode == 0


def why_not(flags: Sequence[str]) -> str | None:
    """Why a podman preset with runsc as its runtime cannot run here, or None."""
    binary = shutil.which(RUNTIME)
    if binary is None:
        return "runsc (gVisor) is not installed"
    if runsc_network(flags) != NETSTACK:
        return None
    release = release_date(binary)
    if release is None or release >= FIXED_RELEASE:
        return None
    if sysctl_in_every_namespace():
        # One line at `agentsec presets`; the module's docstring and the README say why.
        return f"runsc {release}: its own network stack will not start on this kernel"
    return None
