"""The `agentcage` entry point, and the lean path of the commands run most often.

`agentcage exec NAME -- COMMAND...` (and `cage exec`, `shell NAME`, `cage shell NAME`) into a
started cage needs the cage's state files and the workload launcher, nothing else: not click,
rich, pydantic or the cage services, whose imports cost several times what running the
sandboxed command does. So these plain forms are recognised here, before any of that is
imported, and run through the same code the full CLI runs (`workload.running_target` and
`workload.run`: the same checks, the same proof that the sandbox started, the same terminal
handling), with the same exit codes: the command's own status, 1 with one `error: ...` line
per message line on stderr, and an interrupt (Ctrl-C without a terminal, SIGTERM) ends it as
click ends any command. Errors are printed by the full CLI's own reporter, imported only
then, so a failure reads exactly as it does there.

`agentcage ls [--json]` (and `cage ls`) is answered here too, through listing.py, which the
full CLI prints with as well.

Anything else (an option, no `--`, a missing command, `--help`) is not parsed here at all: it
goes to the full CLI, which parses and reports it: `run`, `cage create`, `start`, `stop`,
`restart` and `destroy` in the command server's child when one can take them (commandclient.py,
backends/commandserver.py), else in this process, the same code either way (`full_command`). A
command that starts a cage gets one thing done first: the gateway zygote is started if none
runs (see `warm_zygote`).
"""

from __future__ import annotations

import os
import sys

from agentcage import rootless
from agentcage.errors import AgentcageError, StateError

TYPE_CHECKING = False  # (typing.TYPE_CHECKING, without importing typing on this path)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import NoReturn

    from agentcage.served import Place

SHELL = "shell"


def plain_form(args: Sequence[str]) -> tuple[str, list[str] | None] | None:
    """(cage name, command) for `[cage] exec NAME -- COMMAND...`, (cage name, None) for
    `[cage] shell NAME`; None for anything else (the full CLI's to parse)."""
    rest = list(args[1:]) if args[:1] == ["cage"] else list(args)
    if len(rest) < 2 or rest[0] not in ("exec", SHELL) or rest[1].startswith("-"):
        return None
    verb, name, tail = rest[0], rest[1], rest[2:]
    if verb == SHELL:
        return (name, None) if not tail else None
    if len(tail) >= 2 and tail[0] == "--":
        return name, tail[1:]
    return None


def listing_form(args: Sequence[str]) -> bool | None:
    """For `[cage] ls [--json]`: whether --json was given; None for anything else."""
    rest = list(args[1:]) if args[:1] == ["cage"] else list(args)
    if rest == ["ls"]:
        return False
    if rest == ["ls", "--json"]:
        return True
    return None


def list_cages(as_json: bool) -> int:
    """`agentcage ls`, through the listing the full CLI prints too (listing.py)."""
    from agentcage import listing
    from agentcage.state import StateStore

    found = listing.rows(StateStore())
    sys.stdout.write(listing.document(found) if as_json
                     else listing.text(found, listing.styled()))
    return 0


def execute(name: str, command: list[str] | None) -> int:
    """Run `command` (None: a shell) in the started cage `name`: through the exec server when
    one can take it (execclient.py), else here, starting a server for the next commands when
    there was none. The command's exit status; its error or interrupt raised as `run` raises
    them."""
    from agentcage import execclient
    from agentcage.home import state_directory

    place = execclient.Place(state_directory())
    code = through_server(place, lambda: execclient.run(place, name, command),
                          lambda: execclient.start(place))
    return run(name, command) if code is None else code


def through_server(place: Place, ask: Callable[[], int | None],
                   start: Callable[[], None]) -> int | None:
    """The exit status of a command `ask` had the resident server of `place` run (its error
    or interrupt raised); None when none could take it: the caller runs it in-process, and
    if there was no server, one is started for the next commands first (see served.start;
    best effort: this command runs all the same)."""
    if not place.usable():
        return None
    from agentcage.served import Absent

    try:
        return ask()
    except Absent:
        import contextlib
        import subprocess

        with contextlib.suppress(OSError, subprocess.SubprocessError):
            start()
        return None


def run(name: str, command: list[str] | None) -> int:
    """Run `command` (None: a shell) in the started cage `name`, in this process; the
    command's exit status."""
    from agentcage.backends import workload
    from agentcage.state import StateStore

    cage = StateStore().cage(name)  # refuses an invalid name
    if not cage.exists():
        raise StateError(f"no cage named {name!r}; see `agentcage ls`")
    interactive = sys.stdin.isatty()
    if command is None:  # as `shell`: interactive on a terminal, else commands from stdin
        command = ["/bin/sh", "-i"] if interactive else ["/bin/sh"]
    target = workload.running_target(cage)
    return workload.exit_status(workload.run(target, command, interactive,
                                             capture=False).returncode)


# Commands that start a cage's gateway (`cage create` unless --no-start; `update` may restart)
STARTING = (["run"], ["start"], ["restart"], ["cage", "create"], ["cage", "start"],
            ["cage", "restart"], ["cage", "update"])


