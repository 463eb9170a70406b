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

Anything else (an option, no `--`, a missing command, `--help`) is not parsed here at all: it
goes to the full CLI, which parses and reports it.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

from agentcage.errors import AgentcageError, StateError

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


def run(name: str, command: list[str] | None) -> int:
    """Run `command` (None: a shell) in the started cage `name`; the command's exit status."""
    from agentcage.backends import workload
    from agentcage.state import StateStore

    cage = StateStore().cage(name)  # refuses an invalid name
    if not cage.exists():
        raise StateError(f"no cage named {name!r}; see `agentcage ls`")
    interactive = sys.stdin.isatty()
    if command is None:  # as `shell`: interactive on a terminal, else commands from stdin
        command = ["/bin/sh", "-i"] if interactive else ["/bin/sh"]
    target = workload.running_target(cage)
    return workload.run(target, command, interactive, capture=False).returncode


def _on_term(signum, frame):  # SIGTERM cleans up like Ctrl-C (finally blocks run)
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """`agentcage`: the lean path for the plain forms above, the full CLI for the rest."""
    args = list(sys.argv[1:] if argv is None else argv)
    plain = plain_form(args)
    if plain is None:
        from agentcage.cli import main as full

        return full(argv)
    signal.signal(signal.SIGTERM, _on_term)
    try:
        return run(*plain)
    except AgentcageError as e:
        from agentcage.cli import report

        return report(e)
    except KeyboardInterrupt:
        # as click ends an interrupted command: a newline closing the terminal's ^C, "aborted"
        sys.stderr.write("\n")
        sys.stderr.flush()
        from agentcage.cli import report_abort

        return report_abort()


if __name__ == "__main__":
    sys.exit(main())
