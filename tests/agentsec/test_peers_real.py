"""Peers as presets, run for real: Anthropic's sandbox-runtime (srt 0.0.78), Codex CLI 0.171.0's
own sandbox and firejail 0.9.72 (Debian's), installed by scripts/setup-agents.sh, each started
as root and as an ordinary user (uid 1000) through `agentsec blast-radius preset`.

Every run is in a network namespace made for it (`unshare --net`, loopback up: srt's proxy
bridge needs it), so nothing leaves the machine. The agentsec process gets a small environment,
so the secrets axis reads what the sandbox does, not what this machine happens to hold.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from agentsec import peers
from agentsec.launchers import load_presets, preset_launch

pytestmark = pytest.mark.netns
AGENTSEC = str(Path(sys.executable).parent / "agentsec")
ORDINARY_USER = "1000"
# Codex's sandbox keeps a lock directory and a daemon directory per uid in /tmp.
CODEX_TMP = ("codex-bwrap-synthetic-mount-targets-*", "codex-daemon-*")
PEER_PRESETS = ("srt-default", "srt-deny-home", "codex-read-only", "codex-workspace",
                "codex-danger", "firejail-default", "firejail-hardened")


def codex_tmp() -> set[Path]:
    return {path for pattern in CODEX_TMP for path in Path("/tmp").glob(pattern)}


@pytest.fixture(scope="module")
def world():
    """A home with a credential in it and a working directory, outside /tmp (Codex refuses a
    CODEX_HOME under /tmp), both removed afterwards with the Codex homes the runs made."""
    assert os.geteuid() == 0, "these runs start sandboxes as root and as uid 1000"
    for name in ("srt", "codex", "firejail"):
        assert peers.find_tool(name), f"{name}: run scripts/setup-agents.sh"
    base = Path(tempfile.mkdtemp(prefix="agentsec-peers-", dir="/var/tmp"))
    made_codex_homes = [peers.codex_home_to_make(Path(pwd.getpwuid(int(ORDINARY_USER)).pw_dir))]
    # Codex's sandbox keeps a directory per uid in /tmp; the ones these runs make go with them
    codex_tmp_before = codex_tmp()
    try:
        home = base / "home"
        home.mkdir()
        token = "canary-" + secrets.token_hex(12)
        (home / ".git-credentials").write_text(f"https://agent:{token}@example.test\n")
        work = base / "work"
        work.mkdir()
        base.chmod(0o755)
        work.chmod(0o777)  # the ordinary user's runs work here too
        yield {"home": home, "work": work, "token": token, "reports": base / "reports"}
    finally:
        shutil.rmtree(base, ignore_errors=True)
        for made in made_codex_homes:
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
        for made in codex_tmp() - codex_tmp_before:
            shutil.rmtree(made, ignore_errors=True)


def run_preset(world: dict[str, Any], name: str, as_user: bool) -> dict[str, Any]:
    label = f"{name}-{'user' if as_user else 'root'}"
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(world["home"])}
    argv = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
            AGENTSEC, "blast-radius", "preset", name, "--label", label,
            "--out", str(world["reports"]), "--python", "/usr/bin/python3"]
    if as_user:
        argv += ["--as-user", ORDINARY_USER]
    proc = subprocess.run(argv, cwd=world["work"], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((world["reports"] / f"{label}.json").read_text())
    assert world["token"] not in json.dumps(report)
    return report


@pytest.fixture(scope="module")
def reports(world) -> dict[tuple[str, bool], dict[str, Any]]:
    return {(name, user): run_preset(world, name, user)
            for name in PEER_PRESETS for user in (False, True)}


def ids(report: dict[str, Any]) -> set[str]:
    return {f["id"] for f in report["summary"]["findings"]}


def axes(report: dict[str, Any]) -> dict[str, str]:
    return {name: a["state"] for name, a in report["summary"]["axes"].items()}


def test_the_presets_are_data_with_pinned_versions():
    presets = load_presets()
    for name in PEER_PRESETS:
        assert presets[name].engine in peers.PEER_ENGINES and presets[name].version
    assert {presets[n].version for n in PEER_PRESETS if n.startswith("srt")} == {"0.0.78"}
    assert {presets[n].version for n in PEER_PRESETS if n.startswith("codex")} == {"0.171.0"}
    assert {presets[n].version for n in PEER_PRESETS if n.startswith("firejail")} == {"0.9.72"}


@pytest.mark.parametrize("name", PEER_PRESETS)
@pytest.mark.parametrize("as_user", [False, True], ids=["root", "user"])
def test_each_peer_runs_for_real_and_every_axis_is_measured(reports, name, as_user):
    report = reports[(name, as_user)]
    assert report["target"]["preset"] == name
    assert report["target"]["engine"] == name.split("-")[0]
    assert report["probe"]["faults_injected"] == []
    states = axes(report)
    assert "not_measured" not in states.values(), states
    # The sandbox's own helpers, init and proxy are never taken for foreign ones. (With no
    # sandbox at all the host's processes are foreign, and those of the same user readable:
    # SEC-008 is true there.)
    found = ids(report) - ({"SEC-008"} if name == "codex-danger" else set())
    assert not found & {"SEC-004", "SEC-008", "SEC-006", "SEC-002"}


@pytest.mark.parametrize("name", PEER_PRESETS)
def test_started_by_root_the_sandbox_is_host_root_and_by_a_user_it_is_not(reports, name):
    assert {"PRIV-008", "FS-008"} <= ids(reports[(name, False)]) or "PRIV-001" in ids(
        reports[(name, False)])
    user = ids(reports[(name, True)])
    assert not user & {"PRIV-001", "PRIV-002", "PRIV-008", "FS-008", "SEC-005"}


@pytest.mark.parametrize("name", ["srt-default", "srt-deny-home"])
def test_srts_proxy_refuses_every_tunnel(reports, name):
    for as_user in (False, True):
        report = reports[(name, as_user)]
        assert "NET-010" in ids(report) and axes(report)["network"] == "refused"
        proxy = report["probe"]["output"]["sections"]["proxy"]["data"]
        assert proxy["auth_sent"] is True  # srt's own proxy credentials, sent back to it


def test_srt_reads_the_home_unless_denied(reports):
    readable = reports[("srt-default", False)]
    sec = next(f for f in readable["summary"]["findings"] if f["id"] == "SEC-003")
    assert sec["evidence"] == ["~/.git-credentials"]
    assert "SEC-003" not in ids(reports[("srt-deny-home", False)])


def test_srt_and_codex_show_no_host_process(reports):
    for key, report in reports.items():
        if key[0] != "codex-danger":
            assert "PROC-001" not in ids(report), key
    assert "PROC-001" in ids(reports[("codex-danger", False)])  # control: no sandbox at all


def test_codex_profiles_write_what_they_say(reports):
    for as_user in (False, True):
        read_only = ids(reports[("codex-read-only", as_user)])
        assert not read_only & {"FS-001", "FS-007"}  # nothing writable, the workdir neither
        assert "FS-007" in ids(reports[("codex-workspace", as_user)])
    danger = ids(reports[("codex-danger", False)])
    assert {"PRIV-001", "PRIV-004", "FS-001"} <= danger


def test_firejail_drops_what_its_options_say_and_no_more(reports):
    root_default = ids(reports[("firejail-default", False)])
    root_hardened = ids(reports[("firejail-hardened", False)])
    # started by root, firejail is root, its default profile keeps root's capabilities, and
    # --caps.drop=all drops them (--noroot keeps the invoking user: root)
    assert {"PRIV-001", "PRIV-003"} <= root_default
    assert "PRIV-001" in root_hardened and "PRIV-003" not in root_hardened
    user_default = ids(reports[("firejail-default", True)])
    user_hardened = ids(reports[("firejail-hardened", True)])
    # the user's home is the host's, read-write, unless --private makes it an empty tmpfs
    assert "FS-003" in user_default and "FS-003" not in user_hardened
    for as_user in (False, True):
        assert axes(reports[("firejail-hardened", as_user)])["network"] == "sealed"
        assert "PROC-001" not in ids(reports[("firejail-default", as_user)])  # a PID namespace
        # root's firejail still reads /etc/shadow: the default profile does not hide it
        files = reports[("firejail-default", as_user)]["probe"]["output"]["sections"][
            "credentials"]["data"]["files"]
        readable = {f["path"] for f in files if f.get("readable") is True}
        assert readable == (set() if as_user else {"/etc/shadow"}), readable


def test_a_peer_at_another_version_is_refused(monkeypatch, tmp_path):
    fake = tmp_path / "srt"
    fake.write_text("#!/bin/sh\necho 9.9.9\n")
    fake.chmod(0o755)
    monkeypatch.setenv("AGENTSEC_PEER_BIN", str(tmp_path))
    with pytest.raises(peers.PeerError, match=r"measures srt 0\.0\.78"):
        preset_launch("srt-default", "test")


def test_codex_with_a_home_under_tmp_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(peers.PeerError, match="under /tmp"):
        preset_launch("codex-read-only", "test")


def test_srt_leaves_no_socket_behind_in_tmp(world):
    """srt 0.0.78 does not unlink its proxy's socket (/tmp/srt-mux-PID-N.sock, named after its
    own pid) when it exits: one stray file per run. The launcher removes it once srt ended."""
    before = set(Path("/tmp").glob("srt-mux-*.sock"))
    for as_user in (False, True):
        run_preset(world, "srt-default", as_user)
    assert set(Path("/tmp").glob("srt-mux-*.sock")) - before == set()
