"""`agentcage`: thin click commands over the services in cages.py. Exit codes: 0 ok, 1 error,
2 reserved for gates (a failed `verify`/score gate). Bad input is one clear line, no traceback."""

from __future__ import annotations

import sys

if __name__ == "__main__":  # `python -m agentcage.cli`: the plain `exec` and `shell` forms run
    from agentcage import lean  # before click and rich are imported (see lean.py), and a
    # command that starts a cage starts the gateway zygote first
    if (lean.plain_form(sys.argv[1:]) is not None or lean.starts_a_cage(sys.argv[1:])
            or lean.serves(sys.argv[1:])):  # served by the command server when it can be
        lean.entry()

import contextlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import click

from agentcage import __version__, rootless
from agentcage.completion import complete_cages, complete_scaffolds
from agentcage.config.scaffolds import check_scaffold, scaffold_names, scaffold_spec, scaffold_text
from agentcage.errors import AgentcageError, ConfigError, StateError

EXIT_OK, EXIT_ERROR, EXIT_GATE = 0, 1, 2


class _Console:
    """rich's Console, made when a command first prints: most print a line or nothing, and
    importing rich is a good part of the CLI's start-up (so is agentcage.output, which renders
    with rich: the commands that use it import it)."""

    def __init__(self, **options):
        self._options, self._console = options, None

    def __getattr__(self, name: str):
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


out = _Console(highlight=False, soft_wrap=True, emoji=False)  # ":secret:" is no emoji
err = _Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def _plain_line(line: str) -> None:
    """A line of words and a cage's name, as `out.print` prints it (no markup, no style, no
    wrapping), without importing rich: a good part of what `start` or `cage create` costs
    besides the start itself."""
    sys.stdout.write(line + "\n")


def _service():
    from agentcage.backends.namespace import NamespaceBackend
    from agentcage.cages import CageService
    from agentcage.state import StateStore

    store = StateStore()  # the CLI's gateways come from the state root's zygote when they can
    return CageService(store, NamespaceBackend(
        store, use_zygote=True, say=lambda line: err.print(line, markup=False)))


def _command(args: Sequence[str]) -> list[str]:
    return list(args)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentcage")
def cli() -> None:
    """Run AI agents in a cage whose only way out is an inspecting egress gateway."""


# ---- init / run -------------------------------------------------------------------------------

@cli.command()
@click.argument("name", required=False, default="my-cage")
@click.option("--scaffold", "-s", default="minimal", show_default=True,
              shell_complete=complete_scaffolds,
              help=f"one of: {', '.join(scaffold_names())}, or one of yours (`scaffold list`)")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("cage.yaml"), show_default=True)
@click.option("--force", is_flag=True, help="overwrite an existing file")
def init(name: str, scaffold: str, output: Path, force: bool) -> None:
    """Write a commented cage.yaml from a scaffold."""
    text = scaffold_text(scaffold, name)
    if output.exists() and not force:
        raise ConfigError(f"{output} exists; use --force to overwrite or -o to choose another file")
    try:
        output.write_text(text)
    except OSError as e:
        raise ConfigError(f"cannot write {output}: {e.strerror}; choose another path with -o") \
            from None
    out.print(f"wrote {output} (scaffold {scaffold}); next: agentcage cage create -c {output}")


def _apply_overrides(config, **overrides):
    from agentcage.config.load import apply_overrides

    return apply_overrides(config, **overrides)


AS_USER = click.option("--as-user", "as_user", type=click.IntRange(min=1), metavar="UID",
                       help="the host uid the workload runs as (container.host_user); needed "
                            "when root owns the project")
ESCAPE_HELP = "Ctrl-] twice leaves a session that hangs (exit 130)."


@cli.command(epilog=ESCAPE_HELP)
@click.argument("scaffold", shell_complete=complete_scaffolds)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--secret", "-s", "secrets", multiple=True, metavar="KEY",
              help="a secret the agent needs (e.g. ANTHROPIC_API_KEY): taken from this "
                   "project's store, else asked for once (hidden) and stored encrypted; the "
                   "cage sees a placeholder (repeatable)")
@click.option("--forget", is_flag=True, help="remove the -s secrets from the store at the end")
@click.option("--fresh", is_flag=True,
              help="start from empty named volumes (the agent's state kept for this project "
                   "is deleted first)")
@click.option("--project", "-p", type=click.Path(file_okay=False, path_type=Path),
              help="project directory mounted at /workspace (default: current directory)")
@click.option("--config", "-c", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="a cage.yaml to use instead of the scaffold")
@click.option("--name", help="cage name (default: SCAFFOLD-DIRECTORY-HASH, one per project)")
@AS_USER
@click.option("--uplink", help="host or netns:NAME")
@click.option("--dns", multiple=True, help="upstream DNS server of the uplink (repeatable)")
@click.option("--trust-network", "trust", multiple=True,
              help="test world only: a network treated as public (repeatable)")
@click.option("--upstream-ca", multiple=True, help="extra CA file for upstream TLS (repeatable)")
@click.option("--allow", multiple=True, help="allow a domain for this run (repeatable)")
def run(scaffold, command, secrets, forget, fresh, project, config_path, name, as_user, uplink,
        dns, trust, upstream_ca, allow):
    """Run SCAFFOLD's agent (or the COMMAND after --) in this project's cage, removed when it
    ends. What the project's next run should find is kept: the -s secrets (encrypted, on
    this host) and the agent's own state (named volumes; `agentcage ls` shows them as kept)."""
    from agentcage.config.overrides import Overrides
    from agentcage.config.scaffolds import ALIASES
    from agentcage.names import NAME_RE
    from agentcage.runs import RunRequest, project_cage_name
    from agentcage.runs import run as run_in_cage

    base = config_path.resolve().parent if config_path else Path.cwd()
    if not config_path:
        check_scaffold(scaffold)  # an unknown scaffold fails before anything starts
    where = project if project is not None else Path.cwd()
    cage_name = name or project_cage_name(
        "run" if config_path else ALIASES.get(scaffold, scaffold), where)
    if not NAME_RE.match(cage_name):
        raise ConfigError(f"--name {cage_name!r}: use a-z, 0-9 and '-'")
    overrides = Overrides(name=cage_name, uplink=uplink, dns=dns, trust=trust,
                          upstream_ca=upstream_ca, allow=allow, lifecycle="ephemeral",
                          host_user=as_user)

    def make_spec():  # made while the gateway is being prepared (see runs.py)
        if not config_path:
            return scaffold_spec(scaffold, overrides)  # no YAML, no model when it can vouch
        from dataclasses import asdict

        from agentcage.config.load import load_config

        return _apply_overrides(load_config(config_path), **asdict(overrides)).spec()

    def stored(keys: list[str], backend: str) -> None:
        for key in keys:
            err.print(f"{key} stored for {cage_name} ({backend}); this project's next runs use "
                      f"it (`agentcage secret rm {cage_name} {key}` or `run --forget` removes "
                      "it)", markup=False, emoji=False)

    interactive = sys.stdin.isatty()
    invocation = click.get_current_context().find_object(Invocation)
    terminal = invocation.terminal if invocation is not None else None
    request = RunRequest(name=cage_name, make_spec=make_spec, base=base, project=project,
                         command=_command(command) or None, interactive=interactive,
                         secrets=secrets, ask=lambda key: _ask_secret(key, cage_name, terminal),
                         forget=forget, fresh=fresh, stored=stored,
                         masked=_say_line)
    if interactive and not command:  # a person starting the agent: where, and the way out
        # (plain: rich costs the agent's start more than the line is worth)
        sys.stderr.write(f"agentcage: cage {cage_name}; Ctrl-] twice leaves a session that "
                         "hangs\n")
        sys.stderr.flush()
    sys.exit(run_in_cage(_service(), request))


