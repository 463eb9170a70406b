"""The command server: a resident process that has imported the full CLI (click, rich, the cage
services and backend, pydantic's cage.yaml model) and runs `run`, `cage create`, `start`,
`stop`, `restart` and `destroy` for a tiny client (commandclient.py), so that none of them pays
for those imports. What a resident server is, how it runs a request and what keeps it safe:
resident.py; this module says what a command's request is and what of the client its child
takes.

`python -m agentcage.backends.commandserver --root DIR --key KEY`, started in the background by
the first such command that found none (that one runs in-process), in the state root's
`commands/`, with PATH and the client's fixed environment only (`commandclient.start`).

The session (the child forked for a request) is the client's command, run by the code that
runs it in-process (`lean.full_command`: the gateway zygote warmed, then the CLI's `main`, its
parser, its reporting of errors and interrupts, its exit code). Of the client it takes:
- its standard input, output and error (the descriptors: a pipe, a file, a terminal), as 0, 1
  and 2, with Python's streams on them made as a starting interpreter makes them (a terminal's
  stdout line-buffered, a pipe's not);
- its working directory, as a descriptor (fchdir): `run` makes the project of the directory
  the person is in, never of a path resolved again here;
- its whole environment, as its own: the CLI reads AGENTCAGE_HOME, HOME, PATH, TERM, COLUMNS,
  NO_COLOR, FORCE_COLOR, SUDO_UID, TMPDIR, AGENTCAGE_DEBUG and AGENTCAGE_ZYGOTE, rich and click
  more, and a program it starts (ip, nft, bwrap, podman, systemd-creds) inherits it, as
  in-process; the cage's own environment is built, never inherited, as ever. What the
  interpreter fixed as it started (its locale, PYTHON* settings, pydantic-core's PYDANTIC_*)
  cannot be taken: a client whose values differ is refused (its key finds a server of its
  own). AGENTCAGE_HOME must name this server's state root (resolved as the client resolves
  it): a client of another state root is refused, never served on this one;
- its argv (the command line after `agentcage`);
- its controlling terminal, when it has one, for a hidden prompt (`run -s KEY` asking for a
  key): the child is in the server's session, which has no terminal, so getpass cannot open
  /dev/tty; it turns off the echo of the terminal on stdin and reads the key there, as
  in-process, showing the prompt on the client's terminal. The key is typed into the
  terminal, never echoed, and is never on a command line or in an environment;
- its umask, cgroups, limits, ids and the rest of its process state are already the server's
  (resident.py refuses a client whose state differs).
A command's Ctrl-C before the agent runs is the CLI's "interrupted" (130), its SIGTERM
"terminated" (143), the client's death a hang-up (129): the run's cage is removed as
in-process. The session ends as an interpreter ends (its threads joined, its exit handlers
run: those the server registered before the fork are the server's, dropped in the session).
"""

from __future__ import annotations

import atexit
import importlib
import io
import os
import stat
import sys
import tempfile
import time

from agentcage import commandclient, lean, served
from agentcage.backends import resident
from agentcage.home import HOME_ENV, state_directory


class Request:
    """A parsed request: the command line, the environment, and whether the client's
    terminal was handed over (the fifth descriptor)."""

    def __init__(self, data: bytes, fds: list[int]):
        fields = data.split(b"\0")
        if len(fields) < 3 or fields[0] != commandclient.Place.VERSION:
            raise ValueError("not a request of this version")
        if fields[1] not in (b"T", b"-"):
            raise ValueError("no terminal field")
        self.terminal = fields[1] == b"T"
        if len(fds) != 4 + self.terminal:
            raise ValueError("a request hands over its stdio, its directory and its terminal")
        count = int(fields[2])
        if not 0 <= count <= len(fields) - 3:
            raise ValueError("a wrong count of arguments")
        self.args = [os.fsdecode(a) for a in fields[3:3 + count]]
        self.env: dict[str, str] = {}
        for entry in fields[3 + count:]:
            name, equals, value = entry.partition(b"=")
            if not name or not equals:
                raise ValueError("an environment entry without a name")
            self.env[os.fsdecode(name)] = os.fsdecode(value)
        if not stat.S_ISDIR(os.fstat(fds[3]).st_mode):
            raise ValueError("the working directory is no directory")
        if self.terminal and not os.isatty(fds[4]):
            raise ValueError("the terminal is no terminal")


