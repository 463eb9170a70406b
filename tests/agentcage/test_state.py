"""State directory: private permissions, atomic writes, env override."""

import os
import stat

from agentcage.state import StateStore, atomic_write, state_root


def test_env_overrides_root(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTCAGE_HOME", str(tmp_path / "h"))
    assert state_root() == tmp_path / "h"


def test_dirs_and_files_are_private(tmp_path):
    store = StateStore(tmp_path / "root")
    cage = store.create("demo")
    assert stat.S_IMODE(os.stat(cage.root).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(store.root).st_mode) == 0o700
    atomic_write(cage.config, "name: demo\n")
    assert stat.S_IMODE(os.stat(cage.config).st_mode) == 0o600
    assert store.names() == ["demo"]
    store.remove("demo")
    assert store.names() == []


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "f.json"
    atomic_write(target, "one")
    inode = os.stat(target).st_ino
    atomic_write(target, "two")
    assert target.read_text() == "two"
    assert os.stat(target).st_ino != inode
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_a_cage_dir_is_a_value():
    import pytest

    from agentcage.state import CageDir

    a, b = CageDir(StateStore().cages_dir / "x"), CageDir(StateStore().cages_dir / "x")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != CageDir(StateStore().cages_dir / "y")
    with pytest.raises(AttributeError):
        a.root = a.root.parent  # type: ignore[misc]


def test_a_start_reads_the_stored_form_while_cage_yaml_is_what_was_written():
    import shutil
    import tempfile
    from pathlib import Path

    tmp = Path(tempfile.mkdtemp(prefix="agentcage-test-"))  # /tmp: reachable by the agent uid
    os.chmod(tmp, 0o755)
    try:
        _stored_form(tmp)
    finally:
        shutil.rmtree(tmp)


def _stored_form(tmp):
    import pytest

    from agentcage.cages import FORM_FILE, CageService, stored_spec
    from agentcage.config.load import load_config_text
    from agentcage.errors import ConfigError
    from tests.agentcage.conftest import make_project

    service = CageService(StateStore(tmp / "home"))
    project = make_project(tmp / "work")
    config = load_config_text("name: formed\ndomains: {mode: allowlist, allow: [a.example]}\n")
    cage = service.create(config, project, start=False)
    assert (cage.root / FORM_FILE).exists()
    assert stored_spec(cage) == config.spec()
    # cage.yaml edited by hand: the form no longer vouches for it, and it is validated anew
    edited = cage.config.read_text().replace('"a.example"', '"b.example"')
    assert edited != cage.config.read_text()
    cage.config.write_text(edited)
    assert stored_spec(cage).allow == ("b.example",)
    cage.config.write_text(edited.replace('"allowlist"', '"sometimes"'))
    with pytest.raises(ConfigError):
        stored_spec(cage)
    # a damaged form is no form: cage.yaml decides
    cage.config.write_text(edited)
    (cage.root / FORM_FILE).write_text("{not json")
    assert stored_spec(cage).allow == ("b.example",)
