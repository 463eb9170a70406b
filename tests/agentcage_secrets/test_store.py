from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentcage.secrets import SecretStoreError, StoreUnavailable, open_store
from agentcage.secrets.creds import SystemdCredsStore
from agentcage.secrets.filestore import EncryptedFileStore, PlaintextStore
from tests.agentcage_secrets.helpers import systemd_creds_works

VALUE = b"sk-test-\x00\xff binary \n value"
needs_creds = pytest.mark.skipif(not systemd_creds_works(), reason="systemd-creds unusable here")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def make(kind: str, root: Path):
    if kind == "systemd-creds":
        if not systemd_creds_works():
            pytest.skip("systemd-creds unusable here")
        return SystemdCredsStore(root)
    return {"encrypted-file": EncryptedFileStore, "plaintext": PlaintextStore}[kind](root)


@pytest.mark.parametrize("kind", ["systemd-creds", "encrypted-file", "plaintext"])
def test_set_get_list_remove(tmp_path, kind):
    store = make(kind, tmp_path / "secrets")
    assert store.names() == []
    store.set("B_KEY", VALUE)
    store.set("A_KEY", b"other")
    assert store.names() == ["A_KEY", "B_KEY"]
    assert store.get("B_KEY") == VALUE
    store.set("B_KEY", b"updated")
    assert store.get("B_KEY") == b"updated"
    assert store.remove("A_KEY") is True
    assert store.remove("A_KEY") is False
    assert store.names() == ["B_KEY"]
    with pytest.raises(SecretStoreError, match="no secret named A_KEY"):
        store.get("A_KEY")
    assert mode(tmp_path / "secrets") == 0o700
    for f in (tmp_path / "secrets").rglob("*"):
        if f.is_file():
            assert mode(f) == 0o600, f
        else:
            assert mode(f) == 0o700, f


@pytest.mark.parametrize("kind", ["systemd-creds", "encrypted-file"])
def test_value_is_not_stored_in_the_clear(tmp_path, kind):
    store = make(kind, tmp_path)
    store.set("TOKEN", b"canary-6f1d2c-plaintext-must-not-appear")
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert b"canary-6f1d2c" not in f.read_bytes()


def test_plaintext_store_is_only_encoding(tmp_path):
    store = PlaintextStore(tmp_path)
    store.set("TOKEN", b"visible")
    assert b"visible" not in store.path.read_bytes()  # base64, still not encryption
    assert mode(store.path) == 0o600


def test_invalid_names_refused(tmp_path):
    store = EncryptedFileStore(tmp_path)
    for bad in ["../x", "A/B", "", "1X"]:
        with pytest.raises(ValueError):
            store.set(bad, b"v")


# ---- corrupt stores: clear error, never overwritten ------------------------------------------


def test_corrupt_encrypted_store_is_an_error_and_left_untouched(tmp_path):
    store = EncryptedFileStore(tmp_path)
    store.set("KEEP", b"precious")
    data = bytearray(store.path.read_bytes())
    data[-5] ^= 0xFF
    store.path.write_bytes(bytes(data))
    before = store.path.read_bytes()
    with pytest.raises(SecretStoreError, match="failed authentication"):
        store.get("KEEP")
    with pytest.raises(SecretStoreError):
        store.set("NEW", b"x")
    with pytest.raises(SecretStoreError):
        store.remove("KEEP")
    assert store.path.read_bytes() == before


def test_bad_header_is_an_error(tmp_path):
    store = EncryptedFileStore(tmp_path)
    store.set("KEEP", b"precious")
    store.path.write_bytes(b"garbage")
    with pytest.raises(SecretStoreError, match="bad header"):
        store.names()
    assert store.path.read_bytes() == b"garbage"


def test_missing_key_never_mints_a_new_one(tmp_path):
    store = EncryptedFileStore(tmp_path)
    store.set("KEEP", b"precious")
    store.key_path.unlink()
    with pytest.raises(SecretStoreError, match="missing"):
        store.set("OTHER", b"x")
    assert not store.key_path.exists()


