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
