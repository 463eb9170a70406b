"""Running commands in a started cage: the sandbox specification of one command (with the files
it receives on descriptors) and the three ways to run it — attached, captured, or detached.

Every run is proven: the sandbox writes one byte on a pipe just before it execs the command,
which it can only do once every layer is in place. No byte means nothing ran: an error, never a
silent unsandboxed run. A command can also be held at a gate behind that byte (`start` with
`gated`): its sandbox is made, and the command runs once `Running.release` says so, or never.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
from collections.abc import Sequence

from agentcage import procfs, rootless
from agentcage.backends import cgroups, entry, netplan
from agentcage.backends.keyring import join_new_session_keyring
from agentcage.backends.profile import CageMeta, load_meta
from agentcage.backends.sandbox import (
    AGENT_HOME,
    CAGE_BUNDLE_PATH,
    CAGE_CA_PATH,
    SYSTEM_BUNDLE_PATH,
    DataFile,
    Mount,
    SandboxSpec,
    cage_environment,
    host_root_links,
    mount_points,
    pivot_masks,
    sandbox_argv,
    sandbox_env,
    with_paths,
)
from agentcage.backends.seccomp import build_filter
from agentcage.errors import BackendError, StateError
from agentcage.record import record, replace
from agentcage.state import CA_CERT, CageDir, read_json

# Imported where a cage needs them (an image, named volumes, a terminal, a lent Python): a
# plain `exec` pays for none of their imports.
TYPE_CHECKING = False  # (typing.TYPE_CHECKING, without importing typing: `exec` reads this)
if TYPE_CHECKING:
    from pathlib import Path

    from agentcage.backends import volumes


@record
class Target:
    """A running cage: where its files are, its network plan, its workload profile."""

    cage: CageDir
    plan: netplan.NetPlan
    meta: CageMeta
    cgroups: tuple[str, ...] = ()  # the cage's cgroup directories: every command joins them


def running_target(cage: CageDir) -> Target:
    """The running cage's namespace and workload profile; refuses if anything is down."""
    path = cage.file("runtime.json")
    runtime: dict = read_json(path, dict) if os.path.exists(path) else {"status": "stopped"}
    if runtime.get("status") != "running":
        raise BackendError(f"cage {cage.name} is not running; `agentcage start {cage.name}`")
    gw_pid, gw_start = runtime.get("gateway_pid"), runtime.get("gateway_start")
    if not gw_pid or not procfs.is_process(int(gw_pid),
                                           None if gw_start is None else int(gw_start)):
        raise BackendError(f"the gateway of cage {cage.name} is not running; restart the cage")
    try:
        plan = netplan.NetPlan.from_dict(runtime["plan"])
    except (KeyError, TypeError, ValueError):
        raise StateError(f"{path} is damaged; `agentcage destroy -y {cage.name}` "
                         "still cleans up") from None
    return Target(cage, plan, load_meta(cage.file("meta.json")),
                  tuple(str(d) for d in runtime.get("cgroups", ())))


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def workload_env(t: Target) -> dict[str, str]:
    """cage.yaml's env with every stored secret that has an injection rule replaced by its
    placeholder (read fresh on every exec, so a rotation reaches new processes)."""
    env = dict(t.meta.env)
    env.update(placeholders(t))
    return env


def placeholders(t: Target) -> dict[str, str]:
    """ENV -> placeholder of each stored secret with an injection rule."""
    if not t.meta.secret_env:  # the secrets package only for a cage that has injected secrets
        return {}
    from agentcage.secrets import cage as cage_secrets

    return cage_secrets.workload_env(t.cage, t.meta.secret_env)


