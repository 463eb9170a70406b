"""Shared fixtures: one fake internet per session, cages built in it, cleaned up on failure too."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentcage.backends import host
from agentcage.backends.namespace import NamespaceBackend
from agentcage.cages import CageService
from agentcage.config.load import load_config_text
from agentcage.state import StateStore

AGENT_UID = 1000  # a real unprivileged host uid (cloudsdk on this machine)


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")


class World:
    """The fake internet, plus the namespace that plays the cages' uplink host: linked to the
    internet, with a default route into it (`uplink_ns`). Everything else is the internet's."""

    def __init__(self, internet, uplink_ns: str):
        self.internet, self.uplink_ns = internet, uplink_ns

    def __getattr__(self, name: str):
        return getattr(self.internet, name)


RESIDENTS = (b"agentcage.backends.commandserver", b"agentcage.backends.execserver",
             b"agentcage.gateway.zygote")


@pytest.fixture(scope="session", autouse=True)
def residents_end_with_the_session(tmp_path_factory) -> Iterator[None]:
    """The resident servers and zygotes that a test's state root under this session's
    temporary directory (`tmp_path`) started end with the session, not after their idle time
    (a test of its own `home` stops them itself; these state roots stay behind for a while)."""
    yield
    import signal

    base = os.fsencode(tmp_path_factory.getbasetemp()) + b"/"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(resident in argv for resident in RESIDENTS) and b"--root" in argv:
            root = argv[argv.index(b"--root") + 1] if argv.index(b"--root") + 1 < len(argv) \
                else b""
            if root.startswith(base):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGTERM)


@pytest.fixture(scope="session")
def net():
    needs_root()
    from fakenet import FakeInternet

    # api.anthropic.com: a provider's own domain, for the secrets inspector's allow case
    with FakeInternet(extra_names={"api.anthropic.com": None}, catch_all=False) as internet:
        yield World(internet, internet.add_client().netns)


