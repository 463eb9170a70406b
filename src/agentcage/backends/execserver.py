"""The exec server: a resident process that has loaded what `exec` and `shell` run, and runs
each of them for a tiny client (execclient.py), so that no command into a cage pays for the
CLI's imports (most of what one costs). What a resident server is, how it runs a request and
what keeps it safe: resident.py; this module says what an exec request is.

`python -m agentcage.backends.execserver --root DIR --key KEY`, started in the background by
the first `exec` or `shell` that found none (that one runs in-process), with that command's
environment, in the state root's `exec/`.

A request names a cage and a command, carries TERM and the client's standard input, output and
error as descriptors. The session takes those descriptors as its own 0, 1 and 2 and the
client's TERM, and runs exactly what `exec` runs in-process (lean.run: the same checks of the
cage and its gateway, the same sandbox, proof and terminal handling). Only the environment is
the server's, and the sandbox gets none of it but TERM, which is the client's.
"""

from __future__ import annotations

import os
import sys

from agentcage import execclient, lean, served
from agentcage.backends import resident
from agentcage.names import NAME_RE


class Request:
    """A parsed request: the cage, the command (None: a shell), TERM (None: unset)."""

    def __init__(self, data: bytes):
        fields = data.split(b"\0")
        if len(fields) < 4 or fields[0] != execclient.Place.VERSION:
            raise ValueError("not a request of this version")
        self.name = fields[1].decode()
        if not NAME_RE.match(self.name):
            raise ValueError("not a cage name")
        term, kind = fields[2], fields[3]
        self.term = None if term == b"-" else os.fsdecode(term[1:])
        if kind == b"S" and len(fields) == 4:
            self.command: list[str] | None = None
        elif kind == b"C" and len(fields) > 4:
            self.command = [os.fsdecode(a) for a in fields[4:]]
        else:
            raise ValueError("neither a command nor a shell")


class ExecService:
    PLACE: type[served.Place] = execclient.Place
    DESCRIPTORS: int = 3  # the client's standard input, output and error

    def preload(self) -> None:
        import agentcage.backends.credmasks
        import agentcage.backends.layers
        import agentcage.backends.lentpython
        import agentcage.backends.terminal
        import agentcage.backends.volumes
        import agentcage.backends.workload
        import agentcage.secrets.cage
        import agentcage.seeds
        import agentcage.state  # noqa: F401

    def parse(self, data: bytes, fds: list[int]) -> Request:
        if len(fds) != self.DESCRIPTORS:
            raise ValueError("a request hands over three descriptors")
        return Request(data)

    def refusal(self, request: Request, fds: list[int]) -> str | None:
        return None

    def begin(self, request: Request, fds: list[int]) -> None:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        if request.term is None:
            os.environ.pop("TERM", None)
        else:
            os.environ["TERM"] = request.term

    def work(self, request: Request) -> int:
        return lean.run(request.name, request.command)


def main(argv: list[str] | None = None) -> int:
    return resident.main(ExecService(), argv)


if __name__ == "__main__":
    sys.exit(main())
