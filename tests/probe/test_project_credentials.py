"""Credential files in the working directory (the project_credentials section, SEC-011): found by
name, without following a symlink or walking node_modules, each told to hold a credential or not,
and never a byte of one in the output.

These tests read real files in a temporary project. The one run of the probe as a script asks only
for this section (AGENTSEC_PROBE_ONLY), which touches no network, so it needs no namespace.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest

from agentsec import service
from agentsec.report import Target
from agentsec.untrusted import parse_probe_output
from tests.probe.conftest import launch_probe

PRIVATE_KEY = "-----BEGIN PRIVATE KEY-----\n"
CERTIFICATE = "-----BEGIN CERTIFICATE-----\n"


def canary():
    return "canary-" + secrets.token_hex(16)


def write(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def make_project(tmp_path: Path) -> tuple[Path, list[str]]:
    """A project holding credentials, files that look like them and hold none, and files the
    walk must not reach; with every secret written, to look for in the output."""
    project, outside = tmp_path / "project", tmp_path / "outside"
    values = [canary() for _ in range(8)]
    write(project, ".env", f"API_KEY={values[0]}\n")
    write(project, ".env.local", "")  # empty, as agentcage masks one: holds nothing
    write(project, ".env.example", f"API_KEY={values[1]}\n")  # a template: not catalogued
    write(project, "config/id_rsa", f"-----BEGIN OPENSSH PRIVATE KEY-----\n{values[2]}\n")
    write(project, "certs/server.pem", f"{PRIVATE_KEY}{values[3]}\n")
    write(project, "certs/ca.pem", f"{CERTIFICATE}{values[4]}\n")  # no private key
    write(project, ".npmrc", f"//registry.npmjs.org/:_authToken={values[5]}\n")
    write(project, "web/.npmrc", "registry=https://registry.npmjs.org/\n")  # names no token
    write(project, "node_modules/pkg/.env", f"API_KEY={values[6]}\n")  # skipped
    write(project, "README.md", "# a project\n")
    write(outside, ".env", f"API_KEY={values[7]}\n")
    write(outside, "id_rsa", f"{PRIVATE_KEY}{values[7]}\n")
    (project / "linked").mkdir()
    (project / "linked" / ".env").symlink_to(outside / ".env")  # a link is not followed
    (project / "linked-dir").symlink_to(outside)  # nor is a linked directory walked
    return project, values


EXPECTED_FILES = [
    {"path": ".env", "readable": True, "holds": True},
    {"path": ".env.local", "readable": True, "holds": False},
    {"path": ".npmrc", "readable": True, "holds": True},
    {"path": "certs/ca.pem", "readable": True, "holds": False},
    {"path": "certs/server.pem", "readable": True, "holds": True},
    {"path": "config/id_rsa", "readable": True, "holds": True},
    {"path": "web/.npmrc", "readable": True, "holds": False},
]
EXPECTED_EVIDENCE = [".env", ".npmrc", "certs/server.pem", "config/id_rsa"]


def section(probe_module, directory: Path, monkeypatch) -> dict:
    monkeypatch.chdir(directory)
    return probe_module.section_project_credentials(None)


def score(stdout: str, redact: bool = False) -> dict:
    return service.score(parse_probe_output(stdout), label="t",
                         target=Target(kind="captured", how="test"), rc=0, redact=redact)


def finding_ids(report: dict) -> set[str]:
    return {f["id"] for f in report["summary"]["findings"]}


# --- The catalogue, by name ------------------------------------------------------------------


@pytest.mark.parametrize(("relative", "kind"), [
    (".env", "file"), ("app/.env", "file"), (".env.local", "file"),
    (".env.production", "file"), (".envrc", "file"), (".npmrc", "npmrc"),
    ("web/.npmrc", "npmrc"), (".pypirc", "file"), (".git-credentials", "file"),
    ("config/id_rsa", "file"), ("id_ed25519", "file"), ("gcp/credentials.json", "file"),
    (".aws/credentials", "file"), ("deploy/.aws/credentials", "file"),
    (".docker/config.json", "file"), (".kube/config", "file"), ("certs/server.pem", "key"),
    ("tls.key", "key"), ("release.jks", "file"), ("client.p12", "file"),
    (".env.example", None), (".env.sample", None), (".env.template", None),
    ("id_rsa.pub", None), ("credentials", None), ("config.json", None), ("README.md", None),
    ("docker/config.json", None), ("kube/config", None),
])
def test_files_are_catalogued_by_name(probe_module, relative, kind):
    assert probe_module.project_credential_kind(relative) == kind


# --- The section ---------------------------------------------------------------------------


def test_the_section_lists_the_projects_credential_files_and_what_they_hold(
        probe_module, tmp_path, monkeypatch):
    project, _ = make_project(tmp_path)
    data = section(probe_module, project, monkeypatch)
    assert data == {"root": str(project), "truncated": False, "files": EXPECTED_FILES}
    # controls: what the walk left out is there, and would count if it were walked
    assert (project / "node_modules" / "pkg" / ".env").is_file()
    assert (project / "linked" / ".env").is_file() and (project / "linked-dir" / "id_rsa").is_file()
    assert probe_module.project_credential_kind("node_modules/pkg/.env") == "file"
    assert probe_module.project_credential_kind("linked/.env") == "file"


def test_no_byte_of_a_file_is_in_the_section(probe_module, tmp_path, monkeypatch):
    project, values = make_project(tmp_path)
    text = probe_module.json_text(section(probe_module, project, monkeypatch))
    assert '"config/id_rsa"' in text  # control: the files are there, by path
    for value in values:
        assert value not in text
    for header in ("BEGIN", "PRIVATE KEY", "CERTIFICATE", "_authToken", "API_KEY", "registry"):
        assert header not in text


def test_an_unreadable_file_is_listed_as_unreadable_and_holding_nothing(
        probe_module):
    """Measured as an unprivileged uid (a child that drops to nobody when the tests run as
    root, who reads a file whatever its mode), in a directory of /tmp it can reach."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="agentsec-unreadable-"))
    try:
        os.chmod(base, 0o755)
        project = base / "project"
        write(project, ".env", "API_KEY=x\n").chmod(0)
        os.chmod(project, 0o755)
        data = _as_nobody(probe_module, project)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert data["files"] == [{"path": ".env", "readable": False, "holds": False}]