def open_volumes(t: Target, env_placeholders: dict[str, str]) -> list[volumes.OpenVolume]:
    """The cage's named volumes, opened (made if missing), with its seed files put in (seed
    files lie in named volumes: without one, there is nothing to do)."""
    if not t.meta.named_volumes:
        return []
    from agentcage.backends import volumes

    opened = volumes.open_volumes(t.cage, t.meta.named_volumes, t.meta.host_uid,
                                  t.meta.host_gid)
    try:
        volumes.apply_seeds(opened, t.meta.seed_files, env_placeholders, t.meta.host_uid,
                            t.meta.host_gid)
    except BaseException:
        for v in opened:
            os.close(v.fd)
        raise
    return opened


def sandbox_spec(t: Target, command: Sequence[str], interactive: bool, fds: list[int],
                 started_fd: int, gate_fd: int | None = None,
                 named: Sequence[volumes.OpenVolume] = (),
                 env_placeholders: dict[str, str] | None = None,
                 as_root: bool = False, root_source: str | None = None,
                 lend_python: bool = False) -> SandboxSpec:
    """The spec of one command; the descriptors it opens are appended to `fds` (caller closes).
    `named`: the named volumes, opened and staged by `launch` (see volumes.py);
    `env_placeholders`: the secrets' placeholders, when the caller has read them already;
    `as_root`: the command runs as root of the cage's user namespace, its layer writable (a
    cage with an image only); `root_source`: where bubblewrap finds the layer (staged);
    `lend_python`: `python3 ARGS` runs the host's interpreter, lent read-only (lentpython.py)."""
    def data(name: str, content: bytes, dest: str) -> DataFile:
        fd = _memfd(name, content)
        fds.append(fd)
        return DataFile(fd, dest)

    if as_root and t.meta.image is None:
        raise BackendError(f"cage {t.cage.name} runs the host's own /usr read-only, which "
                           "nothing in it can change: --as-root needs a cage with "
                           "container.image (its own layer)")
    env = dict(t.meta.env)
    env.update(placeholders(t) if env_placeholders is None else env_placeholders)
    with open(t.cage.file(CA_CERT), "rb") as f:
        ca = f.read()
    system_bundle = os.path.exists(SYSTEM_BUNDLE_PATH)
    system = b""
    if system_bundle:
        with open(SYSTEM_BUNDLE_PATH, "rb") as f:
            system = f.read()
    uid, gid = (0, 0) if as_root else (t.meta.uid, t.meta.gid)
    files = [
        data("resolv", f"nameserver {t.plan.gateway_address}\noptions attempts:1\n".encode(),
             "/etc/resolv.conf"),
        data("hosts", b"127.0.0.1 localhost\n", "/etc/hosts"),
        data("passwd", f"root:x:0:0::/root:/usr/sbin/nologin\n"
                       f"agent:x:{t.meta.uid}:{t.meta.gid}::/home/agent:/bin/sh\n".encode(),
             "/etc/passwd"),
        data("group", f"root:x:0:\nagent:x:{t.meta.gid}:\n".encode(), "/etc/group"),
        data("ca", ca, CAGE_CA_PATH),
        data("bundle", system + b"\n" + ca, CAGE_BUNDLE_PATH),
    ]
    if system_bundle:
        files.append(data("sysbundle", system + b"\n" + ca, SYSTEM_BUNDLE_PATH))
    if as_root:
        env.update(HOME="/root", USER="root", LOGNAME="root")
        from agentcage.backends import layers

        if (layers.layer_path(t.cage) / "etc" / "apt" / "apt.conf.d").is_dir():
            # apt drops to its _apt user to download, a uid the cage's namespace lacks
            files.append(data("apt", APT_AS_ROOT, "/etc/apt/apt.conf.d/00agentcage-root"))
    for dest, text in t.meta.files:  # container.files: the agent's own configuration
        files.append(data("file", text.encode(), dest))
    seccomp_fd = _memfd("seccomp", build_filter())
    fds.append(seccomp_fd)
    mounts, masks, read_only = [], [], []
    for src, target, mode in t.meta.volumes:
        mounts.append(Mount(src, target, writable=mode == "rw"))
        if mode == "rw":
            try:
                m, r = pivot_masks(src, target)
            except ValueError as e:
                raise BackendError(str(e)) from None
            masks += m
            read_only += r
    if t.meta.mask_credentials:  # credential files in the host directories: empty here
        from agentcage.backends import credmasks

        for masked in credmasks.still_files(credmasks.listed(t.cage)):
            files.append(data("masked", b"", masked.dest))
    if named:
        from agentcage.backends import volumes
    for index, volume in enumerate(named):
        source = (volumes.staged_path(index) if _stages_volumes()
                  else str(volumes.volumes_root(t.cage) / volume.name))
        mounts.append(Mount(source, volume.target, writable=volume.writable))
    if lend_python:
        from agentcage.backends import lentpython

        lent = lentpython.lend()
        mounts.append(Mount(lent.source, lentpython.LENT_AT))
        env.update(lent.env)
        command = lentpython.command_with(lent, command)
    spec = SandboxSpec(
        command=tuple(command),
        netns=t.plan.cage_ns,
        host_uid=t.meta.host_uid,
        host_gid=t.meta.host_gid,
        uid=uid,
        gid=gid,
        hostname=f"cage-{t.cage.name}"[:63],
        mounts=tuple(mounts),
        masks=tuple(masks),
        read_only_files=tuple(read_only),
        # the cage's own cgroup, where its limits can be read (inside its cgroup namespace)
        cgroup_binds=cgroups.binds(t.cgroups),
        tmpfs=t.meta.tmpfs,
        data_files=tuple(files),
        seccomp_fd=seccomp_fd,
        started_fd=started_fd,
        gate_fd=gate_fd,
        env=cage_environment(f"http://{t.plan.gateway_address}:8080", env,
                             os.environ.get("TERM")),
        root_links=host_root_links(),
        interactive=interactive,
    )
    if t.meta.image is None:
        return spec
    return _on_layer(t, spec, root_source, writable=as_root or t.meta.writable_root)


