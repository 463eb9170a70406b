"""Real probe runs through agentsec's runner and scorer, in a fake internet made of namespaces.

An open configuration (root, linked to the fake internet), bubblewrap with every namespace
unshared, and a hardened bubblewrap: the expected findings fire in each and the scores are
strictly ordered. Nothing here runs in the host's network namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from agentsec.launchers import bwrap_launch, load_presets
from fakenet import FakeInternet
from tests.integration.conftest import (
    axis_state,
    finding_ids,
    measure,
    open_launch,
    preset_in,
)

SECRET_NAME = "AGENTSEC_TEST_API_TOKEN"
AGENTSEC = str(Path(sys.executable).parent / "agentsec")


@pytest.fixture(scope="module")
def reports(client, request) -> dict[str, dict[str, Any]]:
    canary = "canary-value-" + "5f3a9c" * 6
    env = {"AGENTSEC_PROBE_TARGETS": client.probe_targets_file.read_text(), SECRET_NAME: canary}
    measured = {
        "open": measure(open_launch(client.exec_prefix), env, "open"),
        "as-root": measure(preset_in(client.exec_prefix, "bwrap-unshare-all-as-root"), env, "r"),
        "unshare-all": measure(preset_in(client.exec_prefix, "bwrap-unshare-all"), env, "ua"),
        "hardened": measure(preset_in(client.exec_prefix, "bwrap-hardened"), env, "hardened"),
    }
    measured["_canary"] = {"value": canary}
    return measured


def test_open_configuration_reaches_the_fake_internet(reports):
    found = finding_ids(reports["open"])
    assert {
        "PRIV-001",
        "NET-001",
        "NET-002",
        "NET-004",
        "NET-005",
        "SEC-002",
        "PROC-001",
        "FS-001",
    } <= found
    assert axis_state(reports["open"], "network") == "reachable"
    assert reports["open"]["probe"]["targets_overridden"] is True


def test_unshare_all_cuts_the_network(reports):
    for name in ("as-root", "unshare-all"):
        found = finding_ids(reports[name])
        assert "NET-003" in found
        assert not found & {"NET-001", "NET-002", "NET-004", "NET-005", "PROC-001", "PRIV-001"}
        assert axis_state(reports[name], "network") == "sealed"


def test_root_started_user_namespace_is_host_root_and_the_probe_says_so(reports):
    # Started by root, uid 0 inside maps to uid 0 outside: kernel settings and root's files.
    assert {"PRIV-002", "PRIV-008", "FS-008", "SEC-005"} <= finding_ids(reports["as-root"])
    # The same flags started from an unprivileged uid: that uid inside, and nothing of root's.
    found = finding_ids(reports["unshare-all"])
    assert not found & {"PRIV-002", "PRIV-008", "FS-008", "FS-009", "SEC-005"}


def test_hardened_bwrap_drops_root_env_and_network(reports):
    found = finding_ids(reports["hardened"])
    assert not found & {
        "PRIV-001",
        "PRIV-002",
        "PRIV-008",
        "SEC-002",
        "SEC-005",
        "NET-001",
        "PROC-001",
        "FS-001",
    }
    assert axis_state(reports["hardened"], "network") == "sealed"
    assert axis_state(reports["hardened"], "processes") == "sealed"


def test_scores_are_strictly_ordered(reports):
    # Ties at the cap of 100 are ranked by raw_score, the uncapped sum kept for exactly this.
    order = ("open", "as-root", "unshare-all", "hardened")
    ranks = [(reports[k]["summary"]["score"], reports[k]["summary"]["raw_score"]) for k in order]
    assert ranks == sorted(ranks, reverse=True) and len(set(ranks)) == len(ranks), ranks
    assert reports["unshare-all"]["summary"]["score"] > reports["hardened"]["summary"]["score"]


def test_no_axis_is_unmeasured_in_a_healthy_run(reports):
    for name in ("open", "as-root", "unshare-all", "hardened"):
        states = {a: s["state"] for a, s in reports[name]["summary"]["axes"].items()}
        assert "not_measured" not in states.values(), (name, states)


def test_secret_value_never_appears_but_its_name_does(reports):
    canary = reports["_canary"]["value"]
    for name in ("open", "as-root", "unshare-all", "hardened"):
        assert canary not in json.dumps(reports[name])
    sec = next(f for f in reports["open"]["summary"]["findings"] if f["id"] == "SEC-002")
    assert SECRET_NAME in sec["evidence"]


def test_a_crashing_section_reads_not_measured_in_a_real_run(client):
    env = {
        "AGENTSEC_PROBE_TARGETS": client.probe_targets_file.read_text(),
        "AGENTSEC_PROBE_FAULT": "network",
    }
    report = measure(open_launch(client.exec_prefix), env)
    assert axis_state(report, "network") == "not_measured"
    assert report["summary"]["score_is_lower_bound"] is True
    assert report["probe"]["faults_injected"] == ["network"]
    control = measure(
        open_launch(client.exec_prefix),
        {"AGENTSEC_PROBE_TARGETS": client.probe_targets_file.read_text()},
    )
    assert axis_state(control, "network") == "reachable"


def test_credentials_found_through_the_passwd_home_when_home_is_redirected(tmp_path: Path, client):
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("[default]\naws_secret_access_key = canary\n")
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n")
    flags = [
        "--unshare-all",
        "--uid",
        "1000",
        "--gid",
        "1000",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--ro-bind",
        str(passwd),
        "/etc/passwd",
        "--tmpfs",
        "/home",
        "--bind",
        str(home),
        "/home/agent",
    ]
    launch = bwrap_launch(flags, "redirected HOME", python="/usr/bin/python3")
    for home_env in ("/home/agent", "/tmp/elsewhere"):
        report = measure(launch, {"HOME": home_env})
        sec = [f for f in report["summary"]["findings"] if f["id"] == "SEC-003"]
        assert sec and "~/.aws/credentials" in sec[0]["evidence"], home_env
        assert str(home) not in json.dumps(report["summary"])
        assert "canary" not in json.dumps(report)


@pytest.mark.parametrize("mode", ["drop", "reject"])
def test_a_gateway_that_drops_everything_still_finishes_within_the_deadline(
    internet: FakeInternet, mode: str
):
    blackhole = internet.add_blackhole_client(mode=mode)
    env = {
        "AGENTSEC_PROBE_TARGETS": blackhole.probe_targets_file.read_text(),
        "AGENTSEC_PROBE_TIMEOUT": "1",
    }
    started = time.monotonic()
    report = measure(open_launch(blackhole.exec_prefix), env)
    elapsed = time.monotonic() - started
    # The probe's deadline is timeout + 1 s = 2 s; the slack covers interpreter start-up and
    # `ip netns exec` on a loaded 2-core machine. Without the concurrent design it took 40 s+.
    assert elapsed < 2.0 + 2.0, elapsed
    assert axis_state(report, "network") == "sealed"
    assert not finding_ids(report) & {"NET-001", "NET-002", "NET-004", "NET-005"}


def test_every_bwrap_preset_runs_for_real_inside_the_fake_internet(client, tmp_path: Path):
    bwrap_presets = [name for name, p in load_presets().items() if p.engine == "bwrap"]
    workdir = Path(tempfile.mkdtemp(prefix="agentsec-workdir-", dir="/tmp"))
    workdir.chmod(0o777)  # the presets start bwrap as uid 65534, as an ordinary user would
    try:
        env = {**os.environ, "AGENTSEC_PROBE_TARGETS": client.probe_targets_file.read_text()}
        proc = subprocess.run(
            [
                *client.exec_prefix,
                AGENTSEC,
                "matrix",
                "--presets",
                ",".join(bwrap_presets),
                "--python",
                "/usr/bin/python3",
                "--out",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            cwd=workdir,
        )
    finally:
        shutil.rmtree(workdir)
    assert proc.returncode == 0, proc.stderr
    table = json.loads((tmp_path / "matrix_bwrap.json").read_text())
    assert table["failed"] == [] and table["skipped"] == []
    rows = {row["preset"]: row for row in table["rows"]}
    assert set(rows) == set(bwrap_presets)
    # The presets that share the network reach the fake internet; the others do not.
    for name in ("bwrap-ro-root", "bwrap-workdir-net"):
        assert rows[name]["axes"]["network"].startswith("✕"), name
    for name in ("bwrap-unshare-all", "bwrap-hardened", "codex-cli-0.153.4-bwrap-layer"):
        assert rows[name]["axes"]["network"].startswith("✓"), name
