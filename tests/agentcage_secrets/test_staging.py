from __future__ import annotations

import os
import stat

import pytest

from agentcage.secrets import (
    PlaceholderBook,
    StagedSecret,
    StagingError,
    collect,
    load_staged,
    mint,
    stage,
    staging_path,
    unstage,
)
from agentcage.secrets.filestore import EncryptedFileStore
from agentcage.secrets.staging import RUN_DIR_ENV, filesystem_type
from agentcage.state import CageDir


def test_stage_writes_a_private_file_on_tmpfs_and_loads_back(shm_dir):
    secrets = [
        StagedSecret("A_KEY", mint("A_KEY"), b"\x00value-a"),
        StagedSecret("B", mint("B"), b""),
    ]
    path = stage(secrets, shm_dir / "cage" / "secrets.json")
    assert filesystem_type(path) == "tmpfs"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_staged(path) == tuple(secrets)
    unstage(path)
    assert not path.exists()


def test_stage_refuses_a_disk(tmp_path):
    if filesystem_type(tmp_path) in ("tmpfs", "ramfs"):
        pytest.skip("this tmp dir is in memory")
    with pytest.raises(StagingError, match="not tmpfs"):
        stage([StagedSecret("K", mint("K"), b"v")], tmp_path / "secrets.json")
    assert not (tmp_path / "secrets.json").exists()


def test_default_path_is_per_cage_under_the_run_dir(shm_dir, monkeypatch):
    monkeypatch.setenv(RUN_DIR_ENV, str(shm_dir / "run"))
    cage = CageDir(shm_dir / "state" / "my-cage")
    assert staging_path(cage) == shm_dir / "run" / "my-cage" / "secrets.json"
    path = stage([StagedSecret("K", mint("K"), b"v")], cage)
    assert path == staging_path("my-cage")
    unstage(cage)
    assert not path.parent.exists()


def test_load_refuses_a_file_others_can_read(shm_dir):
    path = stage([StagedSecret("K", mint("K"), b"v")], shm_dir / "s.json")
    os.chmod(path, 0o644)
    with pytest.raises(StagingError, match="readable by others"):
        load_staged(path)


@pytest.mark.parametrize("content", [b"", b"{}", b'{"version": 9, "secrets": []}', b"\xff"])
def test_load_refuses_garbage(shm_dir, content):
    path = shm_dir / "s.json"
    path.write_bytes(content)
    os.chmod(path, 0o600)
    with pytest.raises(StagingError):
        load_staged(path)
    with pytest.raises(StagingError, match="missing"):
        load_staged(shm_dir / "nothing.json")


def test_repr_never_shows_the_value():
    s = StagedSecret("K", mint("K"), b"super-secret-value")
    assert "super-secret-value" not in repr(s) and "super-secret-value" not in str(s)


def test_collect_reads_store_and_keeps_placeholders_stable(tmp_path):
    store = EncryptedFileStore(tmp_path)
    book = PlaceholderBook(tmp_path)
    store.set("A", b"one")
    store.set("B", b"two")
    first = collect(store, book)
    store.set("A", b"one-updated")
    second = collect(store, book)
    assert [s.placeholder for s in first] == [s.placeholder for s in second]
    assert [s.value for s in second] == [b"one-updated", b"two"]


def test_every_directory_stage_creates_is_private(shm_dir):
    path = stage([StagedSecret("A_KEY", mint("A_KEY"), b"v")],
                 shm_dir / "run" / "cage" / "secrets.json")
    for directory in (path.parent, path.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    unstage(path)