def _say_line(line: str) -> None:
    sys.stderr.write(f"agentcage: {line}\n")


def _ask_secret(key: str, cage: str, terminal: int | None) -> bytes:
    """A secret's value: a hidden prompt on a terminal, else one line of stdin (never argv).
    `terminal`: where the prompt is shown when this process has no terminal of its own."""
    from agentcage.secrets import read_value

    try:
        return read_value(prompt=f"{key} for {cage} (hidden; stored encrypted on this host, "
                                 "the cage sees a placeholder): ", one_line=True,
                          terminal=terminal)
    except ValueError as e:
        raise ConfigError(f"-s {key}: {e}") from None


def _overrides(trust: Sequence[str], upstream_ca: Sequence[str], as_user: int | None):
    """The command line's choices for `cage create`/`update` (None: there are none)."""
    from agentcage.config.overrides import Overrides

    if not (trust or upstream_ca or as_user is not None):
        return None
    return Overrides(trust=tuple(trust), upstream_ca=tuple(upstream_ca), host_user=as_user)


# ---- cage lifecycle ---------------------------------------------------------------------------

@cli.group()
def cage() -> None:
    """Persistent cages: create, start, stop, destroy, exec."""


@cage.command("create")
@click.option("--config", "-c", "config_path", required=True,
              type=click.Path(dir_okay=False, path_type=Path))
@click.option("--project", "-p", type=click.Path(file_okay=False, path_type=Path))
@click.option("--no-start", is_flag=True, help="write the state but do not start")
@click.option("--upstream-ca", multiple=True,
              help="extra CA file trusted for upstream TLS, e.g. a corporate proxy's (repeatable)")
@click.option("--trust-network", "trust", multiple=True,
              help="test world only: a private network treated as public (repeatable)")
@AS_USER
def cage_create(config_path: Path, project: Path | None, no_start: bool,
                upstream_ca: tuple[str, ...], trust: tuple[str, ...],
                as_user: int | None) -> None:
    """Create (and start) a cage from cage.yaml. The options are recorded: `cage update`
    applies them again."""
    overrides = _overrides(trust, upstream_ca, as_user)
    base = config_path.resolve().parent
    # a scaffold as `init` wrote it is made from its stored form, as `run` does; any other
    # cage.yaml is parsed and validated by the model
    service = _service()
    spec = _unedited_scaffold(config_path, overrides)
    if spec is not None:
        service.create_spec(spec, base, project, start=not no_start, overrides=overrides)
        name = spec.name
    else:
        from agentcage.config.load import load_config

        config = load_config(config_path)
        service.create(config, base, project, start=not no_start, overrides=overrides)
        name = config.name
    _keep_source(service, name, config_path)
    _plain_line(f"cage {name} {'created' if no_start else 'running'}")
    _say_masked(service, name)


def _say_masked(service, name: str) -> None:
    """The credential files the cage masks, said where the cage is made."""
    from agentcage.backends import credmasks

    masked = credmasks.listed(service.store.cage(name))
    if masked:
        err.print(credmasks.describe(masked), markup=False, soft_wrap=True)


def _keep_source(service, name: str, config_path: Path) -> None:
    """The cage.yaml as written, for `agentcage edit` (a file gone meanwhile: not kept)."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        service.record_source(name, config_path, config_path.read_text(encoding="utf-8-sig"))


def _unedited_scaffold(config_path: Path, overrides):
    """The spec of `config_path` if it is a scaffold's text, unedited; else None."""
    from agentcage.config.scaffolds import unedited_spec
    from agentcage.config.syntax import MAX_CONFIG_BYTES

    try:
        with config_path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # the model's loader says what is wrong
    if len(raw) > MAX_CONFIG_BYTES:
        return None
    return unedited_spec(text, overrides)


@cage.command("update")
@click.argument("name", shell_complete=complete_cages)
@click.option("--config", "-c", "config_path", required=True,
              type=click.Path(dir_okay=False, path_type=Path))
@click.option("--project", "-p", type=click.Path(file_okay=False, path_type=Path),
              help="a new project directory (default: the cage's current one)")
@click.option("--upstream-ca", multiple=True,
              help="extra CA file trusted for upstream TLS (repeatable)")
@click.option("--trust-network", "trust", multiple=True,
              help="test world only: a private network treated as public (repeatable)")
@click.option("--rebuild", "--no-cache", "rebuild", is_flag=True,
              help="make the layer of the cage's image again from the image (what was "
                   "installed in it is gone)")
@AS_USER
def cage_update(name: str, config_path: Path, project: Path | None,
                upstream_ca: tuple[str, ...], trust: tuple[str, ...], rebuild: bool,
                as_user: int | None) -> None:
    """Apply a changed cage.yaml to cage NAME, keeping its secrets, CA, logs, named volumes,
    runtime domain grants, its image's layer and the options given at create (an option
    given again replaces it); a running cage restarts if more than its domain lists
    changed."""
    from agentcage.config.load import load_config

    config = load_config(config_path)
    service = _service()
    result = service.update(name, config, config_path.resolve().parent, project,
                            overrides=_overrides(trust, upstream_ca, as_user), rebuild=rebuild)
    _keep_source(service, name, config_path)
    _print_update(name, result)


def _print_update(name: str, result: dict) -> None:
    kept = (f" (kept from create: {', '.join(result['kept'])})" if result["kept"] else "")
    if not result["changed"]:
        out.print(f"cage {name}: no change{kept}", markup=False)
        return
    how = ("restarted to apply it" if result["restarted"]
           else "the running gateway reloads the domain lists live" if result["live"]
           else "it applies at the next start")
    out.print(f"cage {name}: updated {', '.join(result['changed'])}; {how}{kept}",
              markup=False)


def _edit():
    @click.argument("name", shell_complete=complete_cages)
    def edit(name: str) -> None:
        """Edit cage NAME's cage.yaml in $VISUAL or $EDITOR (else vi), then apply it as `cage
        update` does. An invalid edit changes nothing: edit it again, or leave with the text
        kept. The file the cage was made from is not changed."""
        from agentcage.edit import edit as edit_cage

        def again(error: str) -> bool:
            if not sys.stdin.isatty():
                return False
            err.print(f"error: {error}", markup=False)
            return click.confirm("edit it again?", default=True)

        if not edit_cage(name, _service(), again, lambda result: _print_update(name, result)):
            out.print(f"cage {name}: no change", markup=False)

    return edit


cli.command("edit")(_edit())
cage.command("edit")(_edit())




def _lifecycle(verb: str):
    @click.argument("name", shell_complete=complete_cages)
    def command(name: str) -> None:
        svc = _service()
        getattr(svc, verb)(name)
        _plain_line(f"cage {name}: {verb} done")

    command.__doc__ = f"{verb.capitalize()} a cage."
    command.__name__ = verb
    return command


