"""The workload sandbox: one flat parameter object in, one argument list out (pure, no I/O).

The process that execs the command line has, in this order (workload.py, between fork and
exec): joined the cage's cgroup and a fresh, empty session keyring (keyring.py), then entered
the cage's network namespace (only a veth to the gateway) and become a REAL unprivileged host
uid with no supplementary groups and no_new_privs (entry.py: what `nsenter --net` and `setpriv
--reuid H --regid G --clear-groups --no-new-privs` did; namespaced root is never host root).
The command line is then:
  bwrap ...                            user/pid/ipc/uts/cgroup namespaces, no capabilities, no new
                                       privileges, read-only root, seccomp filter, /workspace, masks
and the environment it starts with is the cage's own (`sandbox_env`).
"""

from __future__ import annotations

import os

from agentcage import rootless
from agentcage.record import Factory, record, replace

TYPE_CHECKING = False  # (typing.TYPE_CHECKING, without importing typing: `exec` reads this)
if TYPE_CHECKING:
    from pathlib import Path

CAGE_CA_PATH = "/run/agentcage/ca.pem"
CAGE_BUNDLE_PATH = "/run/agentcage/ca-bundle.pem"
SYSTEM_BUNDLE_PATH = "/etc/ssl/certs/ca-certificates.crt"
WORKSPACE = "/workspace"
AGENT_HOME = "/home/agent"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Host directories bound read-only as the cage's root (merged /usr: the rest are symlinks).
ROOT_DIRS = ("/usr", "/etc", "/opt")
ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")


@record
class DataFile:
    """Content handed to bwrap on an inherited file descriptor and bound read-only at `dest`."""

    fd: int
    dest: str


@record
class Mount:
    source: str
    dest: str
    writable: bool = False


@record
class SandboxSpec:
    command: tuple[str, ...]
    netns: str
    host_uid: int
    host_gid: int
    uid: int = 1000
    gid: int = 1000
    hostname: str = "cage"
    mounts: tuple[Mount, ...] = ()
    masks: tuple[str, ...] = ()  # existing paths inside the cage hidden behind an empty tmpfs
    read_only_files: tuple[tuple[str, str], ...] = ()  # (host path, cage path) bound read-only
    cgroup_binds: tuple[tuple[str, str], ...] = ()  # the cage's cgroup dirs, bound read-only
    tmpfs: tuple[tuple[str, int | None], ...] = (("/tmp", None),)
    data_files: tuple[DataFile, ...] = ()
    seccomp_fd: int | None = None
    started_fd: int | None = None  # the sandbox writes one byte here just before the command
    # With started_fd: once that byte is written, the command waits for a line here and runs
    # only if one comes (the descriptor closed first: it ends without running). `run` makes
    # the sandbox while the gateway starts, and lets the command run once it is ready.
    gate_fd: int | None = None
    env: tuple[tuple[str, str], ...] = ()
    chdir: str = WORKSPACE
    # /bin -> usr/bin ... on merged-/usr hosts
    root_links: dict[str, str] = Factory(dict)  # type: ignore[assignment]
    root_dirs: tuple[str, ...] = ROOT_DIRS
    # A directory that is the cage's whole root instead of the host's root_dirs: the cage's
    # layer, made from its image (layers.py); writable for `shell --as-root` and read_only off.
    root: str | None = None
    root_writable: bool = False
    interactive: bool = False  # stdin is a pty of the cage's own (terminal.py)
    die_with_parent: bool = True  # False for a service workload that outlives the CLI