# What these commands import in-process, beyond the lean path: the server imports it all once (a
# session that imports more pays for it; the commands of bench/cage_startup.py import nothing
# more). rich's Console is made in a session, when it prints.
PRELOAD = (
    "difflib",  # click's suggestions
    "encodings.idna",  # a domain's IDNA form (with stringprep and unicodedata: ≈ 3 ms)
    "mitmproxy.version",  # the host check's (the version alone, no addon)
    "rich.console",
    "agentcage.backends.cgroups", "agentcage.backends.credmasks", "agentcage.backends.volumes",
    "agentcage.backends.namespace", "agentcage.backends.profile", "agentcage.backends.terminal",
    "agentcage.backends.workload", "agentcage.backends.zygote", "agentcage.cages",
    "agentcage.checks", "agentcage.cli", "agentcage.config.forms", "agentcage.config.load",
    "agentcage.config.overrides", "agentcage.config.scaffolds", "agentcage.gateway.proxy",
    "agentcage.runs", "agentcage.secrets.cage", "agentcage.secrets.creds",
    "agentcage.secrets.filestore", "agentcage.secrets.service", "agentcage.seeds",
    "agentcage.state",
    "agentsec.probe.blast_probe",  # the credential files' catalogue
)


class CommandService:
    PLACE: type[served.Place] = commandclient.Place
    DESCRIPTORS: int = 5  # stdin, stdout, stderr, the working directory, the terminal

    def __init__(self) -> None:
        self.fixed = commandclient.fixed_environment(os.environ)  # as this process started
        self.terminal: int | None = None  # in a session: the client's, if handed over

    def preload(self) -> None:
        for name in PRELOAD:
            importlib.import_module(name)

    def parse(self, data: bytes, fds: list[int]) -> Request:
        return Request(data, fds)

    def refusal(self, request: Request, fds: list[int]) -> str | None:
        if not commandclient.serves(request.args):
            return "not a command this server serves"
        if commandclient.fixed_environment(request.env) != self.fixed:
            return "the client's locale or interpreter settings are not the server's"
        cwd = os.readlink(f"/proc/self/fd/{fds[3]}")
        root = os.path.normpath(os.path.join(cwd, state_directory(request.env)))
        if root != os.environ[HOME_ENV]:
            return f"the client's state root is {root}, not this server's"
        return None

    def begin(self, request: Request, fds: list[int]) -> None:
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
            os.close(fd)
        os.fchdir(fds[3])
        os.close(fds[3])
        self.terminal = fds[4] if request.terminal else None  # kept: the prompt's
        if self.terminal is not None:
            os.set_inheritable(self.terminal, False)
        root = os.environ[HOME_ENV]
        os.environ.clear()
        os.environ.update(request.env)
        os.environ[HOME_ENV] = root  # the same directory (checked), as the server names it
        time.tzset()
        tempfile.tempdir = None  # found again from the client's TMPDIR
        sys.argv = ["agentcage", *request.args]
        _fresh_streams()
        atexit._clear()  # the server's exit handlers are not the session's

    def work(self, request: Request) -> int:
        code = lean.full_command(request.args, self.terminal)
        # as an interpreter ends: its threads joined, then its exit handlers
        import threading

        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
        return code


def _fresh_streams() -> None:
    """sys.stdin, stdout and stderr on the client's descriptors, as a starting interpreter
    makes them (the server's were made for /dev/null and its log): stdout line-buffered on a
    terminal, stderr always, both unbuffered under -u or PYTHONUNBUFFERED; the encodings and
    error handlers the same (the fixed environment is the client's)."""
    assert sys.__stdout__ is not None
    buffered = not sys.__stdout__.write_through  # (-u is in no sys.flags: as the server's)
    made = []
    for fd, old, mode in ((0, sys.__stdin__, "r"), (1, sys.__stdout__, "w"),
                          (2, sys.__stderr__, "w")):
        assert old is not None
        raw = not buffered and mode == "w"
        binary = open(fd, mode + "b", buffering=0 if raw else -1,  # noqa: SIM115  (for good)
                      closefd=False)
        made.append(io.TextIOWrapper(binary, encoding=old.encoding, errors=old.errors,
                                     line_buffering=buffered and (fd == 2 or (fd == 1 and
                                                                              os.isatty(1))),
                                     write_through=not buffered))
    sys.stdin, sys.stdout, sys.stderr = made
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = made  # type: ignore[misc]


def main(argv: list[str] | None = None) -> int:
    return resident.main(CommandService(), argv)


if __name__ == "__main__":
    sys.exit(main())