def _as_nobody(probe_module, project: Path) -> dict:
    read, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nobody, in the project
        try:
            os.close(read)
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            os.chdir(project)
            data = probe_module.section_project_credentials(None)
            os.write(write_end, probe_module.json_text(data).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read, "rb") as f:
        out = f.read()
    os.waitpid(pid, 0)
    return json.loads(out)


def test_a_key_file_is_read_only_for_its_head(probe_module, tmp_path):
    late = write(tmp_path, "late.pem", "x" * probe_module.PRIVATE_KEY_HEAD + PRIVATE_KEY)
    early = write(tmp_path, "early.pem", PRIVATE_KEY)
    assert probe_module.project_credential_holds(str(late), "key") is False
    assert probe_module.project_credential_holds(str(early), "key") is True
    assert probe_module.project_credential_holds(str(tmp_path / "absent.pem"), "key") is None


def test_more_than_64_files_are_cut_keeping_those_that_hold_a_credential(
        probe_module, tmp_path, monkeypatch):
    project = tmp_path / "project"
    for index in range(70):
        write(project, f"a{index:02d}/.env", "")  # masked: hold nothing
    write(project, "z/.env", "API_KEY=x\n")  # last by path
    data = section(probe_module, project, monkeypatch)
    assert data["truncated"] is True
    assert len(data["files"]) == probe_module.MAX_PROJECT_CREDENTIALS == 64
    assert {"path": "z/.env", "readable": True, "holds": True} in data["files"]
    assert [f["path"] for f in data["files"]] == sorted(f["path"] for f in data["files"])


