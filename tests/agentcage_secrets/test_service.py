from __future__ import annotations

import io
import os

import pytest

from agentcage.secrets import PlaceholderBook, rule_from_config
from agentcage.secrets.filestore import EncryptedFileStore
from agentcage.secrets.service import (
    cage_environment,
    list_secrets,
    read_value,
    remove_secret,
    rotate_placeholders,
    set_secret,
)


class Pipe(io.BytesIO):
    def isatty(self) -> bool:
        return False


@pytest.mark.parametrize(
    ("raw", "value"), [(b"abc\n", b"abc"), (b"abc\r\n", b"abc"), (b"a b\n\n", b"a b\n")]
)
def test_read_value_from_stdin(raw, value):
    assert read_value(Pipe(raw)) == value


def test_read_value_refuses_empty():
    with pytest.raises(ValueError, match="empty"):
        read_value(Pipe(b"\n"))


def test_set_list_rotate_remove_never_show_values(tmp_path):
    store, book = EncryptedFileStore(tmp_path), PlaceholderBook(tmp_path)
    canary = b"list-canary-" + os.urandom(8).hex().encode()
    rules = [
        rule_from_config({"env": "API_KEY", "inject_to": ["api.example.test"]}),
        rule_from_config({"env": "DECLARED", "inject_to": ["x.example.test"], "inject_body": True}),
    ]
    ph = set_secret(store, book, "API_KEY", canary)
    assert set_secret(store, book, "API_KEY", canary + b"2") == ph  # stable across updates
    set_secret(store, book, "UNBOUND", b"v")
    entries = {e.name: e for e in list_secrets(store, book, rules)}
    assert set(entries) == {"API_KEY", "DECLARED", "UNBOUND"}
    assert entries["API_KEY"].placeholder == str(ph)
    assert entries["API_KEY"].inject_to == ("api.example.test",)
    assert not entries["DECLARED"].stored and entries["DECLARED"].inject_body
    assert entries["UNBOUND"].inject_to == ()
    assert canary.decode() not in repr(entries)
    env = cage_environment(book, rules)
    assert env["API_KEY"] == str(ph) and env["DECLARED"].startswith("agentcage:secret:DECLARED:")
    (rotation,) = rotate_placeholders(book, ["API_KEY"])
    assert rotation.old == ph and cage_environment(book, rules)["API_KEY"] == str(rotation.new)
    with pytest.raises(ValueError, match="set the secret first"):
        rotate_placeholders(book, ["NOPE"])
    assert remove_secret(store, book, "API_KEY") and "API_KEY" not in store.names()
    assert "API_KEY" not in book.load()
