"""Volumes mount only what the user named, checked again after `~`, `..` and symlinks resolve:
nothing of the host's system directories, credentials or agentcage's own state gets in."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agentcage.backends.profile import resolve_volumes
from agentcage.config.load import load_config_text
from agentcage.errors import BackendError, ConfigError
from agentcage.mounts import resolved_source_refusal, target_refusal, written_source_refusal
from tests.agentcage.conftest import needs_root
from tests.agentcage.test_cli import AGENTCAGE


def config_with(*volumes: str):
    """The spec (what the backend takes) of a cage.yaml with these volumes."""
    listed = ", ".join(f"'{v}'" for v in volumes)
    return load_config_text(f"name: m\ncontainer: {{volumes: [{listed}]}}\n").spec()


def project_tree(tmp_path: Path) -> Path:
    base = tmp_path / "a" / "b" / "c" / "d"
    (base / "project").mkdir(parents=True)
    return base


@pytest.mark.parametrize("spec", [
    "../../../../../../../../run:/hostrun:ro",
    "../../../../../../../../etc:/workspace:rw",
    "../../../../../../../..:/host:ro",
])
def test_dotdot_volumes_that_resolve_to_system_directories_are_refused(tmp_path, spec):
    base = project_tree(tmp_path)
    config = config_with(spec)  # as written, it is only a relative path: accepted here
    with pytest.raises(BackendError, match="host system directory"):
        resolve_volumes(config, base, None)


def test_a_symlink_to_a_system_directory_is_refused(tmp_path):
    base = project_tree(tmp_path)
    (base / "etc-link").symlink_to("/etc")
    with pytest.raises(BackendError, match="host system directory"):
        resolve_volumes(config_with("./etc-link:/data:ro"), base, base / "project")
    # the project itself given as a symlink to a system directory
    (base / "proj-link").symlink_to("/run")
    with pytest.raises(BackendError, match="host system directory"):
        resolve_volumes(config_with(".:/workspace:rw"), base, base / "proj-link")


def test_a_directory_holding_credentials_or_agentcage_state_is_refused(tmp_path):
    base = project_tree(tmp_path)
    home = base / "project" / "fakehome"
    (home / ".ssh").mkdir(parents=True)
    refusal = resolved_source_refusal(home, protected=[home / ".ssh"])
    assert refusal and "would expose" in refusal
    # the state directory, or anything above it
    state = base / "project" / "state"
    state.mkdir()
    with pytest.raises(BackendError, match="agentcage's own state"):
        resolve_volumes(config_with(".:/workspace:rw"), base, base / "project",
                        protected=(state,))


def test_a_plain_project_is_mounted_and_resolved(tmp_path):
    base = project_tree(tmp_path)
    (base / "data").mkdir()
    (base / "link").symlink_to(base / "data")
    project, volumes = resolve_volumes(config_with(".:/workspace:rw", "./link:/data:ro"),
                                       base, base / "project")
    assert project == (base / "project").resolve()
    assert ((str(base / "data"), "/data", "ro")) in volumes  # the symlink's target, resolved


@pytest.mark.parametrize(("written", "why"), [
    ("/etc/nginx", "host system directory"),
    ("/run/docker.sock.d", "host system directory"),
    ("/", "host system directory"),
    ("~", "home directory"),
    ("~/.ssh", "credentials"),
    ("/home/u/.config/agentcage/cages", "credentials"),
    ("/home/u/project/.aws/x", "credentials"),
])
def test_written_sources_refused(written, why):
    assert why in (written_source_refusal(written) or "")


@pytest.mark.parametrize("target", ["/", "/proc", "/proc/1", "/dev/shm", "/run/agentcage",
                                    "/run/agentcage/ca.pem", "/a/../etc", "/x//y", "rel"])
def test_reserved_or_unclean_targets_refused(target):
    assert target_refusal(target) is not None


@pytest.mark.parametrize("target", ["/workspace", "/data", "/opt/tools", "/run/other"])
def test_ordinary_targets_allowed(target):
    assert target_refusal(target) is None


@pytest.mark.parametrize(("yaml_text", "why"), [
    ("name: \"m\\n\"", "use 1-63"),
    ("name: m\ncontainer: {env: {'': x}}", "not a variable name"),
    ("name: m\ncontainer: {env: {'A=B': x}}", "not a variable name"),
    ("name: m\ncontainer: {env: {'1A': x}}", "not a variable name"),
    ("name: m\ncontainer: {volumes: ['.:/proc']}", "reserved"),
])
def test_names_and_env_keys_that_break_a_cage_are_refused(yaml_text, why):
    with pytest.raises(ConfigError, match=why):
        load_config_text(yaml_text)


@pytest.mark.netns
def test_cli_refuses_an_escaping_volume_in_one_line_and_keeps_no_state(tmp_path):
    base = project_tree(tmp_path)
    (base / "cage.yaml").write_text(
        "name: escape\ncontainer: {volumes: ['.:/workspace:rw', "
        "'../../../../../../../../run:/hostrun:ro']}\ndomains: {mode: allowlist}\n"
        "dns_servers: [10.200.255.53]\n")
    env = {**os.environ, "AGENTCAGE_HOME": str(tmp_path / "home")}
    r = subprocess.run([*AGENTCAGE, "cage", "create", "-c", str(base / "cage.yaml"),
                        "--project", str(base / "project")], env=env, capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "host system directory" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "home" / "cages" / "escape").exists()


def test_a_path_the_user_cannot_look_at_is_judged_by_its_name():
    """A protected path in a directory closed to the user checking (another user's home, as a
    rootless cage's user meets it) is neither a traceback nor ignored: inside the source it is
    refused, elsewhere it does not matter. Checked by a child that is really that user."""
    import json
    import tempfile
    import warnings

    needs_root()
    base = Path(tempfile.mkdtemp(prefix="agentcage-mounts-"))
    try:
        os.chmod(base, 0o755)
        closed = base / "project" / "other-home"
        (closed / ".ssh").mkdir(parents=True)
        os.chmod(closed, 0o700)  # root's: the child below cannot look in
        (base / "elsewhere").mkdir()
        read, write = os.pipe()
        with warnings.catch_warnings():
            # the child takes no lock: it runs code already loaded, then leaves by _exit (no
            # interpreter here is readable by nobody, to start a fresh one as that user)
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: nobody, then the two checks, answered on the pipe
            try:
                os.setgid(65534)
                os.setuid(65534)
                answers = [resolved_source_refusal(base / where, protected=[closed / ".ssh"])
                           for where in ("project", "elsewhere")]
                os.write(write, json.dumps(answers).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as answer:
            inside, elsewhere = json.loads(answer.read() or '["child failed", 0]')
        os.waitpid(pid, 0)
        assert inside and "would expose" in inside, inside
        assert elsewhere is None
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=True)