APT_AS_ROOT = b'APT::Sandbox::User "root";\n'


def _on_layer(t: Target, spec: SandboxSpec, root_source: str | None,
              writable: bool) -> SandboxSpec:
    """The spec with the cage's layer as its root: every mount point made in the layer, and
    the paths bubblewrap is given resolved inside it (layers.py)."""
    from agentcage.backends import layers

    layer = layers.layer_path(t.cage)
    if not layer.is_dir():
        raise BackendError(f"cage {t.cage.name} has no layer of its image; `agentcage restart "
                           f"{t.cage.name}` makes it")
    dirs, files = mount_points(spec)
    fitted = layers.fit_mount_points(layer, dirs, files, t.meta.host_uid, t.meta.host_gid)
    for fixed in ("/proc", "/dev", "/run", "/var/tmp", AGENT_HOME):
        if fitted.get(fixed, fixed) != fixed:
            raise BackendError(f"the image of cage {t.cage.name} has a link at {fixed} (to "
                               f"{fitted[fixed]}); agentcage mounts its own there: make it a "
                               "directory in the image")
    spec = with_paths(spec, fitted)
    return replace(spec, root=root_source or str(layer), root_writable=writable)


def _stages_volumes() -> bool:
    """Whether named volumes are bound under volumes.STAGING first: when agentcage runs as
    root, whose state directory the workload's uid cannot reach (see volumes.py)."""
    return os.geteuid() == 0


def _before_exec(cgroup_dirs: tuple[str, ...], stager: volumes.Stager | None, netns: str,
                 host_uid: int, host_gid: int, clear_groups: bool) -> None:
    """In the child, before bwrap: into the cage's cgroup (its limits hold for everything
    the command starts), a fresh session keyring, the named volumes staged where bubblewrap
    can mount them from (in a mount namespace of this command), then into the cage's network
    namespace and down to its host uid (entry.py), last: the rest needs root.
    Interrupts as a terminal sends them act on the cage's commands whatever the caller
    ignored: a shell started from a background job (SIGINT and SIGQUIT ignored, as POSIX
    has them) would else pass that on, and Ctrl-C in the cage would stop nothing."""
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    cgroups.join(cgroup_dirs)
    join_new_session_keyring()
    if stager is not None:
        stager.stage()
    entry.enter(netns, host_uid, host_gid, clear_groups)


