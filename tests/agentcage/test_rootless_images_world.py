"""Rootless cages on an image: the CLI run by an ordinary user (uid 1000) on a host played by a
namespace, the image taken from the user's own rootless podman storage (rootless_podman.py)
and unpacked into a layer that is theirs, under the cage's state in their home.

What root's image cages show (test_images_world.py) must hold here too: each image scaffold
starts as written and verifies at most 8; `shell --as-root` is root of the cage's namespace,
with no capability, and installs a package through the gateway; the layer and everything in
it belong to the user on the host, never to anyone else.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.agentcage.conftest import AGENT_UID, make_project, needs_root
from tests.agentcage.hosted import delegated_cgroups, open_to_users
from tests.agentcage.rootless_podman import AsUserWithPodman, import_images
from tests.agentcage.test_images_world import APT_HOST, APT_LINE, STAND_INS, build_apt_repository
from tests.integration.podman_world import BUSYBOX_IMAGE

USER = AGENT_UID
# Each scaffold's image in the user's storage: Debian's minbase root under the debian, ubuntu
# and arch names (see test_images_world.STAND_INS for why), Debian's static busybox under
# busybox's.
USERS_IMAGES = {**dict.fromkeys(STAND_INS.values(), "python"), BUSYBOX_IMAGE: "busybox"}


@pytest.fixture(scope="module")
def world():
    needs_root()
    from fakenet import FakeInternet

    with FakeInternet(extra_names={APT_HOST: None}, catch_all=False) as internet:
        build_apt_repository(internet.site_dir(APT_HOST))
        yield internet


@pytest.fixture(scope="module")
def user(world):
    """The user at the fake host, their podman's storage holding every scaffold's image, and
    the cgroup root delegates to them once (the scaffolds keep their limits)."""
    from fakenet import FakeHost

    home = Path(tempfile.mkdtemp(prefix="agentcage-rootless-images-"))
    os.chmod(home, 0o755)
    try:
        with delegated_cgroups(USER), FakeHost(world) as host:
            open_to_users(host)
            cli = AsUserWithPodman(host, home, USER, world)
            try:
                import_images(cli, USERS_IMAGES)
                yield cli
            finally:
                cli.destroy_all()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def owners_of_tree(root: Path) -> set[tuple[int, int]]:
    """Every (uid, gid) that owns an entry under `root`, as the host sees them."""
    owners = {(root.lstat().st_uid, root.lstat().st_gid)}
    for directory, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            st = os.lstat(os.path.join(directory, name))
            owners.add((st.st_uid, st.st_gid))
    return owners


@pytest.mark.netns
@pytest.mark.parametrize("scaffold", [*STAND_INS, "busybox"])
def test_each_image_scaffold_starts_rootless_as_written_and_verifies(world, user, scaffold):
    """`init --scaffold S` then `cage create`, as the user: the cage's shell is the image's,
    its root read-only to the agent, its layer the user's on the host; verify's score is at
    most 8, every axis measured (busybox's on the host's Python, lent read-only)."""
    name = f"rl-{scaffold}"
    user.create_from_scaffold(world, name, scaffold)
    try:
        r = user("exec", name, "--", "/bin/sh", "-c", "id -u; cat README; ls /bin/busybox "
                 "/usr/bin/bwrap 2>/dev/null; touch /etc/x 2>/dev/null || echo ro")
        expect_busybox = ["/bin/busybox"] if scaffold == "busybox" else []
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.split() == ["1000", "hello", *expect_busybox, "ro"], r.stdout
        layer = user.state / "cages" / name / "rootfs"
        assert (layer / "bin").exists()
        assert owners_of_tree(layer) == {(USER, USER)}
        out = user.home / f"verify-{scaffold}"
        v = user("verify", name, "--out", str(out), "--max-score", "8", timeout=180)
        assert v.returncode == 0, (v.stdout + v.stderr)[-2000:]
        report = json.loads(next(out.glob("*.json")).read_text())
        axes = report["summary"]["axes"]
        assert all(axis["state"] != "not_measured" for axis in axes.values()), axes
        lent = "python3 lent read-only" in report["target"]["how"]
        assert lent == (scaffold == "busybox"), report["target"]["how"]
    finally:
        user("destroy", "-y", name)
    assert not (user.state / "cages" / name).exists()


@pytest.mark.netns
def test_a_rootless_root_shell_installs_a_package_through_the_gateway(world, user):
    """`shell --as-root` of a rootless cage: root of the cage's namespace with no capability;
    apt-get installs from the repository over the gateway (audited); what it installed is the
    user's on the host, and the agent's to run; the agent itself still cannot write there."""
    name = "rl-root"
    user.create_from_scaffold(world, name, "debian")
    try:
        script = ("grep CapEff /proc/self/status; id -u; "
                  f"echo '{APT_LINE}' >/etc/apt/sources.list && rm -f "
                  "/etc/apt/sources.list.d/* && apt-get update -q "
                  "&& apt-get install -y -q agentcage-hello\n")
        r = user("shell", "--as-root", name, stdin=script, timeout=300)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        lines = r.stdout.splitlines()
        assert lines[0].split()[1] == "0000000000000000" and lines[1] == "0", lines[:2]
        audit = [json.loads(line) for line in
                 (user.state / "cages" / name / "audit.jsonl").read_text().splitlines()]
        assert any(rec.get("host") == APT_HOST and rec.get("decision") == "allowed"
                   and rec.get("path", "").endswith(".deb") for rec in audit), audit[-5:]
        r = user("exec", name, "--", "sh", "-c", "agentcage-hello; id -u; "
                 "touch /usr/bin/x 2>/dev/null || echo ro")
        assert r.stdout.split("\n") == ["hello from a package", "1000", "ro", ""], r.stdout
        installed = user.state / "cages" / name / "rootfs" / "usr" / "bin" / "agentcage-hello"
        assert (installed.stat().st_uid, installed.stat().st_gid) == (USER, USER)
    finally:
        user("destroy", "-y", name)


@pytest.mark.netns
def test_an_image_the_users_podman_lacks_is_refused_in_one_line(user):
    """Only the user's own storage is looked in: an image it lacks is pulled (no registry
    answers here), refused in one line with the fix, and no cage is made."""
    project = make_project(user.home / "work" / "noimage")
    config = user.home / "noimage.yaml"
    config.write_text("name: noimage\ncontainer: {image: 'localhost/no-such:1', limits: none}\n"
                      "domains: {mode: allowlist, allow: []}\n")
    r = user("cage", "create", "-c", str(config), "--project", str(project), timeout=180)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "image localhost/no-such:1 is not in podman's storage and cannot be pulled" \
        in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not (user.state / "cages" / "noimage").exists()


@pytest.fixture
def ranged_user(world):
    """A user made for this test by the sandboxes' helper (`useradd`, which gives it an
    /etc/subuid and /etc/subgid range here), the python image imported by its own rootless
    podman, which stores each file under the subordinate id its owner maps to; the rootless
    cages' namespace maps the same range. The user, its range, its home and every process it
    ran are gone afterwards (the helper's own cleanup; the cages' processes end with the fake
    host first)."""
    import pwd

    from fakenet import FakeHost
    from tests.integration.podman_world import podman_world
    from tests.integration.sandbox_worlds import rootless_user

    with podman_world() as images, rootless_user(images) as made:
        gid = pwd.getpwnam(made.name).pw_gid
        gid_start = int(next(line for line in Path("/etc/subgid").read_text().splitlines()
                             if line.startswith(f"{made.name}:")).split(":")[1])
        with delegated_cgroups(made.uid), FakeHost(world) as host:
            open_to_users(host)
            cli = AsUserWithPodman(host, made.home, made.uid, world, gid=gid,
                                   podman_env=made.env)
            try:
                yield cli, made.image, gid_start
            finally:
                cli.destroy_all()


@pytest.mark.netns
def test_an_image_stored_under_subordinate_ids_makes_a_rootless_cage(ranged_user):
    """The common case on a distribution that gives every user a range: podman's storage
    holds the image's files under the user's subordinate ids (shown here: /etc/gshadow's
    group, shadow, is one), which the rootless cages' namespace maps as podman does. The
    cage runs on that image, its layer all the user's on the host, and verifies at most 8."""
    cli, image, gid_start = ranged_user
    storage = cli.home / ".local" / "share" / "containers" / "storage"
    gshadow = [*storage.glob("vfs/dir/*/etc/gshadow"),
               *storage.glob("overlay/*/diff/etc/gshadow")]
    assert gshadow and all(path.stat().st_gid == gid_start + 41 for path in gshadow), \
        [(path, path.stat().st_gid) for path in gshadow]  # shadow is gid 42 in Debian
    project = cli.home / "work"
    project.mkdir()
    (project / "README").write_text("hello\n")
    for path in (project, project / "README"):
        os.chown(path, cli.uid, cli.gid)
    config = cli.home / "ranged.yaml"
    config.write_text(f"name: ranged\ncontainer: {{image: '{image}'}}\n"
                      "domains: {mode: allowlist, allow: []}\n"
                      f"gateway: {{upstream_ca_files: ['{cli.ca_path}']}}\n")
    r = cli("cage", "create", "-c", str(config), "--project", str(project), timeout=180)
    assert r.returncode == 0, r.stderr
    r = cli("exec", "ranged", "--", "sh", "-c", "cat /etc/debian_version; id -u; cat README")
    assert r.returncode == 0, r.stderr
    version, uid, readme = r.stdout.split()
    assert version.startswith("12.") and (uid, readme) == ("1000", "hello"), r.stdout
    layer = cli.state / "cages" / "ranged" / "rootfs"
    assert owners_of_tree(layer) == {(cli.uid, cli.gid)}
    out = cli.home / "verify"
    v = cli("verify", "ranged", "--out", str(out), "--max-score", "8", timeout=180)
    assert v.returncode == 0, (v.stdout + v.stderr)[-2000:]


