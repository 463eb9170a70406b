"""Errors of the secret store and staging; both are AgentcageErrors so the CLI prints one line."""

from __future__ import annotations

from agentcage.errors import AgentcageError


class SecretStoreError(AgentcageError):
    """A store could not be read or written; the message names the file and the fix."""


class StoreUnavailable(SecretStoreError):
    """A backend cannot work on this host; `fix` says what would make it work."""

    def __init__(self, backend: str, reason: str, fix: str):
        super().__init__(f"secret backend {backend} is unavailable: {reason}; fix: {fix}")
        self.backend, self.reason, self.fix = backend, reason, fix


class StagingError(AgentcageError):
    """Secrets could not be staged for the gateway (e.g. the target is not in memory)."""
