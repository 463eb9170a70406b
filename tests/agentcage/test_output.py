"""`agentcage` listings at 80 columns and through a pipe: names and placeholders whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rich.cells import cell_len
from rich.console import Console

from agentcage.output import document, domains_lines, secrets_lines

PLACEHOLDER = "agentcage:secret:ANTHROPIC_API_KEY:0123456789abcdef0123456789abcdef"
AGENTCAGE = str(Path(sys.executable).parent / "agentcage")


def _render(renderable, width: int = 80) -> list[str]:
    console = Console(width=width, file=open(os.devnull, "w"), soft_wrap=True)  # noqa: SIM115
    with console.capture() as capture:
        console.print(renderable)
    return capture.get().splitlines()


def test_secret_list_keeps_placeholders_and_names_whole():
    doc = {
        "backend": "file", "backend_reason": "systemd-creds not found", "warning": None,
        "secrets": [
            {"name": "ANTHROPIC_API_KEY", "stored": True, "inject_headers": True,
             "inject_body": False, "inject_to": ["api.anthropic.com", "api.example.test"],
             "placeholder": PLACEHOLDER},
            {"name": "UNBOUND", "stored": True, "inject_headers": False, "inject_body": False,
             "inject_to": [], "placeholder": None},
        ],
    }
    lines = _render(secrets_lines(doc))
    assert any(line.strip() == PLACEHOLDER for line in lines)
    assert any(line.rstrip().endswith("ANTHROPIC_API_KEY") for line in lines)
    assert all(cell_len(line) <= 80 for line in lines)
    assert "…" not in "\n".join(lines)


def test_domain_list_keeps_patterns_whole():
    long = "very-long-subdomain-name-for-a-test." * 2 + "example.test"
    info = {"mode": "allowlist", "rules": [
        {"pattern": long, "list": "allow", "source": "runtime", "expires_at": None,
         "active": True},
        {"pattern": "*.evil.test", "list": "block", "source": "config", "expires_at": 0,
         "active": False},
    ]}
    lines = _render(domains_lines(info))
    assert any(line.rstrip().endswith(long) for line in lines)
    assert any(line.rstrip().endswith("*.evil.test") and " no " in line for line in lines)


def test_cage_list_and_empty_list():
    from agentcage import listing

    assert listing.text([], color=False) == "no cages\n"
    long = "a-cage-with-a-long-name-" * 3
    lines = listing.text([{"name": long, "status": "running", "lifecycle": "persistent"}],
                         color=False).splitlines()
    assert lines == ["STATUS   LIFECYCLE  NAME", f"running  persistent {long}"]


def test_the_cage_list_on_a_terminal_has_the_styles_rich_gives_the_other_listings():
    """The lean `ls` renders without rich: what it writes on a terminal is what rich writes
    for the same records (agentsec's layout, bold header, green running, yellow else)."""
    import io

    from rich.console import Console
    from rich.text import Text

    from agentcage import listing
    from agentsec.render.lines import Cell, record

    rows = [{"name": "web", "status": "running", "lifecycle": "persistent"},
            {"name": "old", "status": "stopped", "lifecycle": "ephemeral"}]
    lines: list[Text] = [record([Cell("STATUS", 8), Cell("LIFECYCLE", 10)], "NAME")]
    lines[0].stylize("bold")
    for row in rows:
        style = "green" if row["status"] == "running" else "yellow"
        lines.append(record([Cell(row["status"], 8, style), Cell(row["lifecycle"], 10)],
                            row["name"]))
    sink = io.StringIO()
    console = Console(file=sink, force_terminal=True, color_system="standard", width=80)
    for line in lines:
        console.print(line)
    assert listing.text(rows, color=True) == sink.getvalue()
    assert document("cages")["schema_version"] == listing.DOCUMENT_VERSION


def test_documents_are_versioned():
    assert document("cages", cages=[]) == {
        "tool": "agentcage", "kind": "cages", "schema_version": 1, "cages": []
    }


def test_cli_json_outputs(tmp_path: Path):
    env = {**os.environ, "AGENTCAGE_HOME": str(tmp_path / "home")}

    def run(*args: str) -> dict:
        proc = subprocess.run([AGENTCAGE, *args, "--json"], env=env, capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)
        doc = json.loads(proc.stdout)
        assert doc["tool"] == "agentcage" and doc["schema_version"] == 1, proc.stderr
        return doc

    assert run("ls")["cages"] == [] and run("cage", "ls")["kind"] == "cages"
    assert "minimal" in run("scaffold", "list")["scaffolds"]
    assert run("prune", "--yes")["removed"] == []
    doctor = run("doctor")
    assert doctor["kind"] == "doctor" and all({"name", "ok"} <= set(c) for c in doctor["checks"])
