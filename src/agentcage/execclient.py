"""`exec` and `shell` through the exec server: the client's side (the server:
backends/execserver.py, which says what it is and why it is safe; how a served command is
handed over and waited for: served.py, shared with the command server).

The client proves the server, hands it the cage's name, the command, TERM and its standard
input, output and error (the descriptors themselves), and waits for the outcome. No server,
one that fails a check or refuses the client: None, and the caller runs the command itself.

Import-light (os, sys, signal and the socket module's C core): this is all `exec` loads
before the command runs.
"""

from __future__ import annotations

import os

from agentcage import served
from agentcage.served import Absent, connect

__all__ = ["ENV", "Absent", "Place", "connect", "request", "run", "start", "stop"]

ENV = "AGENTCAGE_EXEC_SERVER"  # "off": every exec, shell and served command in-process


class Place(served.Place):
    """Where the exec server of one state root and installation lives."""

    WHAT = "exec server"
    DIRECTORY = "exec"
    MODULE = "agentcage.backends.execserver"
    VERSION = b"agentcage-exec/1"
    SWITCHES = (ENV,)


def request(name: str, command: list[str] | None) -> bytes:
    """The request: fields separated by NUL (no argument can hold one), the command's
    arguments as the bytes they were given."""
    term = os.environ.get("TERM")
    fields = [Place.VERSION, name.encode(), b"-" if term is None else b"T" + os.fsencode(term),
              b"S" if command is None else b"C", *(os.fsencode(a) for a in command or ())]
    return b"\0".join(fields)


def run(place: Place, name: str, command: list[str] | None) -> int | None:
    """The exit status of `command` (None: `shell`) run by the server in cage `name`;
    AgentcageError or the interrupt that stopped it, as the command in-process raises them;
    None if no server could take it (Absent if there is none)."""
    return served.hand_over(place, request(name, command), [0, 1, 2])


def stop(root: str) -> list[int]:
    """Stop this state root's exec servers; their pids."""
    return served.stop(root, Place)


def start(place: Place) -> None:
    """Start an exec server for `place` in the background, with this process's environment
    (see served.start)."""
    served.start(place)