def test_wrong_key_is_an_error(tmp_path):
    store = EncryptedFileStore(tmp_path)
    store.set("KEEP", b"precious")
    store.key_path.write_bytes(os.urandom(32))
    with pytest.raises(SecretStoreError, match="not its key"):
        store.get("KEEP")


def test_key_readable_by_others_is_refused(tmp_path):
    store = EncryptedFileStore(tmp_path)
    store.set("KEEP", b"precious")
    os.chmod(store.key_path, 0o644)
    with pytest.raises(SecretStoreError, match="chmod 600"):
        store.get("KEEP")


def test_corrupt_plaintext_store_left_untouched(tmp_path):
    store = PlaintextStore(tmp_path)
    store.set("KEEP", b"v")
    store.path.write_text("{not json")
    with pytest.raises(SecretStoreError, match="corrupt"):
        store.set("NEW", b"x")
    assert store.path.read_text() == "{not json"


# ---- systemd-creds specifics ------------------------------------------------------------------


@needs_creds
def test_value_travels_on_stdin_never_in_argv(tmp_path):
    log = tmp_path / "argv.log"
    wrapper = tmp_path / "creds-wrapper"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {log}\nexec systemd-creds "$@"\n')
    wrapper.chmod(0o700)
    store = SystemdCredsStore(tmp_path / "s", tool=str(wrapper))
    store.set("TOKEN", b"argv-canary-91f3")
    assert store.get("TOKEN") == b"argv-canary-91f3"
    logged = log.read_text()
    assert "--with-key=host" in logged and "--name=TOKEN" in logged
    assert "argv-canary" not in logged


@needs_creds
def test_renamed_credential_refuses_to_decrypt(tmp_path):
    store = SystemdCredsStore(tmp_path)
    store.set("REAL", b"value")
    (store.creds_dir / "REAL.cred").rename(store.creds_dir / "OTHER.cred")
    with pytest.raises(SecretStoreError, match="decrypt of OTHER failed"):
        store.get("OTHER")


def test_missing_tool_is_unavailable_with_the_fix(tmp_path):
    store = SystemdCredsStore(tmp_path, tool="systemd-creds-not-installed")
    with pytest.raises(StoreUnavailable) as info:
        store.check_available()
    assert "apt-get install systemd" in info.value.fix
    with pytest.raises(StoreUnavailable):
        store.set("X", b"v")


# ---- choosing a backend ------------------------------------------------------------------------


def test_auto_picks_the_strongest_available_and_says_so(tmp_path):
    choice = open_store(tmp_path, "auto")
    expected = "systemd-creds" if systemd_creds_works() else "encrypted-file"
    assert choice.backend == expected
    assert choice.store.backend == expected
    assert choice.reason.startswith("strongest available")
    assert choice.warning is None


def test_auto_keeps_the_backend_that_holds_secrets(tmp_path):
    EncryptedFileStore(tmp_path).set("K", b"v")
    choice = open_store(tmp_path, "auto")
    assert choice.backend == "encrypted-file"
    assert "already holds" in choice.reason


def test_plaintext_needs_opt_in_and_warns(tmp_path):
    with pytest.raises(SecretStoreError, match="opt-in"):
        open_store(tmp_path, "plaintext")
    choice = open_store(tmp_path, "plaintext", allow_plaintext=True)
    assert choice.backend == "plaintext"
    assert choice.warning and "UNENCRYPTED" in choice.warning


def test_auto_never_reads_plaintext_without_opt_in(tmp_path):
    PlaintextStore(tmp_path).set("K", b"v")
    with pytest.raises(SecretStoreError, match="allow_plaintext"):
        open_store(tmp_path, "auto")
    choice = open_store(tmp_path, "auto", allow_plaintext=True)
    assert choice.backend == "plaintext" and choice.warning


def test_unknown_and_foreign_backends(tmp_path):
    with pytest.raises(SecretStoreError, match="unknown secret backend"):
        open_store(tmp_path, "vault")
    with pytest.raises(StoreUnavailable, match="macOS"):
        open_store(tmp_path, "keychain")
