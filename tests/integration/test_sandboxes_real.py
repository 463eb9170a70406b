"""gVisor (podman --runtime runsc), systemd-nspawn and rootless podman as presets, run for real
through `agentsec blast-radius preset`, each beside a control that shows what the sandbox takes
away.

Each run is in the fake internet's client namespace (sandboxes that share their caller's network
reach its servers there, and only there) or in a namespace of its own with loopback only; the
container images and the root directory are the podman world's (tests/integration/podman_world.py),
systemd-nspawn's writes land in an overlay of this run's, and rootless podman runs as a user
made for the module (tests/integration/sandbox_worlds.py). Who runs what: rootful podman (runc or
runsc) and systemd-nspawn need root, so they run as root only; rootless podman runs as an
ordinary user only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentsec import gvisor
from agentsec.launchers import LaunchError, availability, get_preset, preset_launch
from agentsec.matrix import run_matrix
from tests.integration.podman_world import PodmanWorld, podman_world
from tests.integration.sandbox_worlds import (
    RootlessUser,
    in_namespace,
    overlay_root,
    rootless_user,
    runtime_state_tidied,
    written_to,
)

pytestmark = pytest.mark.netns
AGENTSEC = str(Path(sys.executable).parent / "agentsec")
OWN_NETNS = ("unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh")
RUNSC_REFUSAL = "cannot run with network enabled in root network namespace"


@pytest.fixture(scope="module")
def podman() -> Iterator[PodmanWorld]:
    with runtime_state_tidied(), podman_world() as world:
        yield world


def run_agentsec(prefix: tuple[str, ...] | list[str], *args: str, env: dict[str, str],
                 cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, AGENTSEC, *args], env={**os.environ, **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def preset_report(prefix: tuple[str, ...] | list[str], name: str, out: Path, env: dict[str, str],
                  *args: str, cwd: Path | None = None) -> dict[str, Any]:
    proc = run_agentsec(prefix, "blast-radius", "preset", name, "--label", name, "--out",
                        str(out), "--no-history", *args, env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / f"{name}.json").read_text())


def ids(report: dict[str, Any]) -> set[str]:
    return {f["id"] for f in report["summary"]["findings"]}


def finding(report: dict[str, Any], finding_id: str) -> dict[str, Any]:
    return next(f for f in report["summary"]["findings"] if f["id"] == finding_id)


def axes(report: dict[str, Any]) -> dict[str, str]:
    return {name: a["state"] for name, a in report["summary"]["axes"].items()}


def identity(report: dict[str, Any]) -> dict[str, Any]:
    return report["probe"]["output"]["sections"]["identity"]["data"]


def one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert needle in lines[0], lines[0]


# --- gVisor, as rootful podman's runtime ------------------------------------------------------


@pytest.fixture(scope="module")
def gvisor_reports(podman, client, tmp_path_factory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("gvisor-reports")
    env = {**podman.env, "AGENTSEC_PROBE_TARGETS": client.probe_targets_file.read_text()}
    in_client = ("nsenter", f"--net=/run/netns/{client.netns}")
    image = ("--image", podman.image)
    network = ("--", f"--network=ns:/run/netns/{client.netns}")
    return {
        # runc and runsc side by side in the same namespace of the fake internet
        "podman-default": preset_report(in_client, "podman-default", out, env, *image, *network),
        "gvisor-host-network": preset_report(in_client, "gvisor-host-network", out, env, *image,
                                             *network),
        "gvisor-hardened": preset_report(OWN_NETNS, "gvisor-hardened", out, env, *image),
    }


def test_under_gvisor_the_container_reaches_the_network_it_is_given_as_gvisors_root(
        gvisor_reports):
    report, control = gvisor_reports["gvisor-host-network"], gvisor_reports["podman-default"]
    assert report["target"]["flags"][:2] == ["--runtime", "runsc"]
    assert identity(report)["user_space_kernel"] == "gvisor"
    assert identity(control)["user_space_kernel"] is None
    # network=host: the client namespace's own interfaces, through the host's kernel
    assert "NET-001" in ids(report) and "NET-001" in ids(control)
    # runc's container is host root with its capabilities; gVisor's, root of the Sentry
    assert {"PRIV-001", "PRIV-003"} <= ids(control)
    assert "PRIV-001" not in ids(report)
    assert finding(report, "PRIV-002")["evidence"] == [
        "euid 0 of gvisor's user-space kernel, not the host's"]
    assert finding(report, "PRIV-003")["severity"] == "low"
    assert report["summary"]["score"] < control["summary"]["score"]
    assert "not_measured" not in axes(report).values()


def test_podmans_own_files_are_no_host_mount_but_a_bound_directory_is(gvisor_reports, podman,
                                                                      tmp_path):
    report = gvisor_reports["podman-default"]
    mounts = report["probe"]["output"]["sections"]["filesystem"]["data"]["host_mounts"]
    # /run/.containerenv is there, writable, and podman's own file about the container
    assert any(m["mountpoint"] == "/run/.containerenv" and m["writable"] for m in mounts)
    assert "FS-003" not in ids(report)
    shared = tmp_path / "shared"
    shared.mkdir()
    control = preset_report(OWN_NETNS, "podman-default", tmp_path, podman.env, "--image",
                            podman.image, "--", "-v", f"{shared}:/data")
    assert finding(control, "FS-003")["evidence"] == ["/data"]


def test_gvisor_hardened_leaves_only_the_missing_limits(gvisor_reports):
    report = gvisor_reports["gvisor-hardened"]
    assert identity(report)["user_space_kernel"] == "gvisor" and identity(report)["euid"] == 65534
    states = axes(report)
    assert "not_measured" not in states.values()
    assert {k: v for k, v in states.items() if v != "sealed"} == {"resources": "reachable"}
    # --memory and --pids-limit hold on the sandbox's cgroup on the host (runsc puts the
    # Sentry there), which gVisor's own /sys/fs/cgroup inside does not show the probe
    assert finding(report, "RES-001")["severity"] == "low"


def test_gvisor_default_says_in_one_line_why_it_cannot_run_here(podman, client, tmp_path):
    """runsc 0.0~20221219 (Debian 12's) refuses its own network stack in any network namespace
    on this kernel: it takes net.core.rmem_default, which newer kernels show in every
    namespace, for the mark of the host's. The preset says so instead of failing mid-run."""
    runsc = shutil.which("runsc")
    assert runsc and (gvisor.release_date(runsc) or 0) < gvisor.FIXED_RELEASE
    # the reason, proven: the sysctl is in a fresh namespace, and runsc itself refuses
    fresh = subprocess.run(["unshare", "--net", "--", "test", "-e", gvisor.RMEM_DEFAULT])
    assert fresh.returncode == 0
    podman_run = ["nsenter", f"--net=/run/netns/{client.netns}", "podman", "run", "--rm", "-i",
                  "--runtime", "runsc", f"--network=ns:/run/netns/{client.netns}", podman.image,
                  "python3", "-c", "print('started')"]
    env = {**os.environ, **podman.env}
    refused = subprocess.run(podman_run, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and RUNSC_REFUSAL in refused.stderr, refused.stderr
    # the control: the same container with runsc's network=host starts
    host_network = [*podman_run[:-4], "--runtime-flag", "network=host", *podman_run[-4:]]
    started = subprocess.run(host_network, env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0 and started.stdout.strip() == "started", started.stderr
    # and agentsec names the reason, before running anything
    state = availability(get_preset("gvisor-default"))
    assert not state.runnable and "own network stack will not start" in state.why_not
    proc = run_agentsec(OWN_NETNS, "blast-radius", "preset", "gvisor-default", "--image",
                        podman.image, "--out", str(tmp_path / "r"), env=podman.env)
    one_line_error(proc, "runsc 20221219: its own network stack will not start on this kernel")
    assert not (tmp_path / "r").exists()
    listing = run_agentsec((), "presets", env={})
    assert "gvisor-default" in listing.stdout
    assert "runsc 20221219: its own network stack will not start on this kernel" in listing.stdout


# --- systemd-nspawn on the cached root directory ---------------------------------------------


@pytest.fixture(scope="module")
def nspawn_reports(podman, client, tmp_path_factory) -> Iterator[dict[str, Any]]:
    out = tmp_path_factory.mktemp("nspawn-reports")
    env = {"AGENTSEC_PROBE_TARGETS": client.probe_targets_file.read_text()}
    assert podman.rootfs is not None
    before = podman.rootfs.stat().st_mtime_ns, (podman.rootfs / "etc").stat().st_mtime_ns
    with overlay_root(podman.rootfs) as root:
        reports = {
            # both in the client namespace of the fake internet: the default shares it
            "default": preset_report(in_namespace(client.netns), "nspawn-default", out, env,
                                     "--image", str(root)),
            # read-only: the shared directory itself, id-mapped (an overlay cannot be)
            "hardened": preset_report(in_namespace(client.netns), "nspawn-hardened", out, env,
                                      "--image", str(podman.rootfs)),
        }
        written = written_to(root)
    after = podman.rootfs.stat().st_mtime_ns, (podman.rootfs / "etc").stat().st_mtime_ns
    yield {**reports, "written": written, "unchanged": before == after}


def test_nspawn_default_is_root_on_the_callers_network(nspawn_reports):
    report = nspawn_reports["default"]
    assert report["target"]["engine"] == "nspawn" and report["target"]["preset"] == "nspawn-default"
    found = ids(report)
    assert {"PRIV-001", "NET-001", "FS-001"} <= found
    assert finding(report, "PRIV-003")["severity"] == "critical"  # CAP_SYS_ADMIN among them
    # its own pid namespace, the probe as its pid 1: no host process in sight
    assert "PROC-001" not in found and axes(report)["processes"] == "sealed"
    assert "not_measured" not in axes(report).values()
    # what it wrote went to the overlay, never to the shared directory
    assert "etc" in nspawn_reports["written"] and nspawn_reports["unchanged"]


def test_nspawn_hardened_takes_away_what_its_options_say(nspawn_reports):
    report, control = nspawn_reports["hardened"], nspawn_reports["default"]
    found = ids(report)
    assert axes(report)["network"] == "sealed"  # --private-network, in the same namespace
    assert "PRIV-002" in found and not found & {"PRIV-001", "PRIV-003", "PRIV-005", "FS-001"}
    assert axes(report)["filesystem"] == "sealed"  # --read-only
    assert report["summary"]["score"] < control["summary"]["score"]
    assert "not_measured" not in axes(report).values()


def test_nspawn_needs_root_and_a_directory(podman, tmp_path):
    proc = run_agentsec(OWN_NETNS, "blast-radius", "preset", "nspawn-default", "--image",
                        podman.image, "--out", str(tmp_path / "r"), env={})
    one_line_error(proc, "is not a directory")
    assert availability(get_preset("nspawn-default")).runnable  # as root; and imports made
    read, write = os.pipe()  # (the child, as uid 1000, could not read the interpreter's)
    child = os.fork()
    if child == 0:  # as uid 1000: what an ordinary user is told (nothing else runs here)
        said: list[str] = []
        try:
            os.close(read)
            os.setgid(1000)
            os.setuid(1000)
            said.append(availability(get_preset("nspawn-default")).why_not)
            preset_launch("nspawn-default", "", image=str(podman.rootfs))
        except LaunchError as exc:
            said.append(str(exc))
        except BaseException as exc:  # reported to the parent, which fails
            said.append(repr(exc))
        finally:
            os.write(write, json.dumps(said).encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        said = json.loads(pipe.read())
    os.waitpid(child, 0)
    assert said == ["systemd-nspawn needs root", "systemd-nspawn needs root: run agentsec as root"]


def test_matrix_passes_over_nspawn_whose_image_is_a_directory(podman, tmp_path):
    result = run_matrix(podman.image, ["nspawn-default"], tmp_path, "python3", lambda _: None)
    assert result.rows == [] and result.failed == []
    assert result.skipped == [{"preset": "nspawn-default", "why": "takes a root directory, not "
                               "an image: agentsec blast-radius preset nspawn-default --image DIR"}]


# --- rootless podman, as an ordinary user with a subordinate id range -------------------------


@pytest.fixture(scope="module")
def rootless(podman) -> Iterator[RootlessUser]:
    with rootless_user(podman) as user:
        yield user


@pytest.fixture(scope="module")
def rootless_reports(rootless, podman, client, tmp_path_factory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("rootless-reports")
    env = {**rootless.env, "AGENTSEC_PROBE_TARGETS": client.probe_targets_file.read_text()}
    as_user = ("--image", rootless.image, "--as-user", rootless.as_user)
    # root's own directory, closed to the user (as root's home or a 0700 checkout is): the
    # engine it starts as the user must not need to enter it
    closed = tmp_path_factory.mktemp("closed-to-the-user")
    closed.chmod(0o700)
    return {
        # slirp4netns, podman's rootless default, out through the client namespace
        "default": preset_report(in_namespace(client.netns), "podman-rootless-default", out, env,
                                 *as_user, cwd=closed),
        "hardened": preset_report(OWN_NETNS, "podman-rootless-hardened", out, env, *as_user),
        "gvisor": preset_report(in_namespace(client.netns), "gvisor-rootless", out, env,
                                *as_user),
    }


def test_rootless_podman_is_root_of_the_users_namespace_only(rootless_reports, rootless):
    report = rootless_reports["default"]
    command = report["target"]["command"]
    assert Path(command[0]).name == "setpriv" and command[1] == f"--reuid={rootless.uid}"
    found = ids(report)
    assert "NET-001" in found  # slirp4netns reaches the fake internet from the client namespace
    assert "PRIV-002" in found and not found & {"PRIV-001", "PRIV-008"}
    assert finding(report, "PRIV-003")["severity"] == "low"
    # podman's own per-container files (/run/.containerenv, /etc/hosts...) are no host mounts
    assert "FS-003" not in found
    assert "not_measured" not in axes(report).values()


def test_gvisor_as_rootless_podmans_runtime_is_root_of_the_sentry_only(rootless_reports):
    report, control = rootless_reports["gvisor"], rootless_reports["default"]
    assert identity(report)["user_space_kernel"] == "gvisor"
    assert identity(control)["user_space_kernel"] is None
    assert "NET-001" in ids(report)  # slirp4netns's namespace, through network=host
    assert finding(report, "PRIV-002")["evidence"] == [
        "euid 0 of gvisor's user-space kernel, not the host's"]
    assert not ids(report) & {"PRIV-001", "PRIV-004", "PRIV-006", "PRIV-009"}
    assert "PRIV-006" in ids(control)  # runc's container may make user namespaces of the host's
    assert "not_measured" not in axes(report).values()


def test_rootless_podman_hardened_drops_root_and_network(rootless_reports):
    report, control = rootless_reports["hardened"], rootless_reports["default"]
    found = ids(report)
    assert axes(report)["network"] == "sealed"
    assert not found & {"PRIV-002", "PRIV-003", "PRIV-005", "FS-001"}
    # cgroup v1 without delegation: podman says it ignores --memory and --pids-limit rootless
    assert "RES-001" in found
    assert report["summary"]["score"] < control["summary"]["score"]
    assert "not_measured" not in axes(report).values()


def test_rootless_presets_from_root_name_the_user(podman, tmp_path):
    out = str(tmp_path / "r")
    proc = run_agentsec(OWN_NETNS, "blast-radius", "preset", "podman-rootless-default",
                        "--image", podman.image, "--out", out, env={})
    one_line_error(proc, "with --as-user UID")
    proc = run_agentsec(OWN_NETNS, "blast-radius", "preset", "podman-rootless-default",
                        "--image", podman.image, "--as-user", "0", "--out", out, env={})
    one_line_error(proc, "non-root uid")
    proc = run_agentsec(OWN_NETNS, "blast-radius", "preset", "podman-default", "--image",
                        podman.image, "--as-user", "1000", "--out", out, env={})
    one_line_error(proc, "--as-user applies to")
    assert not (tmp_path / "r").exists()
