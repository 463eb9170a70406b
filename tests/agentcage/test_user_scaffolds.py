"""A user's own scaffolds: `scaffold create NAME --from SCAFFOLD` copies one to edit, and
`scaffold list`, `scaffold show`, `init --scaffold NAME` and `cage create` take it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from tests.agentcage.conftest import run_cli


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(home, *args)


def test_a_scaffold_of_ones_own_is_copied_edited_listed_and_used(user_home):
    tmp_path = user_home  # in /tmp: the workload's uid reaches the project there
    r = cli(tmp_path, "scaffold", "create", "team-agent", "--from", "claude-code")
    assert r.returncode == 0, r.stderr
    mine = tmp_path / "state" / "scaffolds" / "team-agent.yaml"
    assert f"wrote {mine}" in r.stdout
    text = mine.read_text()
    assert "scaffold: team-agent\n" in text and "name: __NAME__" in text
    mine.write_text(text.replace("lifecycle: interactive", "lifecycle: interactive\n# ours"))

    listed = json.loads(cli(tmp_path, "scaffold", "list", "--json").stdout)
    assert listed["yours"] == ["team-agent"] and "claude-code" in listed["scaffolds"]
    assert "team-agent  (yours:" in cli(tmp_path, "scaffold", "list").stdout
    assert "# ours" in cli(tmp_path, "scaffold", "show", "team-agent").stdout

    r = cli(tmp_path, "init", "ours", "--scaffold", "team-agent", "-o", "ours.yaml")
    assert r.returncode == 0, r.stderr
    written = (tmp_path / "ours.yaml").read_text()
    assert "name: ours\n" in written and "# ours" in written
    project = tmp_path / "project"
    project.mkdir()
    os.chown(project, 1000, 1000)
    r = cli(tmp_path, "cage", "create", "-c", "ours.yaml", "--project", str(project),
            "--no-start")
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load((tmp_path / "state" / "cages" / "ours" / "cage.yaml").read_text())
    assert doc["scaffold"] == "team-agent"


def test_a_scaffold_of_ones_own_is_refused_clearly_where_it_cannot_be(tmp_path):
    for args, says in (
            (["claude-code", "--from", "minimal"], "is a built-in scaffold"),
            (["claude", "--from", "minimal"], "is a built-in scaffold"),
            (["Not Ok", "--from", "minimal"], "scaffold name 'Not Ok'"),
            (["mine", "--from", "nonesuch"], "scaffold 'nonesuch' does not exist")):
        r = cli(tmp_path, "scaffold", "create", *args)
        assert r.returncode == 1 and says in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert cli(tmp_path, "scaffold", "create", "mine", "--from", "minimal").returncode == 0
    r = cli(tmp_path, "scaffold", "create", "mine", "--from", "codex")
    assert r.returncode == 1 and "exists; --force replaces it" in r.stderr
    assert cli(tmp_path, "scaffold", "create", "mine", "--from", "codex",
               "--force").returncode == 0
    r = cli(tmp_path, "init", "x", "--scaffold", "nonesuch", "-o", "x.yaml")
    assert r.returncode == 1 and "choose one of:" in r.stderr and "mine" in r.stderr
