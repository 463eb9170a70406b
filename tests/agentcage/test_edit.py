"""`agentcage edit NAME`, as a person meets it: at a terminal (tmux), in vi, the cage's
cage.yaml as they wrote it; a valid edit applied as `cage update` applies it, an invalid one
refused with the choice to edit again, changing nothing. The cages are created without
starting (`--no-start`): editing touches only the state, no network."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.agentcage.conftest import AGENTCAGE_SCRIPT as AGENTCAGE
from tests.agentcage.conftest import make_project, run_cli
from tests.tmux_screen import Screen

CAGE_YAML = """\
# my cage: written by hand
name: {name}
domains:
  mode: allowlist
  allow: [allowed.example]   # the API it talks to
"""


@pytest.fixture
def home(user_home: Path) -> Path:
    return user_home


def cli(home: Path, *args: str, env: dict[str, str] | None = None,
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(home, *args, env=env, stdin=stdin)


def created(home: Path, name: str) -> Path:
    project = make_project(home / "work" / name)
    config = home / f"{name}.yaml"
    config.write_text(CAGE_YAML.format(name=name))
    r = cli(home, "cage", "create", "-c", str(config), "--project", str(project), "--no-start")
    assert r.returncode == 0, r.stderr
    return config


def stored_allow(home: Path, name: str) -> list[str]:
    doc = yaml.safe_load((home / "state" / "cages" / name / "cage.yaml").read_text())
    return doc["domains"]["allow"]


@pytest.fixture
def screens(home: Path) -> Iterator[list[Screen]]:
    opened: list[Screen] = []
    yield opened
    for screen in opened:
        screen.close()


def at_terminal(home: Path, screens: list[Screen], line: str) -> Screen:
    env = {"PATH": os.environ["PATH"], "AGENTCAGE_HOME": str(home / "state"),
           "HOME": str(home), "LANG": "C.UTF-8", "TERM": "xterm", "EDITOR": "vi"}
    screen = Screen(subprocess.run, home / f"tmux-{len(screens)}.sock", line, env, home)
    screens.append(screen)
    return screen


def test_a_person_edits_a_cage_in_vi_and_the_change_is_applied(home, screens):
    config = created(home, "edited")
    screen = at_terminal(home, screens, f"{AGENTCAGE} edit edited")
    screen.wait_for(r"# my cage: written by hand")  # their own text, comments and all
    screen.wait_for(r"allow: \[allowed\.example\]   # the API it talks to")
    screen.type(":%s/allowed.example/other.example/\r")
    screen.type(":wq\r")
    screen.wait_for(r"cage edited: updated domains; it applies at the next start")
    assert screen.exit_code() == 0
    assert stored_allow(home, "edited") == ["other.example"]
    assert "allowed.example" in config.read_text()  # the file it was made from is untouched
    # the next edit opens the text as edited
    again = at_terminal(home, screens, f"{AGENTCAGE} edit edited")
    again.wait_for(r"allow: \[other\.example\]   # the API it talks to")
    again.type(":q\r")
    again.wait_for(r"cage edited: no change")
    assert again.exit_code() == 0


def test_an_invalid_edit_changes_nothing_and_can_be_edited_again(home, screens):
    created(home, "strict")
    screen = at_terminal(home, screens, f"{AGENTCAGE} edit strict")
    screen.wait_for(r"mode: allowlist")
    screen.type(":%s/mode: allowlist/mode: sometimes/\r")
    screen.type(":wq\r")
    screen.wait_for(r"error: .*mode")
    screen.wait_for(r"edit it again\? \[Y/n\]")
    screen.type("y\r")
    screen.wait_for(r"mode: sometimes")  # the editor again, with what they typed
    screen.type(":%s/mode: sometimes/mode: allowlist/\r")
    screen.type(":%s/allowed.example/fixed.example/\r")
    screen.type(":wq\r")
    screen.wait_for(r"cage strict: updated domains")
    assert screen.exit_code() == 0
    assert stored_allow(home, "strict") == ["fixed.example"]

    # refused, and left: nothing changed, nothing typed is lost
    screen = at_terminal(home, screens, f"{AGENTCAGE} edit strict")
    screen.wait_for(r"mode: allowlist")
    screen.type(":%s/mode: allowlist/mode: sometimes/\r")
    screen.type(":wq\r")
    screen.wait_for(r"edit it again\? \[Y/n\]")
    screen.type("n\r")
    screen.wait_for(r"nothing changed \(the edit is kept in ")
    assert screen.exit_code() == 1
    assert stored_allow(home, "strict") == ["fixed.example"]
    rejected = home / "state" / "cages" / "strict" / "cage.edit-rejected.yaml"
    assert "mode: sometimes" in rejected.read_text()


def test_without_a_terminal_an_editor_command_edits_and_a_bad_edit_fails_in_one_line(home):
    created(home, "scripted")
    sed = "sed -i s/allowed.example/scripted.example/"
    r = cli(home, "edit", "scripted", env={"EDITOR": sed})
    assert r.returncode == 0, r.stderr
    assert "cage scripted: updated domains" in r.stdout
    assert stored_allow(home, "scripted") == ["scripted.example"]
    r = cli(home, "edit", "scripted", env={"EDITOR": "sed -i s/name:.*/name:\\ other/"})
    assert r.returncode == 1
    assert "names cage 'other'" in r.stderr and "nothing changed" in r.stderr
    assert stored_allow(home, "scripted") == ["scripted.example"]
    r = cli(home, "edit", "scripted", env={"EDITOR": "false"})
    assert r.returncode == 1 and "the editor exited with 1; nothing changed" in r.stderr
    r = cli(home, "edit", "scripted", env={"EDITOR": "no-such-editor-here"})
    assert r.returncode == 1 and "editor 'no-such-editor-here' not found" in r.stderr
    r = cli(home, "edit", "nope", env={"EDITOR": "true"})
    assert r.returncode == 1 and "no cage named 'nope'" in r.stderr
