"""Sandboxes other tools make, as launchers: Anthropic's sandbox-runtime (`srt`), Codex CLI's
`codex sandbox`, and firejail (a setuid sandbox people put around a program by hand). Each
builds an argv that runs a command inside that tool's sandbox, for a pinned version of the
tool; nothing here runs the sandbox itself.

Where the tools come from: a directory named by AGENTSEC_PEER_BIN, then PATH (scripts/
setup-agents.sh installs the pinned versions: srt and Codex with `npm install -g`, so that an
ordinary user can run them too, firejail from the distribution), then the checkout's
`.tools/npm/node_modules/.bin`. A preset names
the version it measures; another version installed is an error, not a silent substitute.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import shutil
import stat
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from agentsec.errors import AgentsecError

PEER_ENGINES = ("srt", "codex", "firejail")
CHECKOUT_TOOLS = Path(__file__).resolve().parents[2] / ".tools" / "npm" / "node_modules" / ".bin"
# srt runs its proxy bridges with socat and searches with ripgrep: without them a sandbox is
# not what the preset says (a peer that runs commands unsandboxed when a helper is missing is
# the failure this tool exists to catch), so the launch is refused instead.
SRT_HELPERS = ("socat", "rg", "bwrap")
VERSION_TIMEOUT_S = 30
# Codex refuses a CODEX_HOME under /tmp for its sandbox helpers; it lives in the user's home.
CODEX_HOME = ".cache/agentsec/codex-home"


class PeerError(AgentsecError):
    """A peer sandbox that cannot be launched as the preset describes."""


@dataclass(frozen=True)
class RunAs:
    """An unprivileged uid to start the peer as (from root), with that user's home."""

    uid: int
    gid: int
    home: str
    name: str

    @classmethod
    def parse(cls, spec: str) -> RunAs:
        uid_text, _, gid_text = spec.partition(":")
        if not uid_text.isdigit() or (gid_text and not gid_text.isdigit()):
            raise PeerError(f"--as-user wants UID[:GID] as numbers, not {spec!r}")
        uid = int(uid_text)
        try:
            entry = pwd.getpwuid(uid)
        except KeyError:
            raise PeerError(f"uid {uid} has no passwd entry: its home is unknown") from None
        gid = int(gid_text) if gid_text else entry.pw_gid
        return cls(uid=uid, gid=gid, home=entry.pw_dir, name=entry.pw_name)

    def prefix(self, setpriv: str, chdir: str | None = None) -> tuple[str, ...]:
        """`chdir`: the directory the command starts in instead of ours, which the user may
        not be able to enter (root's home, a 0700 checkout): podman, for one, refuses to start
        there."""
        return (
            setpriv,
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "env",
            *((f"--chdir={chdir}",) if chdir else ()),
            f"HOME={self.home}",
            f"USER={self.name}",
            f"LOGNAME={self.name}",
        )


def find_tool(name: str) -> str | None:
    """The tool's path: AGENTSEC_PEER_BIN, then PATH, then the checkout's .tools."""
    for directory in (os.environ.get("AGENTSEC_PEER_BIN"), None, str(CHECKOUT_TOOLS)):
        if directory == "":
            continue
        found = shutil.which(name, path=directory) if directory else shutil.which(name)
        if found:
            return found
    return None


def require_tool(name: str) -> str:
    found = find_tool(name)
    if found is None:
        raise PeerError(
            f"{name!r} is not installed: scripts/setup-agents.sh installs the pinned version "
            "(or set AGENTSEC_PEER_BIN to the directory holding it)"
        )
    return found


