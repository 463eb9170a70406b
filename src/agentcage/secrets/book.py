"""The placeholder book: which placeholder stands for which secret name, per cage.

Placeholders are not secret (the cage sees them), but they are kept 0600 next to the store
anyway. A placeholder is stable: setting a new value keeps it, so a running cage's environment
stays valid; only `rotate` mints new ones, after which the old ones map to nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from agentcage.secrets import placeholders
from agentcage.secrets.errors import SecretStoreError
from agentcage.secrets.placeholders import Placeholder
from agentcage.state import atomic_write, ensure_private_dir

BOOK_VERSION = 1


@dataclass(frozen=True)
class Rotation:
    name: str
    old: Placeholder | None
    new: Placeholder


class PlaceholderBook:
    def __init__(self, root: Path):
        self.root = root

    @property
    def path(self) -> Path:
        return self.root / "placeholders.json"

    def load(self) -> dict[str, Placeholder]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise SecretStoreError(f"{self.path} is unreadable ({e}); left untouched") from None
        try:
            if doc["version"] != BOOK_VERSION:
                raise ValueError(f"version {doc['version']!r}")
            book = {name: placeholders.parse(text) for name, text in doc["placeholders"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise SecretStoreError(f"{self.path} is corrupt ({e}); left untouched") from None
        for name, ph in book.items():
            if ph.env != name:
                raise SecretStoreError(f"{self.path}: entry {name} holds a placeholder of {ph.env}")
        return book

    def _save(self, book: dict[str, Placeholder]) -> None:
        ensure_private_dir(self.root)
        doc = {"version": BOOK_VERSION, "placeholders": {k: str(v) for k, v in book.items()}}
        atomic_write(self.path, json.dumps(doc, indent=2, sort_keys=True) + "\n")

    def ensure(self, name: str) -> Placeholder:
        """The placeholder of `name`, minted on first use and stable afterwards."""
        book = self.load()
        if name not in book:
            book[name] = placeholders.mint(name)
            self._save(book)
        return book[name]

    def rotate(self, names: Iterable[str] | None = None) -> list[Rotation]:
        """New placeholders for `names` (all when None); the old ones stop mapping."""
        book = self.load()
        chosen = sorted(book) if names is None else list(names)
        rotations = [Rotation(n, book.get(n), placeholders.mint(n)) for n in chosen]
        for r in rotations:
            book[r.name] = r.new
        self._save(book)
        return rotations

    def retain(self, names: Iterable[str]) -> None:
        """Only the placeholders of `names` stay (the stored secrets)."""
        wanted, book = set(names), self.load()
        kept = {n: ph for n, ph in book.items() if n in wanted}
        if kept != book:
            self._save(kept)

    def drop(self, name: str) -> bool:
        book = self.load()
        if book.pop(name, None) is None:
            return False
        self._save(book)
        return True