def _confirm(question: str, yes: bool) -> None:
    """Ask on a terminal; without one, only `-y` goes ahead (a script never destroys by
    accident, and an answer piped in is not taken for consent)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise ConfigError(f"{question.rstrip('?')}: refused without a terminal to ask on; "
                          "add -y to confirm")
    click.confirm(question, abort=True)


def _destroy():
    @click.argument("name", shell_complete=complete_cages)
    @click.option("--yes", "-y", is_flag=True, help="do not ask")
    @click.option("--keep-secrets", is_flag=True,
                  help="keep the stored secrets for the next `cage create` or `run` of this "
                       "name")
    @click.option("--keep-state", is_flag=True,
                  help="keep the named volumes (the agent's own state) for the next one")
    def destroy(name: str, yes: bool, keep_secrets: bool, keep_state: bool) -> None:
        """Stop a cage and remove its state (audit log, capture, CA, named volumes and
        secrets included, unless kept)."""
        kept = [what for what, keep in (("secrets", keep_secrets), ("named volumes", keep_state))
                if keep]
        what = f"all its state but its {' and '.join(kept)}" if kept else "all its state"
        _confirm(f"destroy cage {name} and {what}?", yes)
        _service().destroy(name, keep_secrets=keep_secrets, keep_state=keep_state)
        note = f" ({' and '.join(kept)} kept)" if kept else ""
        out.print(f"cage {name}: destroyed{note}", markup=False)

    return destroy


for _verb in ("start", "stop", "restart"):
    cage.command(_verb)(_lifecycle(_verb))
    cli.command(_verb)(_lifecycle(_verb))
cage.command("destroy")(_destroy())
cli.command("destroy")(_destroy())


JSON_FLAG = click.option("--json", "as_json", is_flag=True,
                         help="print a versioned JSON document instead")


def _emit(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def _ls(as_json: bool) -> None:
    """The cages on this machine, with their status and lifecycle."""
    from agentcage import listing

    rows = _service().ls()
    sys.stdout.write(listing.document(rows) if as_json
                     else listing.text(rows, listing.styled()))


cli.command("ls")(JSON_FLAG(_ls))
cage.command("ls")(JSON_FLAG(_ls))  # click takes a function's options when it makes a command


@cage.command("backup")
@click.argument("name", shell_complete=complete_cages)
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="the archive to write (FILE.tar.gz)")
@click.option("--with-secrets", is_flag=True,
              help="include the secrets, where they stay sealed (systemd-creds: restorable on "
                   "this machine only)")
@JSON_FLAG
def cage_backup(name: str, output: Path, with_secrets: bool, as_json: bool) -> None:
    """Write cage NAME's configuration, domains, grants, CA, audit log, capture and named
    volumes to one archive (0600: it holds the cage's CA key)."""
    from agentcage.backup import backup
    from agentcage.state import StateStore

    manifest = backup(StateStore(), name, output, with_secrets)
    if as_json:
        from agentcage.output import document

        _emit(document("backup", file=str(output), **manifest))
        return
    secrets = manifest["secrets"]
    out.print(f"cage {name}: backed up to {output}", markup=False)
    if secrets["included"]:
        out.print(f"secrets included ({', '.join(secrets['keys'])}), sealed by "
                  f"{secrets['sealed_by']}", markup=False)
    elif secrets["keys"] or secrets.get("note"):
        keys = ", ".join(secrets["keys"]) or "see `agentcage secret list`"
        out.print(f"secrets not included ({keys}): set them again after a restore",
                  markup=False)


@cage.command("restore")
@click.argument("archive", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", "new_name", help="restore as this cage (default: its own name)")
def cage_restore(archive: Path, new_name: str | None) -> None:
    """Make a cage (stopped) from a backup; `agentcage start NAME` starts it."""
    from agentcage.backup import restore
    from agentcage.state import StateStore

    manifest = restore(StateStore(), archive, new_name)
    name = manifest["restored_as"]
    out.print(f"cage {name}: restored (stopped; `agentcage start {name}`)", markup=False)
    if not manifest["secrets"]["included"] and (manifest["secrets"]["keys"]
                                                or manifest["secrets"].get("note")):
        out.print("its secrets were not in the backup: `agentcage secret set "
                  f"{name} KEY` for each", markup=False)


def _exec_command():
    @click.argument("name", shell_complete=complete_cages)
    @click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
    @click.option("--as-root", is_flag=True,
                  help="as root of the cage's own user namespace (never the host's root), "
                       "its image's layer writable (a cage with container.image)")
    # verify's, for an image without Python: `-- python3 ARGS` runs the host's, lent
    # read-only for this command (backends/lentpython.py)
    @click.option("--lend-python", is_flag=True, hidden=True)
    def command(name: str, command: tuple[str, ...], as_root: bool, lend_python: bool) -> None:
        """Run COMMAND inside the cage NAME: `agentcage exec NAME -- COMMAND ...` (its own
        options after --). Exits with the command's status."""
        sys.exit(_service().exec(name, list(command), interactive=sys.stdin.isatty(),
                                 as_root=as_root, lend_python=lend_python))

    return command


cli.command("exec", epilog=ESCAPE_HELP)(_exec_command())
cage.command("exec", epilog=ESCAPE_HELP)(_exec_command())


def _shell_command():
    @click.argument("name", shell_complete=complete_cages)
    @click.option("--as-root", is_flag=True,
                  help="as root of the cage's own user namespace (never the host's root), "
                       "its image's layer writable: to install packages (a cage with "
                       "container.image)")
    def command(name: str, as_root: bool) -> None:
        """Open a shell in the cage NAME (interactive on a terminal; else it reads commands
        from stdin). Exits with the shell's status."""
        tty = sys.stdin.isatty()
        sys.exit(_service().exec(name, ["/bin/sh", "-i"] if tty else ["/bin/sh"],
                                 interactive=tty, as_root=as_root))

    return command


cli.command("shell", epilog=ESCAPE_HELP)(_shell_command())
cage.command("shell", epilog=ESCAPE_HELP)(_shell_command())


def _logs_command():
    @click.argument("name", shell_complete=complete_cages)
    @click.option("--follow", "-f", is_flag=True)
    @click.option("--decision", "-d", type=click.Choice(["allowed", "flagged", "blocked"]))
    @click.option("--json", "as_json", is_flag=True, help="raw audit records")
    @click.option("--summary", is_flag=True, help="counts per decision, top blocked, drops")
    @click.option("--workload", is_flag=True, help="the output of a service cage's command")
    def command(name: str, follow: bool, decision: str | None, as_json: bool,
                summary: bool, workload: bool) -> None:
        """Show the cage's audit log (every gateway decision)."""
        from agentcage.cages import format_record, summarise

        svc = _service()
        if workload:
            text = svc.workload_log(name)
            sys.stdout.write("".join(ch if ch.isprintable() or ch in "\n\t" else "?"
                                     for ch in text))
            return
        path = svc.audit_path(name)
        if summary:
            result = summarise(svc.audit(name))
            if as_json:
                out.print(json.dumps(result), markup=False)
                return
            for direction, by in sorted(result["decisions"].items()):
                counts = ", ".join(f"{k} {v}" for k, v in sorted(by.items()))
                out.print(f"{direction}: {counts}", markup=False)
            for host, n in result["top_blocked"]:
                out.print(f"blocked {n}x  {host}", markup=False)
            drops = ", ".join(f"{k} {v}" for k, v in sorted(result["dropped_packets"].items()))
            out.print(f"dropped packets: {drops or 'none'}", markup=False)
            return

        def show(rec):
            if decision and rec.get("decision") != decision:
                return
            out.print(json.dumps(rec) if as_json else format_record(rec), markup=False)

        if not follow:
            for rec in svc.audit(name):
                show(rec)
            return
        # Followed by byte offset from the one read that printed the records so far: a record
        # appended meanwhile is printed once, and a line still being written is read again
        # once it is whole.
        position = 0
        while True:
            try:
                with path.open("rb") as f:
                    f.seek(position)
                    chunk = f.read()
            except FileNotFoundError:
                chunk = b""
            whole = chunk[:chunk.rfind(b"\n") + 1]
            position += len(whole)
            for line in whole.splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    show(rec)
            time.sleep(0.3)

    return command


cli.command("logs")(_logs_command())
cage.command("logs")(_logs_command())
cage.command("audit")(_logs_command())  # `cage audit NAME --summary`: where auditors look


def _har_command():
    @click.argument("name", shell_complete=complete_cages)
    @click.option("--output", "-o", required=True,
                  type=click.Path(dir_okay=False, path_type=Path), help="the .har file to write")
    @click.option("--view", type=click.Choice(["inbound", "outbound"]), default="inbound",
                  show_default=True,
                  help="inbound: what the cage saw (placeholders, safe to share); "
                       "outbound: what went on the wire (REAL secret values)")
    def command(name: str, output: Path, view: str) -> None:
        """Export cage NAME's captured traffic as HAR 1.2 (needs capture.enable_har)."""
        from agentcage.state import atomic_write

        doc, skipped = _service().har(name, view)
        if view == "outbound":
            err.print("warning: the outbound view holds the REAL secret values injected on the "
                      f"wire; {output} is written 0600: do not share it", markup=False)
        atomic_write(output, json.dumps(doc, indent=1) + "\n", mode=0o600)
        if skipped:
            err.print(f"warning: skipped {skipped} corrupt capture record(s)", markup=False)
        out.print(f"wrote {output}: {len(doc['log']['entries'])} entries ({view} view)",
                  markup=False)

    return command


cage.command("har")(_har_command())
cli.command("har")(_har_command())


# ---- secrets: values go in through a hidden prompt or stdin, never argv, and never come out --

@cli.group()
def secret() -> None:
    """A cage's secrets: stored encrypted on the host, injected by its gateway, never in it."""


@secret.command("set")
@click.argument("name", shell_complete=complete_cages)
@click.argument("key")
def secret_set(name: str, key: str) -> None:
    """Store KEY for cage NAME; the value is read from a hidden prompt or from stdin."""
    from agentcage.secrets import read_value

    try:
        value = read_value(prompt=f"value of {key}: ")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    result = _service().secret_set(name, key, value)
    if result["warning"]:
        err.print(f"warning: {result['warning']}", markup=False, emoji=False)
    out.print(f"{key} stored ({result['backend']}: {result['backend_reason']}); "
              f"the cage sees {result['placeholder']}", markup=False, emoji=False)
    if result["pending"]:
        out.print(f"cage {name} is not created yet: `agentcage cage create` will use this "
                  "secret (its cage.yaml needs a secret_injection rule for it)", markup=False)
    if result["applied"]:
        out.print("the running gateway reloaded its secrets")


@secret.command("list")
@click.argument("name", shell_complete=complete_cages)
@click.option("--json", "as_json", is_flag=True)
def secret_list(name: str, as_json: bool) -> None:
    """Names, bindings and placeholders of cage NAME's secrets (never values)."""
    from agentcage.output import document, secrets_lines

    doc = _service().secret_list(name)
    if as_json:
        _emit(document("secrets", **doc))
        return
    out.print(secrets_lines(doc))  # Text throughout: no markup, no :emoji: codes


@secret.command("rm")
@click.argument("name", shell_complete=complete_cages)
@click.argument("key")
def secret_rm(name: str, key: str) -> None:
    """Delete KEY of cage NAME from the store; a running gateway stops injecting it."""
    if not _service().secret_rm(name, key):
        raise ConfigError(f"cage {name} has no secret {key}")
    out.print(f"{key} removed")


@secret.command("rotate-placeholders")
@click.argument("name", shell_complete=complete_cages)
@click.argument("keys", nargs=-1)
@JSON_FLAG
def secret_rotate(name: str, keys: tuple[str, ...], as_json: bool) -> None:
    """Mint new placeholders (all, or KEYS); a running cage's gateway switches at once and the
    old ones stop injecting. New commands in the cage see the new ones."""
    from agentcage.output import document

    result = _service().secret_rotate(name, keys)
    if as_json:
        _emit(document("rotated-placeholders", cage=name, **result))
        return
    for r in result["rotated"]:
        out.print(f"{r['name']}: {r['old']} -> {r['new']}", markup=False, emoji=False)
    if result["applied"]:
        out.print("the running gateway now injects only the new placeholders")


@cli.group()
def scaffold() -> None:
    """cage.yaml templates: built in, and your own."""


@scaffold.command("list")
@JSON_FLAG
def scaffold_list(as_json: bool) -> None:
    """The scaffolds `init` and `run` take: the built-in ones, then your own."""
    from agentcage.config.scaffolds import user_dir, user_scaffold_names
    from agentcage.output import document

    yours = user_scaffold_names()
    if as_json:
        _emit(document("scaffolds", scaffolds=[*scaffold_names(), *yours], yours=yours,
                       directory=str(user_dir())))
        return
    for name in scaffold_names():
        out.print(name, markup=False)
    for name in yours:
        out.print(f"{name}  (yours: {user_dir() / name}.yaml)", markup=False, soft_wrap=True)


@scaffold.command("create")
@click.argument("name")
@click.option("--from", "source", required=True, shell_complete=complete_scaffolds,
              help="the scaffold it starts as a copy of")
@click.option("--force", is_flag=True, help="replace a scaffold of yours of that name")
def scaffold_create(name: str, source: str, force: bool) -> None:
    """A scaffold of your own, NAME, copied from another to edit; `init --scaffold NAME` and
    `run NAME` take it."""
    from agentcage.config.scaffolds import create_user_scaffold

    path = create_user_scaffold(name, source, force)
    out.print(f"wrote {path} (from {source}); edit it, then `agentcage init my-cage "
              f"--scaffold {name}` or `agentcage run {name}`", markup=False, soft_wrap=True)


@scaffold.command("show")
@click.argument("name", shell_complete=complete_scaffolds)
def scaffold_show(name: str) -> None:
    """Print the cage.yaml scaffold for harness NAME."""
    sys.stdout.write(scaffold_text(name, "my-cage"))


@cli.command()
@click.option("--yes", "-y", is_flag=True, help="do not ask")
@JSON_FLAG
def prune(yes: bool, as_json: bool) -> None:
    """Remove ephemeral cages and cages whose gateway died, and stop the gateway zygote, the
    exec server and the command server (the next cage, exec or command starts a fresh one);
    for a rootless user with no cage running, their cages' holder too."""
    from agentcage import commandclient, execclient
    from agentcage.backends import zygote as zygotes
    from agentcage.output import document
    from agentcage.state import state_root

    _confirm("remove ephemeral and broken cages?", yes)
    service = _service()
    removed = service.prune()
    zygotes.stop_all(state_root())
    execclient.stop(str(state_root()))
    commandclient.stop(str(state_root()))
    if rootless.active() and not any(row["status"] in ("running", "starting")
                                     for row in service.ls()):
        from agentcage.rootless import holder

        # no cage of this user runs: their namespaces' holder goes too (the next command
        # that needs it starts one)
        if holder.stop(state_root() / rootless.DIRECTORY):
            removed.append("the rootless cages' holder")
    if as_json:
        _emit(document("pruned", removed=removed))
        return
    out.print(f"removed: {', '.join(removed)}" if removed else "nothing to prune")


# ---- export -----------------------------------------------------------------------------------

@cli.group("export")
def export_group() -> None:
    """The cage as another system's objects."""


@export_group.command("k8s")
@click.argument("name", required=False, shell_complete=complete_cages)
@click.option("--config", "-c", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="export this cage.yaml instead of a cage")
@click.option("--form", type=click.Choice(["pod", "deployment", "agent-sandbox"]),
              default="pod", show_default=True,
              help="a Pod, a Deployment, or agent-sandbox's SandboxTemplate, WarmPool, Claim")
@click.option("--output", "-o", metavar="DIR",
              help="where the files go (default ./agentcage-NAME-k8s); - prints one stream")
@click.option("--namespace", "-n", help="the objects' Kubernetes namespace")
@click.option("--image", metavar="IMAGE",
              help="the agent's image (instead of container.image, or for a cage without one: "
                   "an image with the agent installed)")
@click.option("--gateway-image", metavar="IMAGE",
              help="the gateway's image (default localhost/agentcage-gateway:VERSION, built "
                   "from images/gateway/Containerfile)")
@click.option("--with-secrets", is_flag=True,
              help="write the cage's stored keys into the Secret (a file only you can read)")
@click.option("--secret", "-s", "keys", multiple=True, metavar="KEY",
              help="a secret the pod gets (repeatable; default: every rule's, or every "
                   "stored one with --with-secrets)")
@click.option("--seccomp", type=click.Choice(["agentcage", "runtime-default"]),
              default="agentcage", show_default=True,
              help="the agent's seccomp profile: the cage's own (a file each node needs) or "
                   "the runtime's")
@JSON_FLAG
def export_k8s(name: str | None, config_path: Path | None, form: str, output: str | None,
               namespace: str | None, image: str | None, gateway_image: str | None,
               with_secrets: bool, keys: tuple[str, ...], seccomp: str, as_json: bool) -> None:
    """A cage (NAME, or -c cage.yaml) as Kubernetes objects: the agent's container, the gateway
    as its sidecar, the pod's network fenced to the gateway, a NetworkPolicy. Apply them with
    `kubectl apply -f DIR`."""
    from agentcage.kube import export as kube
    from agentcage.kube import layout

    if (name is None) == (config_path is None):
        raise ConfigError("name a cage, or give -c cage.yaml (one of them)")
    if output == "-" and as_json:
        raise ConfigError("-o - prints the objects themselves; --json describes written files")
    staged = None
    if config_path is not None:
        if with_secrets:
            raise ConfigError("--with-secrets needs a cage's NAME: its store holds the values")
        from agentcage.config.load import load_config

        spec, base = load_config(config_path).spec(), config_path.resolve().parent
    else:
        assert name is not None
        from agentcage.cages import stored_spec
        from agentcage.state import StateStore

        cage = StateStore().cage(name)
        if not cage.exists():
            raise StateError(f"no cage named {name!r}; see `agentcage ls`")
        spec, base = stored_spec(cage), cage.root
        if with_secrets:
            from agentcage.secrets.cage import staged_for

            staged = staged_for(cage, spec.secrets_backend, spec.allow_plaintext)
    result = kube.export(spec, form, base=base, namespace=namespace, staged=staged,
                         gateway_image=gateway_image or layout.GATEWAY_IMAGE, seccomp=seccomp,
                         image=image, keys=keys)
    create_secret = kube.secret_command(result.exported, namespace)
    if output == "-":
        sys.stdout.write(kube.to_yaml(result.exported.objects))
        paths: list[Path] = []
    else:
        paths = kube.write(result.exported, Path(output or f"agentcage-{spec.name}-k8s"))
    for note in result.notes:
        err.print(f"note: {note}", markup=False)
    if as_json:
        from agentcage.output import document

        _emit(document("exported", cage=spec.name, form=form,
                       files=[str(p) for p in paths],
                       objects=[{"kind": o["kind"], "name": o["metadata"]["name"]}
                                for o in result.exported.objects],
                       keys_secret=result.exported.keys_secret,
                       keys_included=result.exported.keys_included,
                       create_secret=create_secret, notes=list(result.notes),
                       node_files=sorted(result.exported.node_files)))
        return
    if paths:
        for path in paths:
            out.print(f"wrote {path}", markup=False)
    if seccomp == "agentcage":
        from agentcage.kube.seccomp import KUBELET_PATH, PROFILE

        where = (f"{paths[0].parent}/seccomp/{PROFILE}" if paths
                 else "`agentcage export k8s ... -o DIR`")
        err.print(f"every node that runs the pod needs the agent's seccomp profile at "
                  f"{KUBELET_PATH}: it is {where}", markup=False)
    if create_secret:
        err.print(f"the gateway needs its keys' Secret before the pod starts: {create_secret}",
                  markup=False)
    if paths:
        out.print(f"apply: kubectl apply -f {paths[0].parent}", markup=False)


# ---- the gateway zygote -----------------------------------------------------------------------

@cli.group()
def zygote() -> None:
    """The gateway zygote: one background process per state root that has loaded the
    gateway's code and forks each cage's gateway (so no cage pays for loading it). Started by
    the first cage; it exits after 15 idle minutes, or with `zygote stop`."""


@zygote.command("status")
@JSON_FLAG
def zygote_status(as_json: bool) -> None:
    """Whether a zygote runs for this state root (AGENTCAGE_HOME), with its pid."""
    from agentcage.backends import zygote as zygotes
    from agentcage.output import document
    from agentcage.state import state_root

    found = zygotes.running(state_root())
    if as_json:
        _emit(document("zygotes", zygotes=found))
        return
    for z in found:
        stale = "" if z["current"] else " (another installation's)"
        out.print(f"running: pid {z['pid']}, key {z['key']}{stale}", markup=False)
    if not found:
        out.print("not running (the next cage starts one)")


@zygote.command("stop")
def zygote_stop() -> None:
    """Stop this state root's zygotes, its exec server and its command server; running cages
    keep their gateways and commands."""
    from agentcage import commandclient, execclient
    from agentcage.backends import zygote as zygotes
    from agentcage.state import state_root

    stopped = (zygotes.stop_all(state_root()) + execclient.stop(str(state_root()))
               + commandclient.stop(str(state_root())))
    out.print(f"stopped: pid {', '.join(map(str, stopped))}" if stopped else "none running",
              markup=False)


# ---- the watcher: budgets over what leaves ----------------------------------------------------

@cli.group("watcher")
def watcher_group() -> None:
    """A cage's watcher: budgets over what leaves through allowed hosts (bytes, information,
    names, beacons, new hosts, credentials sent in pieces), its findings, and what it
    narrowed (grants revoked, a quarantine), which the operator can undo."""


@watcher_group.command("status")
@click.argument("name", shell_complete=complete_cages)
@JSON_FLAG
def watcher_status(name: str, as_json: bool) -> None:
    """Whether cage NAME is quarantined, its strikes and its findings by budget."""
    from agentcage import findings

    svc = _service()
    cage = svc._existing(name)
    info = findings.status(cage, svc.config(name).watcher.enable, time.time())
    if as_json:
        from agentcage.output import document

        _emit(document("watcher", cage=name, **info))
        return
    if not info["enable"]:
        out.print(f"cage {name}: the watcher is off (watcher.enable: false)", markup=False)
        return
    until = info["quarantined_until"]
    state = (f"QUARANTINED until {time.strftime('%H:%M:%S', time.localtime(until))} "
             "(only the model's hosts are reachable)" if info["quarantined"] else "watching")
    by = ", ".join(f"{k} {v}" for k, v in info["by_budget"].items()) or "none"
    used, budget = info["information_bytes"], info["information_budget"]
    information = (f"{used / 1024:.1f} KiB of {budget / 1024:.0f} KiB in the window"
                   if used is not None and budget else "-")
    scan = info["last_scan"] or {}
    reread = ("off" if not info["reread"] else "no scan yet" if not scan else
              f"{'ok' if scan.get('ok') else 'FAILED'} at "
              f"{time.strftime('%H:%M:%S', time.localtime(scan.get('at') or 0))}: "
              f"{scan.get('said')}")
    for label, value in (("state", state), ("strikes", str(info["strikes"])),
                         ("sent", information), ("re-reader", reread),
                         ("findings", f"{info['findings']} ({by})"),
                         ("revoked", ", ".join(info["revoked"]) or "-")):
        out.print(f"{label + ':':10} {value}", markup=False, soft_wrap=True)


@watcher_group.command("findings")
@click.argument("name", shell_complete=complete_cages)
@click.option("--last", "-n", type=click.IntRange(min=1), default=None,
              help="only the last N findings")
@JSON_FLAG
def watcher_findings(name: str, last: int | None, as_json: bool) -> None:
    """Cage NAME's findings, oldest first: the budget crossed, about which host, the
    evidence (amounts, never the bytes) and what was done."""
    from agentcage import findings
    from agentcage.output import findings_lines

    doc = findings.read(_service()._existing(name))
    found = doc["findings"][-last:] if last else doc["findings"]
    if as_json:
        from agentcage.output import document

        _emit(document("watcher_findings", cage=name, findings=found))
        return
    out.print(findings_lines(found))


@watcher_group.command("release")
@click.argument("name", shell_complete=complete_cages)
def watcher_release(name: str) -> None:
    """End cage NAME's quarantine now and forgive its strikes."""
    from agentcage import grants as operator

    svc = _service()
    operator.change(svc, svc._existing(name), "release")
    out.print(f"cage {name}: not quarantined; strikes forgiven", markup=False)


@watcher_group.command("scan")
@click.argument("name", shell_complete=complete_cages)
@click.option("--timeout", type=click.FloatRange(min=1), default=120, show_default=True,
              help="seconds to wait for the scan's outcome")
def watcher_scan(name: str, timeout: float) -> None:
    """Have cage NAME's re-reader (agents.watcher) scan its traffic now, and say what it
    found; exit 1 when the scan failed."""
    from agentcage import findings
    from agentcage import grants as operator

    svc = _service()
    cage = svc._existing(name)
    started = operator.change(svc, cage, "scan")["started"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        scan = findings.read(cage)["status"].get("last_scan") or {}
        if float(scan.get("at") or 0) >= started:
            out.print(f"cage {name}: {scan.get('said')}", markup=False)
            if not scan.get("ok"):
                sys.exit(1)
            return
        time.sleep(0.2)
    raise StateError(f"cage {name}: the scan did not end within {timeout:g} s")


@watcher_group.command("restore")
@click.argument("name", shell_complete=complete_cages)
@click.argument("grant")
def watcher_restore(name: str, grant: str) -> None:
    """Put back GRANT, which the watcher revoked, for the rest of its time."""
    from agentcage import grants as operator

    svc = _service()
    result = operator.change(svc, svc._existing(name), "restore", grant)
    restored = result.get("restored", {})
    out.print(f"cage {name}: grant {grant} restored ({restored.get('domain')}, until "
              f"{time.strftime('%H:%M:%S', time.localtime(restored.get('expires_at', 0)))})",
              markup=False)


# ---- the gateway, looked into ----------------------------------------------------------------

@cli.group("gateway")
def gateway_group() -> None:
    """Look into a cage's gateway: its state, log, firewall, and commands in its network
    namespace that can change nothing there."""


def _running_cage(name: str):
    from agentcage.state import StateStore

    cage = StateStore().cage(name)
    if not cage.exists():
        raise StateError(f"no cage named {name!r}; see `agentcage ls`")
    return cage


@gateway_group.command("status")
@click.argument("name", shell_complete=complete_cages)
@JSON_FLAG
def gateway_status(name: str, as_json: bool) -> None:
    """Cage NAME's gateway: process, namespaces, addresses, uplink, what it enforces."""
    from agentcage import diagnose

    info = diagnose.status(_running_cage(name))
    if as_json:
        from agentcage.output import document

        _emit(document("gateway", **info))
        return
    up = info["up_seconds"]
    rate = info["rate_limit"]
    rows = [("process", f"pid {info['pid']}, up {up:.0f} s" if up is not None
             else f"pid {info['pid']}"),
            ("mode", info["mode"]),
            ("namespaces", f"{info['gateway_namespace']} (gateway), "
                           f"{info['cage_namespace']} (cage)"),
            ("addresses", f"{info['gateway_address']} (gateway), {info['cage_address']} "
                          "(cage)"),
            ("uplink", info["uplink"]),
            ("DNS", ", ".join(info["dns_servers"]) or "-"),
            ("TCP ports", ", ".join(map(str, info["tcp_ports"])) or "-"),
            ("rate limit", f"{rate['requests_per_second']}/s per host, burst {rate['burst']}"),
            ("log", info["log"]),
            ("audit", info["audit"])]
    for label, value in rows:
        out.print(f"{label + ':':12} {value}", markup=False, soft_wrap=True)


@gateway_group.command("logs")
@click.argument("name", shell_complete=complete_cages)
@click.option("--lines", "-n", type=click.IntRange(min=1), default=40, show_default=True)
def gateway_logs(name: str, lines: int) -> None:
    """The last lines of cage NAME's gateway log (its start-up and errors; what the cage
    sent is in `agentcage logs NAME`)."""
    from agentcage import diagnose

    cage = _running_cage(name)
    tail = diagnose.log_tail(cage, lines)
    sys.stdout.write("".join(f"{line}\n" for line in tail) if tail
                     else f"(the gateway log {cage.gateway_log} is empty)\n")


@gateway_group.command("firewall")
@click.argument("name", shell_complete=complete_cages)
def gateway_firewall(name: str) -> None:
    """The nftables ruleset of cage NAME's gateway namespace."""
    from agentcage import diagnose

    sys.stdout.write(diagnose.firewall(_running_cage(name)))


@gateway_group.command("exec")
@click.argument("name", shell_complete=complete_cages)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def gateway_exec(name: str, command: tuple[str, ...]) -> None:
    """Run COMMAND in cage NAME's gateway network namespace with no capability (as nobody;
    rootless: as you): `agentcage gateway exec NAME -- ss -tn`. Reading works; changing an
    address, a route or the firewall is refused. Exits with the command's status."""
    import subprocess

    from agentcage import diagnose

    argv = diagnose.exec_argv(_running_cage(name), list(command))
    sys.exit(subprocess.run(argv).returncode)


# ---- domains ----------------------------------------------------------------------------------

@cli.group()
def domain() -> None:
    """List, add and remove allowed (or blocked) domains; takes effect without restart."""


@domain.command("list")
@click.argument("name", shell_complete=complete_cages)
@JSON_FLAG
def domain_list(name: str, as_json: bool) -> None:
    """Cage NAME's domain list: the baseline and the runtime grants with their expiry."""
    from agentcage.output import document, domains_lines

    info = _service().domain_list(name)
    if as_json:
        _emit(document("domains", cage=name, **info))
        return
    out.print(domains_lines(info))


@domain.command("add")
@click.argument("name", shell_complete=complete_cages)
@click.argument("domains", nargs=-1, required=True)
@click.option("--expires-in", help="e.g. 30m, 2h, 1d")
def domain_add(name: str, domains: tuple[str, ...], expires_in: str | None) -> None:
    """Allow DOMAINS for cage NAME at once, no restart (for --expires-in, then gone)."""
    _service().domain_add(name, domains, expires_in)
    until = f" for {expires_in}" if expires_in else ""
    out.print(f"added to {name}: {', '.join(domains)}{until}")


@domain.command("rm")
@click.argument("name", shell_complete=complete_cages)
@click.argument("pattern")
def domain_rm(name: str, pattern: str) -> None:
    """Remove PATTERN from cage NAME's domain list (a running gateway reloads it)."""
    if not _service().domain_rm(name, pattern):
        raise ConfigError(f"{pattern} is not in the domain list of {name}")
    out.print(f"removed from {name}: {pattern}")


# ---- runtime grants (the policy API's) --------------------------------------------------------

def _grants_group() -> click.Group:
    @click.group("grants")
    @click.argument("name", shell_complete=complete_cages)
    @click.pass_context
    def group(ctx: click.Context, name: str) -> None:
        """Cage NAME's runtime grants: what its agent asked for through the policy API
        (https://agentcage.local) and was given for a while. Revoking one cuts the
        connections opened under it."""
        ctx.obj = name

    @group.command("list")
    @click.option("--pending", is_flag=True, help="only requests waiting for an answer")
    @JSON_FLAG
    @click.pass_obj
    def grants_list(name: str, pending: bool, as_json: bool) -> None:
        """Grants in force and recent requests (what was asked, by whom decided, why)."""
        from agentcage import grants as operator
        from agentcage.output import document, grants_lines

        doc = operator.listing(_service()._existing(name))
        if pending:
            doc = {"grants": [], "requests": [r for r in doc["requests"]
                                              if r.get("status") == "pending"]}
        if as_json:
            _emit(document("grants", cage=name, **doc))
            return
        out.print(grants_lines(doc))

    def change(op: str, doc: str, target_help: str):
        @click.argument("target", metavar=target_help)
        @click.pass_obj
        def command(name: str, target: str) -> None:
            from agentcage import grants as operator

            svc = _service()
            result = operator.change(svc, svc._existing(name), op, target)
            out.print(_said(op, target, result), markup=False)

        command.__doc__ = doc
        return command

    group.command("approve")(change("approve", "Grant a pending request (within the "
                                    "cage's policy_api.grantable).", "ID"))
    group.command("deny")(change("deny", "Deny a pending request.", "ID"))
    group.command("revoke")(change("revoke", "End a grant now, and cut every connection "
                                   "opened under it.", "DOMAIN|ID"))

    @group.command("promote")
    @click.argument("domain")
    @click.pass_obj
    def promote(name: str, domain: str) -> None:
        """Make a grant lasting: its domain joins the cage's domain list (as `domain add`,
        kept by `cage update`) and the grant ends without cutting anything."""
        from agentcage import grants as operator

        svc = _service()
        result = operator.promote(svc, svc._existing(name), domain)
        out.print(f"cage {name}: {result['promoted']} is in the domain list now", markup=False)

    @group.command("sync")
    @click.pass_obj
    def sync(name: str) -> None:
        """Drop what expired now (grants, unanswered requests) rather than at the next tick."""
        from agentcage import grants as operator

        svc = _service()
        result = operator.change(svc, svc._existing(name), "sync")
        out.print(f"cage {name}: {result.get('grants', 0)} grant(s) in force", markup=False)

    return group


def _said(op: str, target: str, result: dict) -> str:
    if op in ("approve", "deny"):
        req = result.get("request", {})
        return f"request {target}: {req.get('status')} ({req.get('domain')})"
    ended = result.get("revoked", [])
    return f"revoked: {', '.join(g['domain'] for g in ended) or 'nothing'}"


cage.add_command(_grants_group())
cli.add_command(_grants_group())


# ---- doctor -----------------------------------------------------------------------------------

@cli.command()
@JSON_FLAG
def doctor(as_json: bool) -> None:
    """Check the host: binaries, kernel features, gateway dependencies; each with a fix."""
    from agentcage.checks import run_checks
    from agentcage.output import doctor_document

    results = run_checks()
    if as_json:
        _emit(doctor_document(results))
        if not all(c.ok for c in results):
            sys.exit(EXIT_ERROR)
        return
    from rich.text import Text

    for c in results:
        line = Text("ok    " if c.ok else "FAIL  ", style="green" if c.ok else "red")
        line.append(f"{c.name}: {c.detail}")  # plain text: a fix like agentcage[gateway]
        if not c.ok and c.fix:  # is not markup
            line.append(f"  → fix: {c.fix}")
        out.print(line)
    if not all(c.ok for c in results):
        sys.exit(EXIT_ERROR)


@cli.command()
@click.argument("name", shell_complete=complete_cages)
@click.option("--label", default=None, help="Report name (default: cage-NAME).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              default=Path("reports"), show_default=True, help="Where the reports go.")
@click.option("--max-score", type=click.IntRange(0, 100), default=None,
              help="Exit 2 when the cage scores above this budget.")
@click.option("--baseline", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="An accepted report: exit 2 when the cage is worse in any way.")
@click.option("--fail-on-regression", is_flag=True,
              help="Exit 2 when the cage is worse than its previous verify.")
@click.option("--no-history", is_flag=True,
              help="Do not record this run in the history (history.sqlite in --out).")
@click.option("--print-findings", is_flag=True, help="Print the finding list too.")
@click.option("--redact", is_flag=True, help="Strip host details; keep scores and findings.")
@click.option("--allow-watcher-findings", is_flag=True,
              help="Pass even when the cage's watcher has findings (by default a cage that "
                   "alarmed fails: it is not a clean cage).")
@JSON_FLAG
def verify(name: str, label: str | None, out_dir: Path, max_score: int | None,
           baseline: Path | None, fail_on_regression: bool, no_history: bool,
           print_findings: bool, redact: bool, allow_watcher_findings: bool,
           as_json: bool) -> None:
    """Measure the running cage NAME from inside with agentsec's probe, and score it; with
    the count of its watcher's findings (what left through allowed hosts and alarmed)."""
    from agentcage.output import document
    from agentcage.verify import verify_cage, verify_plan
    from agentsec.gate import render_gate
    from agentsec.render.terminal import findings_table, scores_table

    plan = verify_plan(name, label=label, out_dir=out_dir, redact=redact, record=not no_history,
                       max_score=max_score, baseline=baseline,
                       fail_on_regression=fail_on_regression)
    measured = verify_cage(name, plan)
    saved, verdict, regression = measured.saved, measured.verdict, measured.regression
    report = saved.report
    watcher = report["target"]["watcher"]  # as the saved report says it, so both agree
    watched = {"enable": watcher["enabled"], "findings": watcher["finding_count"],
               "by_budget": watcher["by_budget"], "quarantined": watcher["quarantined"]}
    alarmed = watched["findings"] > 0 and not allow_watcher_findings
    if as_json:
        _emit(document("verify", cage=name, report=report,
                       passed=not verdict.failed and not alarmed, watcher=watched,
                       gates=[check.as_dict() for check in verdict.checks],
                       regression=None if regression is None else
                       {"regressed": regression.regressed, "reasons": list(regression.reasons)},
                       files={"json": str(saved.json_path),
                              "markdown": str(saved.markdown_path)}))
    else:
        out.print(scores_table([report], title=f"cage {name}, measured from inside"))
        if print_findings:
            out.print(findings_table(report))
        out.print(f"reports: {saved.json_path}  {saved.markdown_path}", markup=False)
        if verdict.baseline is not None:
            out.print(render_gate(verdict.baseline), markup=False)
        if regression is not None and regression.regressed:
            out.print(f"REGRESSION against the previous verify of {report['label']}: "
                      + "; ".join(regression.reasons), markup=False)
        by = ", ".join(f"{k} {v}" for k, v in watched["by_budget"].items())
        out.print(f"watcher: {watched['findings']} finding(s)" + (f" ({by}); see `agentcage "
                  f"watcher findings {name}`" if watched["findings"] else "")
                  if watched["enable"] else "watcher: off", markup=False)
    if measured.history_error is not None:
        raise AgentcageError(str(measured.history_error))
    failures = [verdict.failures()] if verdict.failed else []
    if alarmed:
        failures.append(f"the watcher has {watched['findings']} finding(s): a cage that "
                        "alarmed is not a clean cage (--allow-watcher-findings to pass)")
    if failures:
        err.print(f"gate failed: {'; '.join(failures)}", markup=False)
        sys.exit(EXIT_GATE)


@cli.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              default=Path("reports"), show_default=True, help="Where the cage's report goes.")
def demo(out_dir: Path) -> None:
    """A cage in a fake internet: an allowed and a blocked request, a secret, then `verify`."""
    from agentcage.demo import run_demo
    from agentsec.render.terminal import scores_table

    result = run_demo(out_dir, lambda line: out.print(line, markup=False))
    out.print(scores_table([result.verified.report], title="the cage, measured from inside"))
    out.print(f"report: {result.verified.json_path}", markup=False)
    escaped = [o.agent for o in result.agents if not o.contained]
    if escaped:
        raise AgentcageError(f"not contained: {', '.join(escaped)} (see the lines above)")
    if result.person is not None and not result.person.ok:
        raise AgentcageError("a person's session did not go as it should (see the lines above)")


class Invocation:
    """What a command learns of how it was invoked beyond its arguments (click's `obj` of the
    top context): `terminal`, the controlling terminal of the person who typed it when this
    process has none of its own (a command served by the command server: its client's)."""

    def __init__(self, terminal: int | None = None):
        self.terminal = terminal


def main(argv: Sequence[str] | None = None, terminal: int | None = None) -> int:
    from agentcage.interrupts import on_sigterm

    on_sigterm()  # SIGTERM cleans up like Ctrl-C (finally blocks run)
    try:
        # (done already when called from lean.main; `python -m agentcage.cli` comes here)
        rootless.join_for(list(sys.argv[1:] if argv is None else argv))
        cli.main(args=list(argv) if argv is not None else None, prog_name="agentcage",
                 standalone_mode=False, obj=Invocation(terminal))
    except click.exceptions.Abort as e:  # click's form of an interrupt, or a refused question
        return report_abort(e.__cause__ if isinstance(e.__cause__, KeyboardInterrupt) else None)
    except click.NoSuchOption as e:
        hint = ""
        if e.ctx is not None and any(p.name == "command" for p in e.ctx.command.params):
            # `run`/`exec`: an option before -- is agentcage's, never the command's
            hint = "; a command's own options go after --, e.g. agentcage exec NAME -- ls -l"
        err.print(f"error: {e.format_message()}{hint}", markup=False)
        return EXIT_ERROR
    except click.ClickException as e:
        err.print(f"error: {e.format_message()}", markup=False)
        return EXIT_ERROR
    except AgentcageError as e:
        return report(e)
    except KeyboardInterrupt as e:  # one that came outside click's own handling
        return report_abort(e)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_ERROR)
    except OSError as e:  # the machine said no (a full disk, a read-only or missing path)
        where = f" ({e.filename})" if e.filename else ""
        err.print(f"error: {e.strerror or e}{where}", markup=False)
        return EXIT_ERROR
    except Exception as bug:  # a defect in agentcage itself: still one line, unless debugging
        if os.environ.get("AGENTCAGE_DEBUG") == "1":
            raise
        text = " ".join(str(bug).split())[:300]
        err.print(f"error: internal error: {type(bug).__name__}: {text} (set AGENTCAGE_DEBUG=1 "
                  "for the traceback, and please report it)", markup=False)
        return EXIT_ERROR
    return EXIT_OK


# What ends a command, as the user sees it; lean.py reports through these too.

def report(e: AgentcageError) -> int:
    """One `error: ...` line per line of the message; the exit code."""
    for line in str(e).splitlines():
        err.print(f"error: {line}", markup=False)
    return EXIT_ERROR


def report_abort(interrupt: KeyboardInterrupt | None) -> int:
    """A command stopped by `interrupt` (Ctrl-C: 130, SIGTERM: 143, see interrupts.py), or a
    question refused (None: "aborted", 1). Click has closed the terminal's ^C echo with a
    newline."""
    if interrupt is None:
        err.print("aborted")
        return EXIT_ERROR
    from agentcage.interrupts import ending

    said, code = ending(interrupt)
    with contextlib.suppress(OSError):  # the terminal that hung up cannot be told
        err.print(said)
    return code


if __name__ == "__main__":
    sys.exit(main())
