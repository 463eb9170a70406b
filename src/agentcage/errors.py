"""The project's exception tree: the CLI catches only `AgentcageError` and prints one line."""

from __future__ import annotations


class AgentcageError(Exception):
    """Base of every error the CLI reports as one line with exit code 1."""


class ConfigError(AgentcageError):
    """cage.yaml (or a domain pattern) is invalid; the message lists one problem per line."""


class StateError(AgentcageError):
    """The per-cage state directory is missing, unreadable or inconsistent."""


class BackendError(AgentcageError):
    """A sandbox layer could not be applied; the cage refuses to start."""


class HostCheckError(BackendError):
    """The host lacks something the cage needs (see `agentcage doctor`)."""
