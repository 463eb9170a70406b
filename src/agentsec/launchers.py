"""Launchers: how the probe gets into a sandbox. Each builds an argv; none runs anything.

A launch is an argv prefix plus the interpreter to start inside the sandbox; the runner appends
``<python> -`` and feeds the probe on stdin, so the probe file never has to be mounted. The
``command`` launcher is the exception: its template is complete and names ``{probe}``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

from agentsec import gvisor, peers
from agentsec.errors import AgentsecError
from agentsec.report import Target
from agentsec.runner import PROBE_PATH, ProbeRun, run_probe
from agentsec.untrusted import clean_text

ENGINES = ("bwrap", "docker", "podman", "nspawn", *peers.PEER_ENGINES)
# The command each engine is run with, where it is not the engine's own name.
ENGINE_BINARIES = {"nspawn": "systemd-nspawn"}
# How systemd-nspawn runs where systemd is not PID 1: no registration with systemd-machined and
# no scope unit of its own (both need the system bus), the probe's source piped in on stdin and
# nspawn's own messages kept off the probe's stdout. None of these changes what the container
# can reach.
NSPAWN_WITHOUT_SYSTEMD = ("--register=no", "--keep-unit", "--pipe", "--quiet")
PROBE_SETTINGS = (
    "AGENTSEC_PROBE_TIMEOUT",
    "AGENTSEC_PROBE_TARGETS",
    "AGENTSEC_PROBE_PATHS",
    "AGENTSEC_PROBE_PROXY_AUTH",
    "AGENTSEC_PROBE_ONLY",
)
IMAGE_INSPECT_TIMEOUT_S = 30
ENGINE_VERSION_TIMEOUT_S = 10


class LaunchError(AgentsecError):
    """A launch that cannot be built: unknown preset, missing engine or image, bad template."""


@dataclass(frozen=True)
class Preset:
    name: str
    engine: str
    flags: tuple[str, ...]
    rationale: str
    drop_to: str | None = None
    rootless: bool = False
    # Container presets: the OCI runtime podman runs the container with (runsc: gVisor).
    runtime: str | None = None
    # Peers (srt, codex): the version measured, srt's settings file under data/, and settings
    # the probe needs inside that sandbox.
    version: str | None = None
    settings: str | None = None
    probe_env: tuple[tuple[str, str], ...] = ()

    @property
    def needs_image(self) -> bool:
        """An image (docker, podman) or a root directory (nspawn) comes with --image."""
        return self.engine in ("docker", "podman", "nspawn")

    @property
    def takes_directory(self) -> bool:
        """Its --image is a root directory (systemd-nspawn's), not a container image."""
        return self.engine == "nspawn"

    @property
    def binary(self) -> str:
        return ENGINE_BINARIES.get(self.engine, self.engine)

    @property
    def engine_flags(self) -> tuple[str, ...]:
        """The flags the engine is given: the runtime first, then the preset's own."""
        runtime = ("--runtime", self.runtime) if self.runtime else ()
        return (*runtime, *self.flags)

    @property
    def is_peer(self) -> bool:
        return self.engine in peers.PEER_ENGINES


@dataclass(frozen=True)
class Launch:
    prefix: tuple[str, ...]
    python: str | None  # None: the prefix is a whole command that runs the probe itself
    target: Target

    def after_run(self, pid: int, env: Mapping[str, str]) -> None:
        """Tidy what the launcher's process `pid` left behind (a peer's stray files)."""
        peers.remove_leftovers(self.target.engine, pid, env)

    def run(self, env: Mapping[str, str] | None = None) -> ProbeRun:
        """Run the probe this way (its output parsed), then tidy up after the launcher."""
        return run_probe(self.prefix, python=self.python, env=env, after=self.after_run)


@cache
def load_presets() -> dict[str, Preset]:
    text = resources.files("agentsec.data").joinpath("presets.json").read_text(encoding="utf-8")
    presets = {}
    for raw in json.loads(text)["presets"]:
        preset = Preset(
            name=raw["name"],
            engine=raw["engine"],
            flags=tuple(raw["flags"]),
            rationale=raw["rationale"],
            drop_to=raw.get("drop_to"),
            rootless=raw.get("rootless", False),
            runtime=raw.get("runtime"),
            version=raw.get("version"),
            settings=raw.get("settings"),
            probe_env=tuple(sorted(raw.get("probe_env", {}).items())),
        )
        if preset.engine not in ENGINES:
            raise LaunchError(f"preset {preset.name}: unknown engine {preset.engine!r}")
        if preset.is_peer and not preset.version:
            raise LaunchError(f"preset {preset.name}: a peer preset pins the version it measures")
        if preset.runtime and preset.engine != "podman":
            raise LaunchError(f"preset {preset.name}: only podman presets name a runtime")
        presets[preset.name] = preset
    return presets


def get_preset(name: str) -> Preset:
    presets = load_presets()
    if name not in presets:
        raise LaunchError(
            f"unknown preset {name!r}; `agentsec presets` lists them ({', '.join(presets)})"
        )
    return presets[name]


def _require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LaunchError(f"{name!r} is not installed or not on PATH")
    return path


def _privilege_drop(drop_to: str | None) -> tuple[str, ...]:
    """setpriv to an unprivileged uid when running as root (see DESIGN: root-started user
    namespaces map the sandbox's uid to host root, which leaves root-owned files in reach)."""
    if drop_to is None or os.geteuid() != 0:
        return ()
    uid, _, gid = drop_to.partition(":")
    return (
        _require_binary("setpriv"),
        f"--reuid={uid}",
        f"--regid={gid or uid}",
        "--clear-groups",
        "--inh-caps=-all",
    )


def expand_workdir(flags: Sequence[str], workdir: str) -> tuple[str, ...]:
    return tuple(flag.replace("{workdir}", workdir) for flag in flags)


def local_launch(how: str, python: str) -> Launch:
    return Launch(prefix=(), python=python, target=Target(kind="local", how=how))


def bwrap_launch(
    flags: Sequence[str],
    how: str,
    python: str = "python3",
    preset: str | None = None,
    drop_to: str | None = None,
) -> Launch:
    bwrap = _require_binary("bwrap")
    flags = expand_workdir(flags, os.getcwd())
    prefix = (*_privilege_drop(drop_to), bwrap, *flags, "--")
    target = Target(
        kind="preset" if preset else "bwrap",
        how=how,
        engine="bwrap",
        flags=flags,
        command=(*prefix, python, "-"),
        preset=preset,
    )
    return Launch(prefix=prefix, python=python, target=target)


def image_digest(engine_bin: str, image: str, as_user: Sequence[str] = ()) -> str:
    """The image's digest (or ID) as the engine reports it; a missing image is an error.
    `as_user`: the prefix that runs the engine as the user whose storage holds the image."""
    try:
        proc = subprocess.run(
            [*as_user, engine_bin, "image", "inspect", "--format", "{{.Digest}} {{.Id}}", image],
            capture_output=True,
            text=True,
            timeout=IMAGE_INSPECT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise LaunchError(
            f"{engine_bin} did not answer within {IMAGE_INSPECT_TIMEOUT_S} s"
        ) from exc
    if proc.returncode != 0:
        down = _engine_down(engine_bin, as_user)
        if down is not None:
            raise LaunchError(down)
        raise LaunchError(
            f"image {image!r} not found by {engine_bin}: pull or build it first "
            f"({engine_bin} image pull {image})"
        )
    digest, _, image_id = proc.stdout.strip().partition(" ")
    return digest if digest and digest != "<none>" else image_id


def _engine_down(engine_bin: str, as_user: Sequence[str] = ()) -> str | None:
    """Why the engine does not answer at all (its daemon is down or unreachable), or None.

    A failed `image inspect` reads the same whether the image is missing or nobody answered;
    `version` needs the daemon (docker, remote podman) and tells the two apart."""
    try:
        proc = subprocess.run(
            [*as_user, engine_bin, "version"],
            capture_output=True,
            text=True,
            timeout=ENGINE_VERSION_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        said, failed = f"no answer within {ENGINE_VERSION_TIMEOUT_S} s", True
    except OSError as exc:
        said, failed = exc.strerror or str(exc), True
    else:
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        said, failed = (lines[-1] if lines else f"exit {proc.returncode}"), proc.returncode != 0
    if not failed:
        return None
    return (
        f"{engine_bin} gets no answer from its engine ({clean_text(said, 160)}): the daemon is "
        f"not running or cannot be reached, so no image can be looked up; `{engine_bin} info` "
        "tells why (start the daemon, or point DOCKER_HOST or CONTAINER_HOST at a running one)"
    )


def container_launch(
    engine: str,
    image: str,
    flags: Sequence[str],
    how: str,
    engine_bin: str | None = None,
    python: str = "python3",
    preset: str | None = None,
    run_as: peers.RunAs | None = None,
) -> Launch:
    """`run_as`: from root, the ordinary user a rootless engine runs as (its own storage)."""
    binary = _require_binary(engine_bin or engine)
    # the engine needs no working directory of ours (its flags name every path it mounts)
    as_user = run_as.prefix(_require_binary("setpriv"), chdir="/") if run_as else ()
    digest = image_digest(binary, image, as_user)
    flags = tuple(flags)
    # `-e NAME` passes the probe's own settings in only when they are set on this side.
    settings = tuple(arg for name in PROBE_SETTINGS for arg in ("-e", name))
    prefix = (*as_user, binary, "run", "--rm", "-i", *settings, *flags, image)
    target = Target(
        kind="preset" if preset else engine,
        how=how,
        engine=engine,
        image=image,
        digest=digest,
        flags=flags,
        command=(*prefix, python, "-"),
        preset=preset,
    )
    return Launch(prefix=prefix, python=python, target=target)


def nspawn_launch(directory: str, flags: Sequence[str], how: str, python: str = "python3",
                  preset: str | None = None) -> Launch:
    """A systemd-nspawn container whose root is `directory`, run as a single command (no init
    in it, no systemd on the host either: see NSPAWN_WITHOUT_SYSTEMD)."""
    binary = _require_binary(ENGINE_BINARIES["nspawn"])
    if os.geteuid() != 0:
        raise LaunchError("systemd-nspawn needs root: run agentsec as root")
    if not os.path.isdir(directory):
        raise LaunchError(f"{directory!r} is not a directory: systemd-nspawn takes the "
                          "container's root directory as --image")
    flags = tuple(flags)
    # --setenv=NAME passes a variable through from here; only those set here, as `-e NAME`.
    settings = tuple(f"--setenv={name}" for name in PROBE_SETTINGS if name in os.environ)
    prefix = (binary, "--directory", directory, *NSPAWN_WITHOUT_SYSTEMD, *settings, *flags, "--")
    target = Target(
        kind="preset" if preset else "nspawn",
        how=how,
        engine="nspawn",
        image=directory,
        flags=flags,
        command=(*prefix, python, "-"),
        preset=preset,
    )
    return Launch(prefix=prefix, python=python, target=target)


def command_launch(template: str, how: str) -> Launch:
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise LaunchError(f"cannot parse the command template: {exc}") from exc
    reads_stdin = bool(words) and words[-1] == "-"
    if not reads_stdin and not any("{probe}" in word for word in words):
        raise LaunchError(
            "the command template must name {probe} (the probe file's path) or end in ' -' "
            "(the probe's source arrives on stdin, e.g. 'ssh box python3 -')"
        )
    argv = tuple(word.replace("{probe}", str(PROBE_PATH)) for word in words)
    _require_binary(argv[0])
    return Launch(prefix=argv, python=None, target=Target(kind="command", how=how, command=argv))


def cage_launch(name: str, how: str, agentcage_bin: str | None = None,
                python: str = "python3",
                own_volumes: Sequence[tuple[str, str]] = (),
                exec_flags: Sequence[str] = ()) -> Launch:
    """Inside a running agentcage cage, through `agentcage exec` (what `agentcage verify` runs).
    `own_volumes`: the cage's named volumes, (path in the cage, host directory); `exec_flags`:
    options of `agentcage exec` itself."""
    binary = agentcage_bin or _require_binary("agentcage")
    prefix = (binary, "exec", name, *exec_flags, "--")
    target = Target(kind="cage", how=how, engine="agentcage", command=(*prefix, python, "-"),
                    own_volumes=tuple(own_volumes))
    return Launch(prefix=prefix, python=python, target=target)


def peer_launch(preset: Preset, how: str, extra_flags: Sequence[str], python: str,
                as_user: str | None) -> Launch:
    """An agent's own sandbox (srt, codex sandbox), as the invoking user or, from root, as
    another one (as_user 'UID[:GID]'), started with that user's home."""
    run_as = peers.RunAs.parse(as_user) if as_user else None
    if run_as is not None and os.geteuid() != 0:
        raise LaunchError("--as-user needs root: only root can start the sandbox as another uid")
    flags = (*preset.flags, *extra_flags)
    prefix = peers.peer_argv(preset.engine, preset.version or "", flags, preset.settings,
                             dict(preset.probe_env), run_as)
    who = f"uid {run_as.uid}" if run_as else f"uid {os.geteuid()}"
    target = Target(
        kind="preset",
        how=how or f"{preset.engine} {preset.version}, preset {preset.name}, as {who}",
        engine=preset.engine,
        flags=flags,
        command=(*prefix, python, "-"),
        preset=preset.name,
    )
    return Launch(prefix=prefix, python=python, target=target)


def preset_launch(
    name: str,
    how: str,
    image: str | None = None,
    extra_flags: Sequence[str] = (),
    engine_bin: str | None = None,
    python: str = "python3",
    as_user: str | None = None,
) -> Launch:
    preset = get_preset(name)
    if preset.is_peer:
        return peer_launch(preset, how, extra_flags, python, as_user)
    if as_user is not None and not preset.rootless:
        raise LaunchError("--as-user applies to peer presets (srt, codex, firejail) and rootless "
                          "ones; bwrap presets that drop root name their uid in presets.json")
    flags = (*preset.engine_flags, *extra_flags)
    if preset.engine == "bwrap":
        return bwrap_launch(flags, how, python, preset=name, drop_to=preset.drop_to)
    if not image:
        raise LaunchError(f"preset {name} runs a container: pass --image"
                          + (" (its root directory)" if preset.takes_directory else ""))
    if preset.takes_directory:
        return nspawn_launch(image, flags, how, python, preset=name)
    run_as = None
    if preset.rootless and os.geteuid() == 0:
        if as_user is None:
            raise LaunchError(f"preset {name} is rootless: run it as a non-root user, or from "
                              "root with --as-user UID")
        run_as = peers.RunAs.parse(as_user)
        if run_as.uid == 0:
            raise LaunchError(f"preset {name} is rootless: --as-user names a non-root uid")
    elif as_user is not None:
        raise LaunchError("--as-user needs root: only root can start the engine as another uid")
    if preset.runtime == gvisor.RUNTIME:
        refused = gvisor.why_not(flags)
        if refused:
            raise LaunchError(f"preset {name}: {refused}")
    return container_launch(preset.engine, image, flags, how, engine_bin, python, preset=name,
                            run_as=run_as)


@dataclass(frozen=True)
class Availability:
    preset: Preset
    runnable: bool
    why_not: str = ""


def availability(preset: Preset) -> Availability:
    """Whether this host can run a preset now, and if not, why (for `agentsec presets`)."""
    if preset.is_peer:
        if peers.find_tool(preset.engine) is None:
            return Availability(preset, False, f"{preset.engine} {preset.version} is not "
                                "installed (scripts/setup-agents.sh)")
        missing = peers.missing_helpers(preset.engine)
        if missing:
            return Availability(preset, False, f"{preset.engine} needs {', '.join(missing)}")
        return Availability(preset, True)
    if shutil.which(preset.binary) is None:
        return Availability(preset, False, f"{preset.binary} is not installed")
    if preset.drop_to and os.geteuid() == 0 and shutil.which("setpriv") is None:
        return Availability(preset, False, "setpriv (util-linux) is needed to drop root")
    if preset.rootless and os.geteuid() == 0:
        return Availability(preset, False, "rootless: run as a non-root user (or, from root, "
                            "with --as-user UID)")
    if preset.engine == "nspawn" and os.geteuid() != 0:
        return Availability(preset, False, "systemd-nspawn needs root")
    if preset.engine == "docker" and not _docker_daemon_up():
        return Availability(preset, False, "no Docker engine answers on this host")
    if preset.runtime == gvisor.RUNTIME:
        refused = gvisor.why_not(preset.engine_flags)
        if refused:
            return Availability(preset, False, refused)
    return Availability(preset, True)


def _docker_daemon_up() -> bool:
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return True  # a remote engine: the run itself will say whether it answers
    socket_path = host.removeprefix("unix://") or "/var/run/docker.sock"
    return os.path.exists(socket_path)


def assert_launch(
    kind: str,
    image: str | None,
    template: str | None,
    engine_flags: tuple[str, ...],
    engine_bin: str | None,
    python: str,
) -> Launch:
    """Where `agentsec assert` (and `integrity could`) runs the probe: a sandbox of `kind`."""
    if kind == "local":
        return local_launch("agentsec assert", sys.executable)
    if kind == "bwrap":
        return bwrap_launch(engine_flags, "agentsec assert", python)
    if kind == "command":
        if not template:
            raise AgentsecError("--kind command needs --template 'CMD ... {probe}'")
        return command_launch(template, "agentsec assert")
    if not image:
        raise AgentsecError(f"--kind {kind} needs --image")
    return container_launch(kind, image, engine_flags, "agentsec assert", engine_bin, python)


def describe(launch: Launch) -> str:
    """The command as a user could paste it."""
    tail = (launch.python, "-") if launch.python else ()
    return shlex.join((*launch.prefix, *tail))