def sandbox_argv(spec: SandboxSpec) -> list[str]:
    rootless_cage = rootless.active()
    if (spec.host_uid == 0 or spec.host_gid == 0) and not rootless_cage:
        raise ValueError("the workload must run as an unprivileged host uid/gid, never 0")
    if spec.seccomp_fd is None:
        raise ValueError("a seccomp filter is mandatory")
    if spec.gate_fd is not None and spec.started_fd is None:
        raise ValueError("a gate is passed behind the started marker")
    # (entered before: the cage's network namespace and host uid, see the module's doc)
    # In a rootless cage, uid 0 of the namespace is the user: bubblewrap then holds the
    # namespace's capabilities while it builds the sandbox, as a setuid bubblewrap holds
    # root's (without them it cannot map the sandbox's uid), and the command runs in
    # bubblewrap's own user namespace below, with none (--cap-drop ALL).
    argv = ["bwrap", "--unshare-user", "--uid", str(spec.uid), "--gid", str(spec.gid)]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    argv += ["--disable-userns", "--cap-drop", "ALL", "--hostname", spec.hostname]
    if spec.die_with_parent:
        argv += ["--die-with-parent"]
    # Never the caller's terminal session: an interactive command gets a pty of its own, made
    # its controlling terminal in the cage below (see terminal.py).
    argv += ["--new-session"]
    if spec.root is not None:
        argv += ["--bind" if spec.root_writable else "--ro-bind", spec.root, "/"]
    else:
        for d in spec.root_dirs:
            argv += ["--ro-bind", d, d]
        for link, target in sorted(spec.root_links.items()):
            argv += ["--symlink", target, link]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for target, size in spec.tmpfs:
        if size:
            argv += ["--size", str(size)]
        argv += ["--tmpfs", target]
    argv += ["--tmpfs", "/run", "--tmpfs", "/var/tmp"]
    if not any(m.dest == AGENT_HOME for m in spec.mounts):  # else a named volume is the home
        argv += ["--tmpfs", AGENT_HOME]
    for m in spec.mounts:
        argv += ["--bind" if m.writable else "--ro-bind", m.source, m.dest]
    for mask in spec.masks:
        argv += ["--tmpfs", mask]
    for source, dest in spec.read_only_files + spec.cgroup_binds:
        argv += ["--ro-bind", source, dest]
    for data in spec.data_files:
        argv += ["--perms", "0444", "--ro-bind-data", str(data.fd), data.dest]
    # bwrap builds the root on a tmpfs of its own; once every mount point exists on it, it goes
    # read-only too, so only /tmp, /run, /var/tmp, the home and writable mounts take writes.
    if not spec.root_writable:
        argv += ["--remount-ro", "/"]
    argv += ["--seccomp", str(spec.seccomp_fd)]
    argv += ["--chdir", spec.chdir, "--"]
    if spec.started_fd is not None and spec.gate_fd is not None:
        argv += ["/bin/sh", "-c", GATED_SCRIPT, "cage", str(spec.started_fd), str(spec.gate_fd)]
    elif spec.started_fd is not None:
        # proof that every layer was applied: bwrap only execs this once the sandbox is complete
        argv += ["/bin/sh", "-c", STARTED_SCRIPT, "cage", str(spec.started_fd)]
    if spec.interactive:
        # a session of the cage's own whose controlling terminal is the pty on stdin, so that
        # job control and the terminal's foreground group stay inside the cage's PID namespace
        argv += ["setsid", "--ctty", "--wait"]
    argv += list(spec.command)
    return argv


# $0 ("cage") is what the shell names itself in its errors ("cage: 1: exec: x: not found");
# $1 is the descriptor of the proof.
STARTED_SCRIPT = 'printf s >"/proc/self/fd/$1" && shift && exec "$@"'
# $2: the gate; `read` fails on its end without a line, and nothing runs
GATED_SCRIPT = ('printf s >"/proc/self/fd/$1" && read -r go <"/proc/self/fd/$2" && shift 2 '
                '&& exec "$@"')


def mount_points(spec: SandboxSpec) -> tuple[list[str], list[str]]:
    """(directories, files) the sandbox mounts something on that must exist in its root when
    the root is a directory of its own (`root`): all but those inside another of its mounts
    (a tmpfs, or a host directory), where bubblewrap or the host provides them."""
    tmpfs = ["/proc", "/dev", "/run", "/var/tmp", *(t for t, _ in spec.tmpfs)]
    if not any(m.dest == AGENT_HOME for m in spec.mounts):
        tmpfs.append(AGENT_HOME)
    inside = [*tmpfs, *(m.dest for m in spec.mounts)]

    def covered(path: str) -> bool:
        return any(path.startswith(c.rstrip("/") + "/") for c in inside)

    dirs = [*tmpfs, *(m.dest for m in spec.mounts), *spec.masks,
            *(dest for _, dest in spec.cgroup_binds), spec.chdir]
    files = [*(d.dest for d in spec.data_files), *(dest for _, dest in spec.read_only_files)]
    return (list(dict.fromkeys(d for d in dirs if not covered(d))),
            list(dict.fromkeys(f for f in files if not covered(f))))