def launch(t: Target, command: Sequence[str], interactive: bool, popen_args: dict,
           detached: bool = False, gate: int | None = None,
           as_root: bool = False, lend_python: bool = False) -> tuple[subprocess.Popen, int]:
    """Start one sandboxed command; returns the process and the read end of the started pipe.
    `gate`: the read end of a pipe the command waits on (see `start`); `as_root`,
    `lend_python`: see `sandbox_spec`."""
    fds: list[int] = []
    named: list[volumes.OpenVolume] = []
    started_r, started_w = os.pipe()
    try:
        os.fchown(started_w, t.meta.host_uid, t.meta.host_gid)  # the sandbox reopens it
        if gate is not None:
            os.fchown(gate, t.meta.host_uid, t.meta.host_gid)  # and this one
        env_placeholders = placeholders(t)
        named = open_volumes(t, env_placeholders)
        stager = None
        staged: list[str] = []
        if named or t.meta.image is not None:
            from agentcage.backends import layers, volumes

            staged = [str(volumes.volumes_root(t.cage) / v.name) for v in named]
        if t.meta.image is not None:  # the layer is staged as the volumes are, after them
            staged.append(str(layers.layer_path(t.cage)))
        root_source = None
        if staged and _stages_volumes():
            volumes.prepare_staging()
            stager = volumes.Stager(staged)
            if t.meta.image is not None:
                root_source = volumes.staged_path(len(named))
        spec = sandbox_spec(t, command, interactive, fds, started_w, gate, named,
                            env_placeholders, as_root, root_source, lend_python)
        if detached:
            spec = replace(spec, die_with_parent=False)
        passed = (*fds, started_w) if gate is None else (*fds, started_w, gate)
        try:
            proc = subprocess.Popen(sandbox_argv(spec), env=sandbox_env(spec),
                                    pass_fds=passed,
                                    preexec_fn=functools.partial(
                                        _before_exec, t.cgroups, stager, spec.netns,
                                        spec.host_uid, spec.host_gid,
                                        rootless.groups_settable()),
                                    **popen_args)
        except (OSError, subprocess.SubprocessError) as e:
            raise BackendError(f"cannot start the sandbox of cage {t.cage.name}: {e}") from None
    except BaseException:
        os.close(started_r)
        raise
    finally:
        for fd in (*fds, started_w, *(v.fd for v in named)):
            with contextlib.suppress(OSError):
                os.close(fd)
    return proc, started_r


def run(t: Target, command: Sequence[str], interactive: bool, capture: bool,
        timeout: float | None = None, as_root: bool = False,
        lend_python: bool = False) -> subprocess.CompletedProcess[str]:
    """Run and wait; with `capture`, stdout/stderr are returned instead of inherited; with
    `interactive` (and no capture), the command gets a terminal of its own relayed to ours."""
    return start(t, command, interactive, capture, as_root=as_root,
                 lend_python=lend_python).wait(timeout)