def make_project(root: Path, *, hooks: bool = True, claude: bool = True) -> Path:
    project = root / "project"
    project.mkdir(parents=True)
    (project / "README").write_text("hello\n")
    if hooks:
        (project / ".git" / "hooks").mkdir(parents=True)
        (project / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\necho host hook\n")
        (project / ".git" / "config").write_text("[core]\n\tbare = false\n")
    if claude:
        (project / ".claude").mkdir()
        (project / ".claude" / "settings.json").write_text("{}\n")
    for dirpath, _dirs, filenames in os.walk(project):
        os.chown(dirpath, AGENT_UID, AGENT_UID)
        for f in filenames:
            os.chown(os.path.join(dirpath, f), AGENT_UID, AGENT_UID)
    os.chmod(root, 0o755)
    return project


def cage_yaml(net, name: str, allow: list[str], *, trusted: str = "10.200.0.0/16",
              extra: str = "", gateway: dict[str, object] | None = None,
              trust_test_ca: bool = True) -> str:
    """`gateway`: more keys of the gateway section (timeouts, say). `trust_test_ca`: False
    leaves the fake internet's CA out of the upstream bundle (its servers are then not
    trusted)."""
    allow_list = ", ".join(allow)
    ca_files = f'"{net.ca_cert_path}"' if trust_test_ca else ""
    more = "".join(f"  {key}: {value}\n" for key, value in (gateway or {}).items())
    return f"""
name: {name}
domains: {{mode: allowlist, allow: [{allow_list}]}}
dns_servers: [{net.dns_address}]
gateway:
  uplink: "netns:{net.uplink_ns}"
  trusted_networks: [{trusted}]
  upstream_ca_files: [{ca_files}]
{more}{extra}
"""


class CageHandle:
    """A running cage for tests: run shell snippets inside it and read its audit log."""

    def __init__(self, service: CageService, name: str, project: Path, net):
        self.service, self.name, self.project, self.net = service, name, project, net
        self.cage = service.store.cage(name)

    @property
    def runtime(self) -> dict:
        return self.service.backend.runtime(self.cage)

    @property
    def gateway_address(self) -> str:
        from agentcage.backends.netplan import NetPlan

        return NetPlan.from_dict(self.runtime["plan"]).gateway_address

    @property
    def gateway_process(self) -> int:
        """The pid of the gateway itself: runtime's gateway_pid is its supervisor's (a gateway
        started without one, as before supervisors existed, is that pid itself)."""
        supervisor = int(self.runtime["gateway_pid"])
        for task in Path(f"/proc/{supervisor}/task").iterdir():
            for child in (task / "children").read_text().split():
                if host.pid_matches(int(child), "agentcage.gateway"):
                    return int(child)
        return supervisor

    def peak_rss_kib(self) -> int:
        """The gateway's peak resident memory so far (VmHWM)."""
        for line in Path(f"/proc/{self.gateway_process}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM")

    def sh(self, script: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run `sh -c script` in the cage with captured output."""
        return self.service.exec_capture(self.name, ["/bin/sh", "-c", script], timeout=timeout)

    def audit(self) -> list[dict]:
        return self.service.audit(self.name)

    def findings(self) -> list[dict]:
        """The watcher's findings so far (watcher.json, as its gateway last wrote it)."""
        from agentcage import findings

        return findings.read(self.cage)["findings"]


def watcher_findings(state: Path, name: str, since: float = 0.0) -> list[dict]:
    """The watcher's findings about cage `name` in the state directory `state` (the false
    alarms, where the traffic was ordinary)."""
    from agentcage import findings
    from agentcage.state import StateStore

    found = findings.read(StateStore(state).cage(name))["findings"]
    return [f for f in found if f.get("at", 0) >= since]


def start_cage(net, name: str, allow: list[str], *,
               gateway_env: dict[str, str] | None = None, home: Path | None = None,
               files: dict[str, str] | None = None, **kw) -> Iterator[CageHandle]:
    """`home`: the state directory (AGENTCAGE_HOME) to use, e.g. on a small tmpfs; `files`:
    more files of the project (relative path -> text), the agent's."""
    tmp = Path(tempfile.mkdtemp(prefix="agentcage-test-"))  # /tmp: reachable by the agent uid
    os.chmod(tmp, 0o755)
    store = StateStore(home or tmp / "home")
    backend = NamespaceBackend(store, gateway_env=gateway_env)
    service = CageService(store, backend)
    project = make_project(tmp / "work")
    for relative, text in (files or {}).items():
        path = project / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for owned in (path, *path.relative_to(project).parents):
            os.chown(project / owned, AGENT_UID, AGENT_UID)
    config = load_config_text(cage_yaml(net, name, allow, **kw))
    try:
        service.create(config, project)
        yield CageHandle(service, name, project, net)
    finally:
        from agentcage.secrets.cage import gateway_staging_path

        staged = gateway_staging_path(store.cage(name))
        runtime = backend.runtime(store.cage(name)) if store.cage(name).root.exists() else {}
        if store.cage(name).root.exists():
            service.destroy(name)
        shutil.rmtree(tmp, ignore_errors=True)
        assert_gone(runtime)
        assert not staged.parent.exists(), f"staged secrets left behind: {staged}"


def assert_gone(runtime: dict) -> None:
    """Nothing of a destroyed cage is left: namespaces, processes."""
    plan = runtime.get("plan")
    if not plan:
        return
    suffix = plan["suffix"]
    # the cage's own namespaces by their whole prefix (a bare suffix of 6 hex digits can
    # also occur in another namespace's name, e.g. a fake internet's fn-<6 hex>-...)
    from agentcage.backends.netplan import NS_PREFIX

    leftovers = [n for n in os.listdir("/run/netns") if n.startswith(f"{NS_PREFIX}{suffix}-")]
    assert leftovers == [], f"namespaces left behind: {leftovers}"
    mounts = [line for line in Path("/proc/self/mounts").read_text().splitlines()
              if suffix in line]
    assert mounts == [], f"mounts left behind: {mounts}"
    pid = runtime.get("gateway_pid")
    if pid:
        assert not host.alive(int(pid)), "gateway process left behind"


AGENTCAGE_SCRIPT = str(Path(sys.executable).with_name("agentcage"))  # the console script


@pytest.fixture
def user_home() -> Iterator[Path]:
    """A home of the CLI's user in /tmp (reachable by the workload's uid), removed after."""
    root = Path(tempfile.mkdtemp(prefix="agentcage-home-"))
    os.chmod(root, 0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_cli(home: Path, *args: str, env: dict[str, str] | None = None,
            stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`agentcage *args` as its user runs it from `home`, with the state in home/state."""
    base = {"PATH": os.environ["PATH"], "AGENTCAGE_HOME": str(home / "state"),
            "HOME": str(home), "LANG": "C.UTF-8", **(env or {})}
    return subprocess.run([AGENTCAGE_SCRIPT, *args], env=base, capture_output=True, text=True,
                          timeout=timeout, cwd=home, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL)
