"""File backends: one file holding every secret of a cage, AES-256-GCM sealed or (opt-in) plain.

The encrypted store is `secrets.enc` next to a 0600 key file `secrets.key` (32 random bytes).
Every change is read-modify-write under a lock and lands with one atomic rename. A file that
cannot be read (bad magic, failed authentication, missing key) is an error and is never
overwritten: a new key or an empty store would silently destroy what was there.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
from pathlib import Path

from agentcage.secrets.errors import SecretStoreError, StoreUnavailable
from agentcage.secrets.placeholders import check_env_name
from agentcage.secrets.store import Backend
from agentcage.state import atomic_write, ensure_private_dir, locked_dir

FORMAT_VERSION = 1
MAGIC = b"AGCSTOR1"
AAD = b"agentcage secret store v1"
KEY_BYTES = 32
NONCE_BYTES = 12


def _encode_map(values: dict[str, bytes]) -> bytes:
    doc = {
        "version": FORMAT_VERSION,
        "secrets": {k: base64.b64encode(v).decode() for k, v in sorted(values.items())},
    }
    return json.dumps(doc, sort_keys=True).encode()


def _decode_map(blob: bytes, where: Path) -> dict[str, bytes]:
    try:
        doc = json.loads(blob)
        if doc.get("version") != FORMAT_VERSION:
            raise ValueError(f"unsupported version {doc.get('version')!r}")
        return {
            check_env_name(k): base64.b64decode(v, validate=True) for k, v in doc["secrets"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as e:
        raise SecretStoreError(
            f"{where} is corrupt ({type(e).__name__}); left untouched, restore it from a backup"
        ) from None


class _MapFileStore:
    """Shared read-modify-write of a name→value map kept in one file."""

    backend: Backend = "plaintext"
    file_name = "secrets.plain.json"

    def __init__(self, root: Path):
        self.root = root

    @property
    def path(self) -> Path:
        return self.root / self.file_name

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return locked_dir(self.root)

    def _seal(self, plain: bytes) -> bytes:
        return plain

    def _open(self, sealed: bytes) -> bytes:
        return sealed

    def _load(self) -> dict[str, bytes]:
        try:
            sealed = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise SecretStoreError(f"cannot read {self.path}: {e.strerror}") from None
        return _decode_map(self._open(sealed), self.path)

    def _save(self, values: dict[str, bytes]) -> None:
        atomic_write(self.path, self._seal(_encode_map(values)))

    def set(self, name: str, value: bytes) -> None:
        check_env_name(name)
        with self._locked():
            values = self._load()
            values[name] = bytes(value)
            self._save(values)

    def get(self, name: str) -> bytes:
        values = self._load()
        if name not in values:
            raise SecretStoreError(f"no secret named {name}")
        return values[name]

    def names(self) -> list[str]:
        return sorted(self._load())

    def remove(self, name: str) -> bool:
        with self._locked():
            values = self._load()
            if values.pop(name, None) is None:
                return False
            self._save(values)
            return True

    def has_data(self) -> bool:
        return self.path.exists()


class PlaintextStore(_MapFileStore):
    """Values as base64 in a 0600 JSON file: encoding, not encryption. Opt-in only."""

    backend: Backend = "plaintext"
    file_name = "secrets.plain.json"


class EncryptedFileStore(_MapFileStore):
    backend: Backend = "encrypted-file"
    file_name = "secrets.enc"

    @property
    def key_path(self) -> Path:
        return self.root / "secrets.key"

    def check_available(self) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: F401
        except ImportError:
            raise StoreUnavailable(
                self.backend, "the cryptography package is missing", "pip install cryptography"
            ) from None

    def _key(self, create: bool) -> bytes:
        try:
            key = self.key_path.read_bytes()
        except FileNotFoundError:
            if self.path.exists() or not create:
                raise SecretStoreError(
                    f"{self.key_path} is missing, so {self.path} cannot be decrypted; restore the "
                    "key file from a backup (a new key would not open the existing store)"
                ) from None
            key = os.urandom(KEY_BYTES)
            ensure_private_dir(self.root)
            atomic_write(self.key_path, key, mode=0o600)
            return key
        if len(key) != KEY_BYTES:
            raise SecretStoreError(f"{self.key_path} is not a {KEY_BYTES}-byte key; restore it")
        if self.key_path.stat().st_mode & 0o077:
            raise SecretStoreError(f"{self.key_path} is readable by others; chmod 600 it")
        return key

    def _seal(self, plain: bytes) -> bytes:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = os.urandom(NONCE_BYTES)
        return MAGIC + nonce + AESGCM(self._key(create=True)).encrypt(nonce, plain, AAD)

    def _open(self, sealed: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if not sealed.startswith(MAGIC) or len(sealed) < len(MAGIC) + NONCE_BYTES + 16:
            raise SecretStoreError(
                f"{self.path} is not an agentcage secret store (bad header); left untouched"
            )
        nonce = sealed[len(MAGIC) : len(MAGIC) + NONCE_BYTES]
        try:
            return AESGCM(self._key(create=False)).decrypt(
                nonce, sealed[len(MAGIC) + NONCE_BYTES :], AAD
            )
        except InvalidTag:
            raise SecretStoreError(
                f"{self.path} failed authentication (corrupt, or {self.key_path} is not its key); "
                "left untouched, restore both from a backup"
            ) from None
