"""Cages on an image (`container.image`): the workload's root is the image's files, in the
cage's own layer, under the same bubblewrap sandbox as every cage.

No registry is reachable here, so the images come from Debian's packages: the Debian minbase
root filesystem debootstrap builds for the podman tests (with python3, so the probe runs in
it), `podman import`ed into a podman storage of the tests' own (tests/integration/
podman_world.py). Packages are installed in a cage from an apt repository in the fake
internet, through the gateway, by `shell --as-root`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentcage.backends import layers
from tests.agentcage.conftest import (
    AGENTCAGE_SCRIPT,
    World,
    cage_yaml,
    make_project,
    needs_root,
    run_cli,
    start_cage,
)
from tests.agentcage.hosted import OnHost
from tests.integration.podman_world import podman_world
from tests.tmux_screen import Screen


@pytest.fixture(scope="module")
def podman_env() -> Iterator[dict[str, str]]:
    """The tests' podman storage, where agentcage looks for images (podman reads these)."""
    needs_root()
    with podman_world() as world:
        saved = {k: os.environ.get(k) for k in world.env}
        os.environ.update(world.env)
        try:
            yield {**world.env, "IMAGE": world.image}
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


APT_HOST = "deb.debian.org"
APT_LINE = f"deb [trusted=yes] http://{APT_HOST}/agentcage ./"


def build_apt_repository(site: Path) -> None:
    """A flat apt repository of one package, agentcage-hello (its /usr/bin/agentcage-hello
    prints a line), made with dpkg-deb as Debian's own packages are."""
    work = site.parent / "hello-package"
    (work / "DEBIAN").mkdir(parents=True)
    (work / "DEBIAN" / "control").write_text(
        "Package: agentcage-hello\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: agentcage tests <tests@example.test>\n"
        "Description: a package a cage installs through its gateway\n")
    (work / "usr" / "bin").mkdir(parents=True)
    tool = work / "usr" / "bin" / "agentcage-hello"
    tool.write_text("#!/bin/sh\necho hello from a package\n")
    tool.chmod(0o755)
    repo = site / "agentcage"
    (repo / "pool").mkdir(parents=True)
    deb = repo / "pool" / "agentcage-hello_1.0_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(work), str(deb)],
                   check=True, capture_output=True)
    data = deb.read_bytes()
    packages = ((work / "DEBIAN" / "control").read_text()
                + f"Filename: pool/{deb.name}\nSize: {len(data)}\n"
                + f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
    (repo / "Packages").write_text(packages)
    digest = hashlib.sha256(packages.encode()).hexdigest()
    (repo / "Release").write_text(
        "Origin: agentcage-tests\nLabel: agentcage-tests\nSuite: tests\nCodename: tests\n"
        "Date: Tue, 01 Dec 2026 00:00:00 UTC\nArchitectures: amd64 all\n"
        f"SHA256:\n {digest} {len(packages.encode())} Packages\n")


@pytest.fixture(scope="module")
def world():
    """A fake internet of its own, with an apt repository at deb.debian.org."""
    needs_root()
    from fakenet import FakeInternet

    with FakeInternet(extra_names={APT_HOST: None}, catch_all=False) as internet:
        build_apt_repository(internet.site_dir(APT_HOST))
        yield World(internet, internet.add_client().netns)


@pytest.fixture
def image_cage(world, podman_env):
    yield from start_cage(world, "img", [APT_HOST],
                          extra=f"container:\n  image: {podman_env['IMAGE']}\n")


def test_the_cage_runs_on_the_image_not_the_host(image_cage):
    r = image_cage.sh("cat /etc/debian_version; id -u; test -e /usr/bin/bwrap && echo HOSTBIN;"
                      " python3 -c 'print(6*7)'; pwd; cat README")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split()
    assert lines[0].startswith("12."), r.stdout
    assert "HOSTBIN" not in r.stdout  # the host's bubblewrap is not in the image
    assert lines[1:] == ["1000", "42", "/workspace", "hello"]


def test_the_agent_cannot_write_the_layer_root_can(image_cage):
    """Root of the cage's namespace writes the layer, as the cage's unprivileged host uid:
    what it makes belongs to that uid on the host, never to the host's root."""
    r = image_cage.sh("touch /usr/local/bin/x 2>&1; echo rc=$?")
    assert "rc=1" in r.stdout and "Read-only" in r.stdout, r.stdout
    root = image_cage.service.exec_capture(
        image_cage.name, ["/bin/sh", "-c", "id -u; printf '#!/bin/sh\\necho tool\\n' "
                          ">/usr/local/bin/tool && chmod 755 /usr/local/bin/tool"],
        as_root=True)
    assert root.returncode == 0, root.stderr
    assert root.stdout.split() == ["0"]
    made = layers.layer_path(image_cage.cage) / "usr/local/bin/tool"
    meta = image_cage.service.backend.meta(image_cage.cage)
    assert (made.stat().st_uid, made.stat().st_gid) == (meta.host_uid, meta.host_gid) != (0, 0)
    r = image_cage.sh("tool; id -u")
    assert r.stdout.split() == ["tool", "1000"], r.stdout + r.stderr


def test_a_cage_on_an_image_verifies_as_any_cage(image_cage, tmp_path):
    """The probe, run in the image's own python3, measures what it measures in a cage on the
    host's root: nothing leaves, the layers hold, every axis measured; score at most 8."""
    out = tmp_path / "verify"
    env = {**os.environ, "AGENTCAGE_HOME": str(image_cage.service.store.root)}
    r = subprocess.run([AGENTCAGE_SCRIPT, "verify", image_cage.name, "--out", str(out),
                        "--max-score", "8"], capture_output=True, text=True, timeout=180,
                       env=env)
    report = json.loads(next(out.glob("*.json")).read_text())
    found = {f["id"] for f in report["summary"]["findings"]}
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:] + str(sorted(found))
    axes = report["summary"]["axes"]
    assert all(axis["state"] != "not_measured" for axis in axes.values()), axes
    assert not found & {"NET-001", "NET-002", "PRIV-001", "PRIV-002", "PRIV-003", "FS-001",
                        "FS-002", "PERS-005", "SEC-001", "SEC-005"}, sorted(found)