def installed_version(binary: str) -> str:
    """The version a tool reports: the last word of its first line (`srt --version`: '0.0.78';
    codex: 'codex-cli 0.171.0'; firejail: 'firejail version 0.9.72', then its build options)."""
    try:
        proc = subprocess.run(
            [binary, "--version"],
            stdin=subprocess.DEVNULL,  # both wait on an open stdin
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PeerError(f"{binary} --version did not answer: {exc}") from exc
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    words = lines[0].split() if lines else []
    return words[-1] if proc.returncode == 0 and words else ""


def missing_helpers(engine: str) -> list[str]:
    return [h for h in SRT_HELPERS if shutil.which(h) is None] if engine == "srt" else []


SHARED_SETTINGS_DIR = Path("/var/tmp/agentsec-peer-settings")


def settings_path(relative: str) -> str:
    """A settings file shipped with the presets (data/peers/...), as a path srt can read, also
    when it runs as another user: agentsec's own files may sit where that user cannot reach (a
    checkout under a private directory), so a copy is kept, named by its content, in a
    directory of our own that anyone may read (the settings are no secret)."""
    path = resources.files("agentsec.data").joinpath(relative)
    if not path.is_file():
        raise PeerError(f"preset settings {relative} are missing from agentsec's data")
    data = path.read_bytes()
    name = f"{hashlib.sha256(data).hexdigest()[:24]}-{Path(relative).name}"
    directory = SHARED_SETTINGS_DIR
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=0o755)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        # /var/tmp is shared: a directory someone else made (or a link) is not ours to trust
        raise PeerError(f"{directory} is not a directory of this user's that only it may write;"
                        " remove it")
    target = directory / name
    if not target.is_file() or target.read_bytes() != data:
        tmp = directory / f".{name}.{os.getpid()}"
        tmp.write_bytes(data)
        tmp.chmod(0o644)
        tmp.replace(target)
    return str(target)


def peer_argv(
    engine: str,
    version: str,
    flags: Sequence[str],
    settings: str | None,
    probe_env: Mapping[str, str],
    run_as: RunAs | None,
) -> tuple[str, ...]:
    """The argv prefix that runs a command (appended after it) inside the peer's sandbox."""
    binary = require_tool(engine)
    found = installed_version(binary)
    if found != version:
        raise PeerError(
            f"this preset measures {engine} {version}; {binary} is {found or 'of no known version'}"
            ": install the pinned version (scripts/setup-agents.sh)"
        )
    missing = missing_helpers(engine)
    if missing:
        raise PeerError(f"{engine} needs {', '.join(missing)}: without them it is not the sandbox "
                        "the preset describes (scripts/setup-agents.sh installs them)")
    prefix: tuple[str, ...] = ()
    if run_as is not None:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise PeerError("setpriv (util-linux) is needed to start the sandbox as another user")
        prefix = run_as.prefix(setpriv)
    env = tuple(f"{k}={v}" for k, v in sorted(probe_env.items()))
    if engine == "srt":
        if settings is None:
            raise PeerError("an srt preset names its settings file")
        tail = (binary, "--settings", settings_path(settings), *flags, "--")
        return (*prefix, "env", *env, *tail) if env else (*prefix, *tail)
    if engine == "firejail":
        # --quiet: firejail's own banner would go to the probe's stdout
        tail = (binary, "--quiet", *flags, "--")
        return (*prefix, "env", *env, *tail) if env else (*prefix, *tail)
    home = run_as.home if run_as is not None else os.path.expanduser("~")
    codex_home = os.path.join(home, CODEX_HOME)
    if codex_home == "/tmp" or codex_home.startswith("/tmp/"):
        raise PeerError(f"Codex refuses a CODEX_HOME under /tmp ({codex_home}): it would not "
                        "start its sandbox helper; run with a HOME outside /tmp")
    # Made by the user the sandbox runs as, so that it is theirs to write in.
    make_home = 'mkdir -p -- "$CODEX_HOME" && exec "$@"'
    return (*prefix, "env", *env, f"CODEX_HOME={codex_home}", "sh", "-c", make_home, "sh",
            binary, "sandbox", *flags, "--")


def remove_leftovers(engine: str | None, pid: int, env: Mapping[str, str]) -> None:
    """Remove what the peer left behind once its process `pid` has ended. srt 0.0.78 names
    its proxy's unix socket after its own pid (`srt-mux-PID-N.sock` in its TMPDIR) and does
    not unlink it when it exits: one file per run in /tmp otherwise. Only sockets of that
    exact name go; `pid` is the launcher we started, which execs srt (setpriv, env and the
    `node` shebang all exec), so it is srt's own."""
    if engine != "srt":
        return
    tmpdir = Path(env.get("TMPDIR") or "/tmp")
    with contextlib.suppress(OSError):
        for path in tmpdir.glob(f"srt-mux-{pid}-*.sock"):
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()


def codex_home_to_make(home: Path) -> Path | None:
    """The outermost directory of the Codex home under `home` that does not exist yet: what a
    Codex preset's run will create there, and whoever starts the runs may remove afterwards."""
    path = home
    for part in Path(CODEX_HOME).parts:
        path = path / part
        if not path.exists():
            return path
    return None