def test_the_walk_stops_at_its_bounds_and_says_so(probe_module, tmp_path):
    project = tmp_path / "project"
    write(project, ".env", "API_KEY=x\n")
    for name in ("b", "c", "d"):
        write(project, f"{name}/README.md", "")
    assert probe_module.project_credential_files(str(project)) == ([(".env", "file")], False)
    found, truncated = probe_module.project_credential_files(str(project), max_entries=2)
    assert truncated is True and found == [(".env", "file")]

    deep = project / "/".join(["d"] * (probe_module.PROJECT_SCAN_DEPTH + 1))
    write(deep, ".env", "API_KEY=x\n")
    found, truncated = probe_module.project_credential_files(str(project))
    assert truncated is True and found == [(".env", "file")]


def test_a_skipped_directory_at_the_depth_bound_cuts_nothing(probe_module, tmp_path):
    project = tmp_path / "project"
    at_bound = project / "/".join(["d"] * probe_module.PROJECT_SCAN_DEPTH)
    write(at_bound, "node_modules/pkg/.env", "API_KEY=x\n")
    write(at_bound, ".env", "API_KEY=x\n")  # control: this deep is still walked
    found, truncated = probe_module.project_credential_files(str(project))
    relative = str(at_bound.relative_to(project))
    assert found == [(relative + "/.env", "file")] and truncated is False


# --- The probe as a script, then the scorer: SEC-011 -----------------------------------------


def run_section(directory: Path, tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    run = launch_probe(wrapper=(), cwd=str(directory),
                       env={"HOME": str(home), "AGENTSEC_PROBE_ONLY": "project_credentials"})
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert list(run.report["sections"]) == ["project_credentials"]
    return run


def test_readable_credentials_in_the_project_are_sec_011(tmp_path):
    project, values = make_project(tmp_path)
    run = run_section(project, tmp_path)
    section_data = run.data("project_credentials")
    assert section_data == {"root": str(project), "truncated": False, "files": EXPECTED_FILES}
    assert run.report["probe_version"] == "1.3.1"
    for value in values:
        assert value not in run.stdout

    report = score(run.stdout)
    found = next(f for f in report["summary"]["findings"] if f["id"] == "SEC-011")
    assert found["evidence"] == EXPECTED_EVIDENCE
    assert found["severity"] == "high" and found["title"] == (
        "Credential files readable in the project")
    assert report["summary"]["axes"]["secrets"]["state"] == "reachable"


def test_a_project_of_empty_or_masked_credential_files_has_no_sec_011(tmp_path):
    project = tmp_path / "project"
    write(project, ".env", "")
    write(project, "config/id_rsa", "")
    write(project, ".npmrc", "registry=https://registry.npmjs.org/\n")
    write(project, "certs/ca.pem", CERTIFICATE)
    run = run_section(project, tmp_path)
    assert [f["path"] for f in run.data("project_credentials")["files"]] == [
        ".env", ".npmrc", "certs/ca.pem", "config/id_rsa"]  # control: all were found
    assert "SEC-011" not in finding_ids(score(run.stdout))

    write(project, ".env", "API_KEY=x\n")  # control: one that holds something counts
    assert "SEC-011" in finding_ids(score(run_section(project, tmp_path).stdout))


def test_redaction_drops_the_projects_directory_and_keeps_the_finding(tmp_path):
    project, _ = make_project(tmp_path)
    run = run_section(project, tmp_path)
    plain, redacted = score(run.stdout), score(run.stdout, redact=True)
    assert str(project) in json.dumps(plain)
    assert str(project) not in json.dumps(redacted)
    assert redacted["probe"]["output"]["sections"]["project_credentials"]["data"]["root"] == (
        "[project]")
    evidence = [f["evidence"] for f in redacted["summary"]["findings"] if f["id"] == "SEC-011"]
    assert evidence == [EXPECTED_EVIDENCE]
