"""The paths section (for `agentsec assert`) and inline target overrides."""

import json
import os

from tests.probe.conftest import launch_probe, require_namespaces


def _entries(tmp_path, paths):
    require_namespaces()
    run = launch_probe(env={"AGENTSEC_PROBE_PATHS": json.dumps(paths)}, cwd=str(tmp_path))
    section = run.data("paths")
    assert section["requested"] is True
    return {entry["path"]: entry for entry in section["entries"]}


def test_paths_section_tells_absent_from_present(tmp_path):
    existing = tmp_path / "answers.json"
    existing.write_text("secret answers")
    before = (existing.read_bytes(), os.stat(existing).st_mtime_ns)
    missing = tmp_path / "nope" / "file"
    entries = _entries(tmp_path, [str(existing), str(missing), str(tmp_path)])
    assert entries[str(existing)] == {"path": str(existing), "exists": True, "kind": "file",
                                      "readable": True, "writable": True}
    assert entries[str(missing)]["exists"] is False
    assert entries[str(missing)]["readable"] is False
    assert entries[str(tmp_path)]["kind"] == "dir" and entries[str(tmp_path)]["writable"] is True
    # Nothing was written, nothing created, no marker left behind.
    assert (existing.read_bytes(), os.stat(existing).st_mtime_ns) == before
    assert not missing.parent.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.json"]


def test_paths_section_is_quiet_unless_asked(tmp_path):
    require_namespaces()
    assert launch_probe(cwd=str(tmp_path)).data("paths") == {"requested": False, "entries": []}


def test_paths_must_be_a_json_list(tmp_path):
    require_namespaces()
    run = launch_probe(env={"AGENTSEC_PROBE_PATHS": '{"not": "a list"}'}, cwd=str(tmp_path))
    assert run.section("paths")["ok"] is False
    assert run.section("identity")["ok"] is True


def test_targets_can_be_given_inline(tmp_path):
    require_namespaces()
    inline = json.dumps({"egress": ["10.200.9.9:443"], "public_networks": ["10.200.0.0/16"]})
    run = launch_probe(env={"AGENTSEC_PROBE_TARGETS": inline}, cwd=str(tmp_path))
    assert run.report["targets"]["overridden"] is True
    hosts = [t["host"] for t in run.data("network")["targets"] if t["kind"] == "egress"]
    assert hosts == ["10.200.9.9"]


def test_agentcage_placeholders_are_told_apart_without_printing_values(tmp_path):
    require_namespaces()
    decoy = "agentcage:secret:ANTHROPIC_API_KEY:" + "0123456789abcdef" * 2
    real = "ghp_" + "canaryCANARY1234" * 2
    run = launch_probe(env={"ANTHROPIC_API_KEY": decoy, "GITHUB_TOKEN": real},
                       cwd=str(tmp_path))
    names = {entry["name"]: entry for entry in run.data("secrets_env")["names"]}
    assert names["ANTHROPIC_API_KEY"]["placeholder"] is True
    assert names["GITHUB_TOKEN"]["placeholder"] is False
    assert decoy not in run.stdout and real not in run.stdout