@pytest.mark.netns
def test_a_user_opens_a_rootless_root_shell_at_a_terminal(world, user):
    """`agentcage shell --as-root NAME` at a terminal (tmux on the fake host), as the user:
    root's prompt from the image's shell, root's id, a file written in the layer (the user's
    on the host), and the shell's own status on leaving."""
    from tests.agentcage.hosted import AGENTCAGE
    from tests.tmux_screen import Screen

    name = "rl-term"
    user.create_from_scaffold(world, name, "debian")
    env = {"PATH": os.environ["PATH"], "AGENTCAGE_HOME": str(user.state), "LANG": "C.UTF-8",
           "TERM": "xterm", "HOME": str(user.home), **user.user_env}
    line = " ".join([*user.as_user, *AGENTCAGE, "shell", "--as-root", name])
    screen = Screen(user.host.run, user.home / "tmux.sock", line, env, user.home)
    try:
        screen.wait_for(r"# $")
        screen.submit("id -u; echo made-by-root >/etc/motd-test; echo done-$((6*7))")
        screen.wait_for(r"^0$")
        screen.wait_for(r"^done-42$")
        screen.submit("exit 3")
        assert screen.exit_code() == 3
    finally:
        screen.close()
    try:
        assert user("exec", name, "--", "cat", "/etc/motd-test").stdout == "made-by-root\n"
        made = user.state / "cages" / name / "rootfs" / "etc" / "motd-test"
        assert (made.stat().st_uid, made.stat().st_gid) == (USER, USER)
    finally:
        user("destroy", "-y", name)