def test_a_root_shell_installs_a_package_through_the_gateway_and_it_stays(image_cage):
    """`shell --as-root` (commands on stdin, as from a script): apt-get installs from the
    repository over the gateway, where the request is audited; the package is the agent's to
    run, across stop and start; `update --rebuild` makes the layer again without it."""
    env = {**os.environ, "AGENTCAGE_HOME": str(image_cage.service.store.root)}
    script = (f"echo '{APT_LINE}' >/etc/apt/sources.list && rm -f /etc/apt/sources.list.d/* "
              "&& apt-get update -q && apt-get install -y -q agentcage-hello\n")
    r = subprocess.run([AGENTCAGE_SCRIPT, "shell", "--as-root", image_cage.name], input=script,
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    asked = [rec for rec in image_cage.audit() if rec.get("host") == APT_HOST]
    assert any(rec.get("path", "").endswith(".deb") and rec.get("decision") == "allowed"
               for rec in asked), asked
    assert image_cage.sh("agentcage-hello").stdout == "hello from a package\n"
    image_cage.service.stop(image_cage.name)
    image_cage.service.start(image_cage.name)
    assert image_cage.sh("agentcage-hello").stdout == "hello from a package\n"
    config = image_cage.service.config(image_cage.name)
    result = image_cage.service.update(image_cage.name, config, image_cage.project,
                                       rebuild=True)
    assert "layer" in result["changed"] and result["restarted"], result
    gone = image_cage.sh("command -v agentcage-hello || echo gone")
    assert gone.stdout.strip() == "gone"


def test_an_image_podman_lacks_is_refused_in_one_line_and_nothing_is_left(world, podman_env,
                                                                          user_home):
    """No registry answers here: the pull fails, said in one line with the fix, exit 1, and
    no cage is made."""
    project = make_project(user_home / "work")
    (user_home / "cage.yaml").write_text(cage_yaml(
        world, "noimage", [APT_HOST], extra="container:\n  image: localhost/no-such:1\n"))
    r = run_cli(user_home, "cage", "create", "-c", str(user_home / "cage.yaml"), "-p",
                str(project), env=podman_env, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "image localhost/no-such:1 is not in podman's storage and cannot be pulled" \
        in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 2, r.stderr
    assert json.loads(run_cli(user_home, "ls", "--json").stdout)["cages"] == []
    assert not (user_home / "state" / "cages" / "noimage").exists()


def test_as_root_is_refused_where_the_root_is_the_hosts(world, user_home):
    project = make_project(user_home / "work")
    (user_home / "cage.yaml").write_text(cage_yaml(world, "hostroot", [APT_HOST]))
    assert run_cli(user_home, "cage", "create", "-c", str(user_home / "cage.yaml"), "-p",
                   str(project)).returncode == 0
    try:
        r = run_cli(user_home, "shell", "--as-root", "hostroot", stdin="id -u\n")
        assert r.returncode == 1 and "--as-root needs a cage with container.image" in r.stderr
        assert "Traceback" not in r.stderr
    finally:
        run_cli(user_home, "destroy", "-y", "hostroot")


def test_isolation_container_needs_an_image(world, user_home):
    (user_home / "cage.yaml").write_text(cage_yaml(world, "noimg", [APT_HOST],
                                                   extra="isolation: container\n"))
    r = run_cli(user_home, "cage", "create", "-c", str(user_home / "cage.yaml"))
    assert r.returncode == 1 and "isolation container: name the image" in r.stderr, r.stderr


class OnHostWithImages(OnHost):
    """The CLI on the fake host, finding images in the tests' podman storage."""

    def __init__(self, host, home: Path, podman_env: dict[str, str]):
        super().__init__(host, home)
        self.podman_env = {k: v for k, v in podman_env.items() if k != "IMAGE"}

    def __call__(self, *args: str, env: dict[str, str] | None = None, **kw):
        return super().__call__(*args, env={**self.podman_env, **(env or {})}, **kw)


# The image each scaffold names, and what stands in for it here: Debian's own minbase root
# for debian, and for ubuntu and arch too (no Ubuntu or Arch mirror is reachable from this
# machine, so their real images cannot be made: a stand-in under their name shows that the
# scaffolds start as written, not how those distributions behave); busybox is Debian's static
# busybox.
STAND_INS = {
    "debian": "docker.io/library/debian:bookworm-slim",
    "ubuntu": "docker.io/library/ubuntu:24.04",
    "arch": "docker.io/library/archlinux:latest",
}


@pytest.fixture(scope="module")
def scaffold_host(world, podman_env):
    """A fake host whose podman storage holds an image under each scaffold's name."""
    from fakenet import FakeHost
    from tests.integration.podman_world import podman_world

    with podman_world() as images:
        for name in STAND_INS.values():
            tagged = images.podman("tag", images.image, name)
            assert tagged.returncode == 0, tagged.stderr
    home = Path(tempfile.mkdtemp(prefix="agentcage-images-"))
    os.chmod(home, 0o755)
    try:
        with FakeHost(world) as host:
            cli = OnHostWithImages(host, home, podman_env)
            yield cli
            cli.destroy_all()
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("scaffold", [*STAND_INS, "busybox"])
def test_each_image_scaffold_starts_as_written_and_verifies(world, scaffold_host, scaffold):
    """`init --scaffold S` then `cage create` as the README has it, on a host played by a
    namespace: the cage's shell is the image's, its root read-only to the agent; verify's
    score is at most 8."""
    cli, name = scaffold_host, f"s-{scaffold}"
    cli.create_from_scaffold(world, name, scaffold)
    try:
        r = cli("exec", name, "--", "/bin/sh", "-c", "id -u; cat README; ls /bin/busybox "
                "/usr/bin/bwrap 2>/dev/null; touch /etc/x 2>/dev/null || echo ro")
        expect_busybox = ["/bin/busybox"] if scaffold == "busybox" else []
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.split() == ["1000", "hello", *expect_busybox, "ro"], r.stdout
        out = cli.home / f"verify-{scaffold}"
        v = cli("verify", name, "--out", str(out), "--max-score", "8", timeout=180)
        assert v.returncode == 0, (v.stdout + v.stderr)[-2000:]
        report = json.loads(next(out.glob("*.json")).read_text())
        axes = report["summary"]["axes"]
        assert all(axis["state"] != "not_measured" for axis in axes.values()), axes
        # busybox has no python3: the probe ran on the host's, lent read-only, and says so
        lent = "python3 lent read-only" in report["target"]["how"]
        assert lent == (scaffold == "busybox"), report["target"]["how"]
    finally:
        cli("destroy", "-y", name)


def test_a_person_opens_a_root_shell_at_a_terminal(world, podman_env, image_cage):
    """`agentcage shell --as-root NAME` at a terminal (tmux): the shell's prompt, root's id,
    a file written in the layer, and the shell's own status on leaving."""
    state = image_cage.service.store.root
    env = {"PATH": os.environ["PATH"], "AGENTCAGE_HOME": str(state), "LANG": "C.UTF-8",
           "TERM": "xterm", "CONTAINERS_CONF": podman_env["CONTAINERS_CONF"],
           "CONTAINERS_STORAGE_CONF": podman_env["CONTAINERS_STORAGE_CONF"]}
    socket = state.parent / "tmux.sock"
    screen = Screen(subprocess.run, socket, f"{AGENTCAGE_SCRIPT} shell --as-root img", env,
                    state.parent)
    try:
        screen.wait_for(r"# $")  # root's prompt, from the image's own shell
        screen.submit("id -u; echo made-by-root >/etc/motd-test; echo done-$((6*7))")
        screen.wait_for(r"^0$")
        screen.wait_for(r"^done-42$")
        screen.submit("exit 3")
        assert screen.exit_code() == 3
    finally:
        screen.close()
    assert image_cage.sh("cat /etc/motd-test").stdout == "made-by-root\n"


def test_a_restored_image_cage_unpacks_its_image_again(image_cage, podman_env, tmp_path):
    """A backup holds the cage, not its layer: the restored cage makes its layer from the
    image at its first start (what a root shell installed is not in it)."""
    env = {**podman_env, "AGENTCAGE_HOME": str(image_cage.service.store.root)}
    home = image_cage.service.store.root.parent
    image_cage.service.exec_capture(image_cage.name, ["/bin/sh", "-c", "touch /opt/installed"],
                                    as_root=True)
    archive = tmp_path / "img.tar.gz"
    r = run_cli(home, "cage", "backup", image_cage.name, "-o", str(archive), env=env)
    assert r.returncode == 0, r.stderr
    r = run_cli(home, "cage", "restore", str(archive), "--name", "img2", env=env)
    assert r.returncode == 0, r.stderr
    try:
        r = run_cli(home, "start", "img2", env=env, timeout=180)
        assert r.returncode == 0, r.stderr
        r = run_cli(home, "exec", "img2", "--", "/bin/sh", "-c",
                    "cat /etc/debian_version; ls /opt", env=env)
        assert r.returncode == 0 and r.stdout.startswith("12."), r.stdout + r.stderr
        assert "installed" not in r.stdout
    finally:
        run_cli(home, "destroy", "-y", "img2", env=env)
