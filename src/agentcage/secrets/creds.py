"""The systemd-creds backend: one credential file per secret, sealed with the host key.

Runs the standalone tool (`systemd-creds encrypt --with-key=host --name=NAME - -`): the value
goes in on stdin and the ciphertext comes back on stdout, so it is never in argv or a temporary
file. The embedded name binds a ciphertext to its secret: a renamed file refuses to decrypt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from agentcage.secrets.errors import SecretStoreError, StoreUnavailable
from agentcage.secrets.placeholders import check_env_name
from agentcage.secrets.store import Backend
from agentcage.state import atomic_write, ensure_private_dir

TOOL = "systemd-creds"
SUFFIX = ".cred"
_TIMEOUT = 30
_INSTALL_FIX = "apt-get install systemd (it provides /usr/bin/systemd-creds)"


class SystemdCredsStore:
    backend: Backend = "systemd-creds"

    def __init__(self, root: Path, tool: str = TOOL):
        self.root = root
        self.tool = tool

    @property
    def creds_dir(self) -> Path:
        return self.root / "creds"

    def _path(self, name: str) -> Path:
        return self.creds_dir / f"{check_env_name(name)}{SUFFIX}"

    def _run(self, verb: str, name: str, data: bytes) -> bytes:
        binary = shutil.which(self.tool)
        if binary is None:
            raise StoreUnavailable(self.backend, f"{self.tool} not found", _INSTALL_FIX)
        argv = [binary, verb, f"--name={name}", "-", "-"]
        if verb == "encrypt":
            argv.insert(2, "--with-key=host")
        try:
            done = subprocess.run(argv, input=data, capture_output=True, timeout=_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SecretStoreError(f"{self.tool} {verb} failed: {type(e).__name__}") from None
        if done.returncode != 0:
            # stderr never holds the plaintext: the value only travels on stdin.
            detail = " ".join(
                line
                for line in done.stderr.decode(errors="replace").splitlines()
                if "not located on encrypted media" not in line
            ).strip()
            why = detail or f"exit {done.returncode}"
            raise SecretStoreError(f"{self.tool} {verb} of {name} failed: {why}")
        return done.stdout

    def check_available(self) -> None:
        """Encrypt and decrypt a random probe; raise StoreUnavailable with the fix."""
        if shutil.which(self.tool) is None:
            raise StoreUnavailable(self.backend, f"{self.tool} not found", _INSTALL_FIX)
        probe = os.urandom(16)
        try:
            sealed = self._run("encrypt", "agentcage-probe", probe)
            opened = self._run("decrypt", "agentcage-probe", sealed)
        except SecretStoreError as e:
            raise StoreUnavailable(
                self.backend,
                str(e),
                "run as root (the host key /var/lib/systemd/credential.secret is root-only) "
                "or choose backend encrypted-file",
            ) from None
        if opened != probe:
            raise StoreUnavailable(self.backend, "probe did not round-trip", "reinstall systemd")

    def set(self, name: str, value: bytes) -> None:
        path = self._path(name)
        sealed = self._run("encrypt", name, bytes(value))
        ensure_private_dir(self.root)
        ensure_private_dir(self.creds_dir)
        atomic_write(path, sealed)

    def get(self, name: str) -> bytes:
        path = self._path(name)
        try:
            sealed = path.read_bytes()
        except FileNotFoundError:
            raise SecretStoreError(f"no secret named {name}") from None
        return self._run("decrypt", name, sealed)

    def names(self) -> list[str]:
        if not self.creds_dir.is_dir():
            return []
        return sorted(p.name[: -len(SUFFIX)] for p in self.creds_dir.glob(f"*{SUFFIX}"))

    def remove(self, name: str) -> bool:
        try:
            self._path(name).unlink()
        except FileNotFoundError:
            return False
        return True

    def has_data(self) -> bool:
        return bool(self.names())
