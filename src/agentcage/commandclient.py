"""`run`, `cage create`, `start`, `stop`, `restart` and `destroy` through the command server: the
client's side (the server: backends/commandserver.py, which says what its child takes of the
client and why; how a request is handed over and waited for: served.py, shared with `exec`).

These commands need the full CLI (click, rich, the cage services, pydantic's cage.yaml model),
whose imports are a good part of what each costs. The command server has them imported; the
client proves it, hands it the command line, its environment, its working directory (a
descriptor), its standard input, output and error and its controlling terminal (descriptors),
and waits: the server's child runs the command through the very code that runs it in-process,
and the client exits with its status.

Import-light (os, sys and the C cores of the signal and socket modules): what `exec` loads
(execclient.py), and this module.
"""

from __future__ import annotations

import os

from agentcage import served
from agentcage.execclient import ENV as EXEC_ENV

TYPE_CHECKING = False  # (typing.TYPE_CHECKING, without importing typing on this path)
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

ENV = "AGENTCAGE_COMMAND_SERVER"  # "off": these commands in-process (AGENTCAGE_EXEC_SERVER too)

# The command lines served, by their first words (their options are the CLI's to parse, in the
# server's child, as in-process); any other goes to the full CLI in the client's own process.
SERVED = (("run",), ("start",), ("stop",), ("restart",), ("destroy",), ("cage", "create"),
          ("cage", "start"), ("cage", "stop"), ("cage", "restart"), ("cage", "destroy"))

# Variables the interpreter reads once, as it starts (its locale and encodings, its own
# settings, pydantic-core's error format): a server serves only clients whose values are its
# own, as the rest of the environment is taken from the client at each command.
FIXED_PREFIXES = ("PYTHON", "LC_", "PYDANTIC_")
FIXED_NAMES = ("LANG",)


def serves(args: Sequence[str]) -> bool:
    """Whether the command line `args` (after `agentcage`) is one the command server serves."""
    return any(tuple(args[:len(form)]) == form for form in SERVED)


def fixed_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of `env` fixed at a process's start (FIXED_PREFIXES, FIXED_NAMES)."""
    return {name: value for name, value in env.items()
            if name.startswith(FIXED_PREFIXES) or name in FIXED_NAMES}


class Place(served.Place):
    """Where the command server of one state root, installation and context lives."""

    WHAT = "command server"
    DIRECTORY = "commands"
    MODULE = "agentcage.backends.commandserver"
    VERSION = b"agentcage-command/1"
    SWITCHES = (EXEC_ENV, ENV)

    def context(self) -> str:
        # a client whose fixed environment differs finds a server of its own
        return repr(sorted(fixed_environment(os.environ).items()))


# A request: NUL-separated fields (no argument or variable can hold a NUL): the version; "T"
# when the client's controlling terminal is handed over (a fifth descriptor), else "-"; the
# number of arguments; the arguments; the environment's NAME=VALUE entries. Descriptors: the
# client's standard input, output and error, its working directory (O_PATH), its terminal.

def request(args: Sequence[str], terminal: bool) -> bytes:
    fields = [Place.VERSION, b"T" if terminal else b"-", str(len(args)).encode(),
              *(os.fsencode(a) for a in args),
              *(os.fsencode(name) + b"=" + os.fsencode(value)
                for name, value in os.environ.items())]
    return b"\0".join(fields)


def run(place: Place, args: Sequence[str]) -> int | None:
    """The exit status of `agentcage ARGS...` run by the command server; AgentcageError or an
    interrupt that stopped it outside the CLI's own reporting; None if no server could take it
    (Absent if there is none): the caller runs it in-process."""
    try:
        for fd in (0, 1, 2):  # each open (else the next descriptor opened would take its place)
            os.fstat(fd)
        # the working directory itself: never a path the server would resolve again
        handed = [os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)]
    except OSError:
        return None
    try:  # noqa: SIM105  (contextlib is not imported on this path)
        # the controlling terminal, where a hidden prompt is shown (as getpass shows it on
        # /dev/tty): the server's child has none of its own
        handed.append(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC))
    except OSError:  # none (a job without a terminal)
        pass
    try:
        return served.hand_over(place, request(args, len(handed) == 2), [0, 1, 2, *handed])
    finally:
        for fd in handed:
            os.close(fd)


def start(place: Place) -> None:
    """Start a command server for `place` in the background, with only PATH and the fixed
    environment of this process: each command takes the rest of its client's."""
    env = {"PATH": os.environ.get("PATH", os.defpath), **fixed_environment(os.environ)}
    served.start(place, env)


def stop(root: str) -> list[int]:
    """Stop this state root's command servers; their pids."""
    return served.stop(root, Place)
