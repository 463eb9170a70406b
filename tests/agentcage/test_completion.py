"""Shell completion (click's) of what agentcage knows: cage and scaffold names, in agentcage and
in agentsec (which asks agentcage), and never a crash, whatever the state directory is."""

from __future__ import annotations

from pathlib import Path

from agentcage.config.scaffolds import scaffold_names
from tests.agentsec.reports import AGENTCAGE, AGENTSEC
from tests.agentsec.reports import complete as _complete


def _fake_home(tmp_path: Path, *names: str) -> dict[str, str]:
    for name in names:
        cage = tmp_path / "home" / "cages" / name
        cage.mkdir(parents=True)
        (cage / "cage.yaml").write_text(f"name: {name}\n")
    return {"AGENTCAGE_HOME": str(tmp_path / "home")}


def test_agentcage_completes_cage_and_scaffold_names(tmp_path: Path):
    env = _fake_home(tmp_path, "alpha", "beta")
    assert _complete(AGENTCAGE, "agentcage exec a", env) == ["alpha"]
    assert _complete(AGENTCAGE, "agentcage domain list ", env) == ["alpha", "beta"]
    first = scaffold_names()[0]
    assert first in _complete(AGENTCAGE, f"agentcage init x --scaffold {first[:2]}")
    assert first in _complete(AGENTCAGE, f"agentcage scaffold show {first[:2]}")
    assert first in _complete(AGENTCAGE, f"agentcage run {first[:2]}")


def test_agentsec_completes_cage_names_through_agentcage(tmp_path: Path):
    env = _fake_home(tmp_path, "gamma")
    assert _complete(AGENTSEC, "agentsec blast-radius cage g", env) == ["gamma"]


def test_completion_never_crashes_the_shell(tmp_path: Path):
    broken = tmp_path / "home"
    broken.write_text("not a directory")
    env = {"AGENTCAGE_HOME": str(broken)}
    assert _complete(AGENTCAGE, "agentcage exec ", env) == []
    assert _complete(AGENTSEC, "agentsec blast-radius cage ", env) == []