# Of those, the ones whose next word is a cage's name: one that is no name starts nothing
NAMED = (["start"], ["restart"], ["cage", "start"], ["cage", "restart"], ["cage", "update"])


def starts_a_cage(args: Sequence[str]) -> bool:
    if any(a in ("-h", "--help", "--no-start") for a in args):
        return False
    for verb in NAMED:  # `start ../x` is refused by the CLI: no zygote for it
        if list(args[:len(verb)]) == verb:
            from agentcage.names import NAME_RE

            rest = args[len(verb):]
            return bool(rest) and NAME_RE.match(rest[0]) is not None
    return any(list(args[:len(verb)]) == verb for verb in STARTING)


def warm_zygote() -> bool:
    """Make sure the gateway zygote of the state root is up or starting, before the CLI is
    even imported: its imports then overlap all the CLI does before it needs a gateway (the
    first cage on a host waits for them). Best effort: the backend checks everything again
    when it asks for a gateway, and spawns one itself if it cannot use a zygote. True if this
    started one."""
    from agentcage.backends import zygote
    from agentcage.backends.gateways import gateway_environment
    from agentcage.state import state_root

    root = state_root()
    return zygote.usable(root) and zygote.Client(root, gateway_environment()).warm()


def unwarm_zygote() -> None:
    """After a failed command: the zygote `warm_zygote` started stops unless a gateway came of
    it (bad input, a cage that never got that far), rather than idle."""
    from agentcage.backends import zygote
    from agentcage.state import state_root

    zygote.release(state_root())


def main(argv: Sequence[str] | None = None) -> int:
    """`agentcage`: the lean path for the plain forms above, the command server or the full
    CLI for the rest."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        rootless.join_for(args)  # first: every process of a rootless cage starts inside
    except AgentcageError as e:
        from agentcage.cli import report

        return report(e)
    plain = plain_form(args)
    as_json = listing_form(args)
    if plain is None and as_json is not None:
        try:
            return list_cages(as_json)
        except AgentcageError as e:
            from agentcage.cli import report

            return report(e)
    if plain is None and not serves(args):
        return full_command(args)
    from agentcage.interrupts import on_sigterm

    on_sigterm()  # SIGTERM cleans up like Ctrl-C (finally blocks run)
    try:
        return execute(*plain) if plain is not None else command(args)
    except AgentcageError as e:
        from agentcage.cli import report

        return report(e)
    except KeyboardInterrupt as e:
        # as click ends an interrupted command: a newline closing the terminal's ^C, then
        # the reporter's line and code
        try:
            sys.stderr.write("\n")
            sys.stderr.flush()
        except OSError:  # a terminal that hung up
            pass
        from agentcage.cli import report_abort

        return report_abort(e)


def serves(args: Sequence[str]) -> bool:
    """Whether `args` is a command the command server serves (commandclient.SERVED)."""
    from agentcage import commandclient

    return commandclient.serves(args)


def command(args: list[str]) -> int:
    """A command the command server serves (`run`, `cage create`, `start`, ...): through it
    when it can take it (commandclient.py), else here with the full CLI, starting a server
    for the next commands when there was none. Its exit status; an error or interrupt that
    stopped a served one outside the CLI's own reporting, raised as in-process."""
    from agentcage import commandclient
    from agentcage.home import state_directory

    place = commandclient.Place(state_directory())
    code = through_server(place, lambda: commandclient.run(place, args),
                          lambda: commandclient.start(place))
    return full_command(args) if code is None else code


def full_command(args: list[str], terminal: int | None = None) -> int:
    """Any command but the lean ones, through the full CLI, in this process (the command
    server's sessions run it too): a command that starts a cage starts the gateway zygote
    first. `terminal`: the controlling terminal of the person who typed it, when this process
    has none of its own (a served command's client's)."""
    warmed = starts_a_cage(args) and warm_zygote()
    from agentcage.cli import main as full

    code = full(args, terminal)
    if warmed and code != 0:
        unwarm_zygote()
    return code


def entry() -> NoReturn:
    """The `agentcage` command (the console script; `python -m agentcage.cli`)."""
    args = sys.argv[1:]
    code = main()
    if plain_form(args) is not None or listing_form(args) is not None or args[:1] == ["run"]:
        _exit_now(code)
    sys.exit(code)


def _exit_now(code: int) -> NoReturn:
    """Exit without the interpreter's teardown of every loaded module: after `exec`, `shell`
    or `run` it is a good part of what the whole command costs (tens of ms after `run`), and
    their processes hold nothing it would clean up: their files are written whole (atomic
    writes, `with` blocks) and nothing else is left but the output, flushed here. Only when no
    thread and no atexit handler says otherwise; then the normal exit."""
    import atexit

    sys.stdout.flush()
    sys.stderr.flush()
    threading = sys.modules.get("threading")  # never imported: no thread was ever started
    if (threading is None or threading.active_count() == 1) and atexit._ncallbacks() == 0:
        os._exit(code & 0xFF)
    sys.exit(code)


if __name__ == "__main__":
    entry()
