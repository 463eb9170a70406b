"""Credential files in the project are empty in the cage (what the agent can read, it can
send): a `.env`, a private key, an `.npmrc` with a token, a cloud credential file. What holds
no credential is left as it is (a certificate, an env template, an empty file, an `.npmrc`
without a token); the operator unmasks a path; a file made on the host is masked from the next
start; the host's files are never changed. The catalogue is the probe's, so its SEC-011
finding goes away on the cage that masks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.agentcage.conftest import run_cli, start_cage

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n" \
      "-----END OPENSSH PRIVATE KEY-----\n"
FILES = {
    ".env": "DATABASE_URL=postgres://app:hunter2@db/app\n",
    ".env.production": "STRIPE_KEY=sk_live_abc\n",
    ".env.example": "DATABASE_URL=postgres://user:password@localhost/app\n",
    ".env.local": "",
    ".npmrc": "//registry.npmjs.org/:_authToken=npm_abcdefghijklmnopqrstuvwxyz0123456789\n",
    "web/.npmrc": "registry=https://registry.npmjs.org/\n",
    "deploy/id_ed25519": KEY,
    "certs/server.key": KEY,
    "certs/ca.pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    "infra/.aws/credentials": "[default]\naws_access_key_id = AKIAEXAMPLE\n",
    "node_modules/pkg/.env": "FROM_A_PACKAGE=1\n",
    "src/app.py": "print('hello')\n",
}
MASKED = {".env", ".env.production", ".npmrc", "deploy/id_ed25519", "certs/server.key",
          "infra/.aws/credentials"}


@pytest.fixture
def masked_cage(net, request):
    extra = request.node.get_closest_marker("container")
    yield from start_cage(net, "masks", ["allowed.example.test"], files=FILES,
                          extra=extra.args[0] if extra else "")


def sizes(cage) -> dict[str, int]:
    """Each project file's size as the cage sees it."""
    listing = " ".join(FILES)
    r = cage.sh(f"cd /workspace && for f in {listing}; do printf '%s %s\\n' \"$f\" "
                f"$(wc -c < \"$f\"); done")
    assert r.returncode == 0, r.stderr
    return {name: int(size) for name, size in (line.split() for line in r.stdout.splitlines())}


@pytest.mark.netns
def test_credential_files_are_empty_in_the_cage_and_the_rest_is_as_it_is(masked_cage):
    seen = sizes(masked_cage)
    assert {name for name, size in seen.items() if size == 0} == MASKED | {".env.local"}
    for name in set(FILES) - MASKED - {".env.local"}:
        assert seen[name] == len(FILES[name].encode()), name
    # read-only there; on the host, nothing changed
    r = masked_cage.sh("echo X=1 >> /workspace/.env")
    assert r.returncode != 0
    for name, text in FILES.items():
        assert (masked_cage.project / name).read_text() == text
    # and what the agent writes elsewhere in the project still lands on the host
    assert masked_cage.sh("echo new > /workspace/src/new.txt").returncode == 0
    assert (masked_cage.project / "src" / "new.txt").read_text() == "new\n"


@pytest.mark.netns
@pytest.mark.container("container:\n  unmask: [.env, deploy/id_ed25519]\n")
def test_the_operator_unmasks_a_path(masked_cage):
    seen = sizes(masked_cage)
    assert seen[".env"] == len(FILES[".env"]) and seen["deploy/id_ed25519"] == len(KEY)
    assert seen[".npmrc"] == 0


@pytest.mark.netns
@pytest.mark.container("container:\n  mask_credentials: false\n")
def test_masking_can_be_turned_off(masked_cage):
    seen = sizes(masked_cage)
    assert all(seen[name] == len(FILES[name].encode()) for name in FILES)


@pytest.mark.netns
def test_a_credential_file_made_on_the_host_is_masked_from_the_next_start(masked_cage):
    (masked_cage.project / "later.pem").write_text(KEY)
    assert masked_cage.sh("wc -c < /workspace/later.pem").stdout.strip() == str(len(KEY))
    masked_cage.service.stop(masked_cage.name)
    masked_cage.service.start(masked_cage.name)
    assert masked_cage.sh("wc -c < /workspace/later.pem").stdout.strip() == "0"


@pytest.mark.netns
def test_a_masked_file_turned_into_a_symlink_is_refused(masked_cage):
    env = masked_cage.project / ".env"
    env.unlink()
    env.symlink_to("/etc/shadow")
    from agentcage.errors import BackendError

    with pytest.raises(BackendError, match="became a symlink; refusing"):
        masked_cage.sh("cat /workspace/.env")


@pytest.mark.netns
def test_the_probe_finds_the_credential_files_only_where_they_are_not_masked(masked_cage,
                                                                             tmp_path):
    r = run_cli(tmp_path, "verify", masked_cage.name, "--out", str(tmp_path / "r"), "--json",
                env={"AGENTCAGE_HOME": str(masked_cage.service.store.root)}, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    summary = json.loads(r.stdout)["report"]["summary"]
    assert "SEC-011" not in {f["id"] for f in summary["findings"]}
    assert summary["axes"]["secrets"]["state"] != "not_measured"  # absent because measured
    # the control: the probe does see them where they are not masked (in the project
    # directory itself, its one section that touches no network)
    out = subprocess.run([sys.executable, "-m", "agentsec.probe.blast_probe"],
                         cwd=masked_cage.project, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "AGENTSEC_PROBE_ONLY": "project_credentials"})
    section = json.loads(out.stdout)["sections"]["project_credentials"]
    found = {f["path"] for f in section["data"]["files"] if f["holds"] is not False}
    assert found == MASKED, found


def test_create_lists_what_it_masks(user_home):
    from tests.agentcage.conftest import make_project

    project = make_project(user_home / "work")
    (project / ".env").write_text("TOKEN=1\n")
    config = user_home / "c.yaml"
    config.write_text("name: listed\ndomains: {mode: allowlist, allow: [a.example]}\n")
    r = run_cli(user_home, "cage", "create", "-c", str(config), "--project", str(project),
                "--no-start")
    assert r.returncode == 0, r.stderr
    assert "masked in the cage (credential files, empty there): .env;" in r.stderr
    assert "container.unmask" in r.stderr