def with_paths(spec: SandboxSpec, fitted: dict[str, str]) -> SandboxSpec:
    """The spec with each path inside the sandbox replaced as `fitted` says (the path, or the
    nearest directory above it that is a key)."""
    def moved(path: str) -> str:
        probe = path
        while True:
            if probe in fitted:
                return fitted[probe] + path[len(probe):]
            if probe in ("/", ""):
                return path
            probe = probe.rsplit("/", 1)[0] or "/"

    return replace(
        spec,
        mounts=tuple(replace(m, dest=moved(m.dest)) for m in spec.mounts),
        masks=tuple(moved(m) for m in spec.masks),
        read_only_files=tuple((s, moved(d)) for s, d in spec.read_only_files),
        cgroup_binds=tuple((s, moved(d)) for s, d in spec.cgroup_binds),
        tmpfs=tuple((moved(t), size) for t, size in spec.tmpfs),
        data_files=tuple(replace(d, dest=moved(d.dest)) for d in spec.data_files),
        chdir=moved(spec.chdir),
    )


def sandbox_env(spec: SandboxSpec) -> dict[str, str]:
    """The environment of every process of the sandbox, bwrap's own init (the cage's PID 1)
    included: the cage's, never the caller's. `--clearenv` would clean only what bwrap starts,
    while bwrap and its init kept whatever the caller had exported (readable in the cage as
    /proc/1/environ). It is handed over as the process environment rather than as `--setenv`
    arguments, so no value appears in a command line that the host's users can read."""
    return dict(spec.env)


def cage_environment(
    proxy_url: str, user_env: dict[str, str], term: str | None = None
) -> tuple[tuple[str, str], ...]:
    """The workload's whole environment: nothing from the caller leaks in but TERM."""
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": AGENT_HOME,
        "USER": "agent",
        "LOGNAME": "agent",
        "LANG": "C.UTF-8",
        "HTTP_PROXY": proxy_url,
        "HTTPS_PROXY": proxy_url,
        "http_proxy": proxy_url,
        "https_proxy": proxy_url,
        "NO_PROXY": "localhost,127.0.0.1",
        "no_proxy": "localhost,127.0.0.1",
        "SSL_CERT_FILE": CAGE_BUNDLE_PATH,
        "REQUESTS_CA_BUNDLE": CAGE_BUNDLE_PATH,
        "CURL_CA_BUNDLE": CAGE_BUNDLE_PATH,
        "GIT_SSL_CAINFO": CAGE_BUNDLE_PATH,
        "NODE_EXTRA_CA_CERTS": CAGE_CA_PATH,
        # npm's (and pnpm's) own: every certificate it meets in the cage is the gateway's,
        # signed by this CA. Without it npm builds each TLS context from Node's whole root
        # store: an install of 300 packages spent 0.5 s more CPU (15%)
        "npm_config_cafile": CAGE_CA_PATH,
        "AGENTCAGE": "1",
    }
    if term:
        env["TERM"] = term
    env.update(user_env)
    return tuple(sorted(env.items()))


# A project's places that would run code on the host or steer an agent: hidden in the cage
PIVOT_MASKS = (".git/hooks", ".claude")


def pivot_masks(project: str | Path, target: str = WORKSPACE
                ) -> tuple[list[str], list[tuple[str, str]]]:
    """(dirs to hide behind tmpfs, files to re-bind read-only) for a writable project mount.

    Only paths that exist are returned: masking a missing path would make bwrap create it on
    the host. A symlink is never followed (it could point anywhere on the host): it raises.
    """
    masks, read_only = [], []
    for rel in PIVOT_MASKS:
        host = os.path.join(project, rel)
        if os.path.islink(host):
            raise ValueError(f"{host} is a symlink; refusing to mount a project that redirects it")
        if os.path.isdir(host):
            masks.append(f"{target}/{rel}")
    config = os.path.join(project, ".git", "config")
    if os.path.islink(config):
        raise ValueError(f"{config} is a symlink; refusing")
    if os.path.isfile(config):
        # read-only: a core.hooksPath written here would bypass the hooks mask
        read_only.append((config, f"{target}/.git/config"))
    return masks, read_only


def host_root_links(root: str = "/") -> dict[str, str]:
    """The top-level symlinks of a merged-/usr host (/bin -> usr/bin ...)."""
    links = {}
    for link in ROOT_LINKS:
        p = os.path.join(root, link.lstrip("/"))
        if os.path.islink(p):
            links[link] = os.readlink(p)
    return links