def start(t: Target, command: Sequence[str], interactive: bool, capture: bool,
          gated: bool = False, as_root: bool = False, lend_python: bool = False) -> Running:
    """Start a command as `run` does, without waiting for it. `gated`: its sandbox is made,
    and the command waits behind the proof that it is complete until `Running.release` (it
    never runs if that does not come: `Running.abort`, or this process ending)."""
    master = None
    if capture:
        pipes: dict = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE,
                       "stderr": subprocess.PIPE, "text": True}
        interactive = False
    elif interactive:
        from agentcage.backends import terminal

        master, slave = terminal.open_pty(0)
        pipes = {"stdin": slave, "stdout": slave, "stderr": slave}
    else:
        pipes = {}
    gate_r, gate_w = os.pipe() if gated else (None, None)
    try:
        proc, started = launch(t, command, interactive, pipes, gate=gate_r, as_root=as_root,
                               lend_python=lend_python)
    except BaseException:
        for fd in (master, gate_w):
            if fd is not None:
                os.close(fd)
        raise
    finally:
        if master is not None:
            os.close(pipes["stdin"])  # the sandbox holds the other end now
        if gate_r is not None:
            os.close(gate_r)
    return Running(t.cage.name, list(command), proc, started, capture, master, gate_w)


class Running:
    """A sandboxed command started by `start`: its process, the read end of its proof, its
    terminal's master (interactive), and the write end of its gate until it is released."""

    def __init__(self, cage: str, command: list[str], proc: subprocess.Popen, started: int,
                 capture: bool, master: int | None, gate: int | None):
        self.cage, self.command, self.proc, self.started = cage, command, proc, started
        self.capture, self.master, self.gate = capture, master, gate

    def release(self) -> None:
        """Let a gated command run."""
        if self.gate is not None:
            gate, self.gate = self.gate, None
            try:
                os.write(gate, b"go\n")
            except BrokenPipeError:
                pass  # the sandbox is gone: `wait` finds no proof and says so
            finally:
                os.close(gate)

    def abort(self) -> None:
        """End it, a gated command before it ran (its gate closed unanswered)."""
        for fd in (self.gate, self.master):
            if fd is not None:
                os.close(fd)
        self.gate = self.master = None
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.communicate()
        os.close(self.started)

    def wait(self, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        """Its end (released first, if gated), once the proof that its sandbox was complete is
        checked: BackendError if there is none (nothing ran)."""
        self.release()
        proc, started, master, self.master = self.proc, self.started, self.master, None
        try:
            try:
                if master is not None:
                    owned, master = master, None  # relay closes it, whatever happens
                    from agentcage.backends import terminal

                    terminal.relay(owned, proc)
                    out = err = None
                else:
                    out, err = proc.communicate(timeout=timeout)
            except (KeyboardInterrupt, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
                raise
            finally:
                if master is not None:
                    os.close(master)
            os.set_blocking(started, False)
            try:
                proof = os.read(started, 16)
            except BlockingIOError:
                proof = b""
            if not proof:
                detail = (f": {err.strip().splitlines()[-1]}"
                          if self.capture and err and err.strip() else "")
                raise BackendError(
                    f"the sandbox of cage {self.cage} could not be set up "
                    f"(bwrap exit {proc.returncode}{detail}); nothing ran"
                )
            return subprocess.CompletedProcess(self.command, proc.returncode, out, err)
        finally:
            os.close(started)


def exit_status(returncode: int) -> int:
    """A command's status as a shell gives it: 128 + N for one ended by signal N (a cage
    stopped from another terminal: 137, not Python's -9, which an exit would turn into 247)."""
    return 128 - returncode if returncode < 0 else returncode


def spawn(t: Target, command: Sequence[str], log: Path, timeout: float = 10.0) -> int:
    """Start `command` in the background (a service workload) with output to `log`; returns
    its pid once the sandbox proved it is complete. It outlives the CLI."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc, started = launch(t, command, False, {
            "stdin": subprocess.DEVNULL, "stdout": fd, "stderr": fd,
            "start_new_session": True}, detached=True)
    finally:
        os.close(fd)
    try:
        import select

        ready, _, _ = select.select([started], [], [], timeout)
        if not ready or not os.read(started, 1):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            raise BackendError(
                f"the service workload of cage {t.cage.name} could not be set up; "
                f"nothing ran (see {log})"
            )
    finally:
        os.close(started)
    return proc.pid
