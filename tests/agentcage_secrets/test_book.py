from __future__ import annotations

import stat

import pytest

from agentcage.domains import parse_pattern
from agentcage.secrets import (
    InjectionRule,
    Injector,
    PlaceholderBook,
    SecretStoreError,
    StagedSecret,
)


def test_placeholder_is_stable_until_rotated(tmp_path):
    book = PlaceholderBook(tmp_path)
    first = book.ensure("TOKEN")
    assert book.ensure("TOKEN") == first
    assert PlaceholderBook(tmp_path).load() == {"TOKEN": first}
    assert stat.S_IMODE(book.path.stat().st_mode) == 0o600
    (rotation,) = book.rotate(["TOKEN"])
    assert rotation.old == first and rotation.new != first
    assert book.ensure("TOKEN") == rotation.new


def test_rotate_all_and_drop(tmp_path):
    book = PlaceholderBook(tmp_path)
    a, b = book.ensure("A"), book.ensure("B")
    rotated = {r.name: r for r in book.rotate()}
    assert set(rotated) == {"A", "B"}
    assert rotated["A"].old == a and rotated["B"].old == b
    assert book.drop("A") and not book.drop("A")
    assert set(book.load()) == {"B"}


def test_rotation_old_placeholder_no_longer_maps_new_one_does(tmp_path):
    book = PlaceholderBook(tmp_path)
    rule = InjectionRule("TOKEN", (parse_pattern("api.example.test"),))
    old = book.ensure("TOKEN")
    new = book.rotate(["TOKEN"])[0].new
    # What the gateway builds after the CLI re-staged: only the current placeholder is known.
    injector = Injector([rule], [StagedSecret("TOKEN", book.load()["TOKEN"], b"real-value")])
    done = injector.inject_headers("api.example.test", [("Authorization", f"Bearer {old}")])
    assert done.value == (("Authorization", f"Bearer {old}"),) and done.injected == ()
    done = injector.inject_headers("api.example.test", [("Authorization", f"Bearer {new}")])
    assert done.value == (("Authorization", "Bearer real-value"),)
    assert done.injected == ("TOKEN",)


def test_corrupt_book_is_an_error_and_kept(tmp_path):
    book = PlaceholderBook(tmp_path)
    book.ensure("A")
    book.path.write_text(
        '{"version": 1, "placeholders": {"A": "agentcage:secret:B:' + "0" * 32 + '"}}'
    )
    before = book.path.read_text()
    with pytest.raises(SecretStoreError):
        book.ensure("C")
    assert book.path.read_text() == before
