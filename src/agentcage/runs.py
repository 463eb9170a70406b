"""`agentcage run`: one session of an agent in a project, in a cage made for it and removed when
it ends, keeping what the project's next session should find.

A run's cage is named after what it runs and where (`project_cage_name`: the scaffold, the
project directory's name and a hash of its path), or `--name`. What the cage keeps between
runs lives in its state directory under that name and survives the run: its secrets (stored
encrypted, asked for once with `-s`) and its named volumes (the agent's home: its settings,
its sessions for `--resume`). Everything else (namespaces, processes, audit log, capture) goes
with the run. `agentcage ls` lists what is kept (status `kept`); `secret rm NAME KEY`, `run
--forget` and `destroy NAME` remove it.

One run at a time per name: a second `run` of the same project while one is going is refused
with the way to join it (`agentcage exec NAME -- ...`) or to run apart (`--name`). A run that
was killed leaves its claim (owner.pid) behind; the next run of that name cleans it up.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agentcage.errors import ConfigError, StateError
from agentcage.state import KEPT, SECRETS, VOLUMES, CageDir, atomic_write

if TYPE_CHECKING:
    from agentcage.cages import CageService
    from agentcage.config.spec import CageSpec

_SLUG = re.compile(r"[^a-z0-9]+")


def project_cage_name(prefix: str, project: Path) -> str:
    """The cage name of `prefix`'s runs in `project`: readable, and one per directory (the
    hash is of its resolved path)."""
    path = project.resolve()
    slug = _SLUG.sub("-", path.name.lower()).strip("-")[:24].strip("-") or "root"
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:6]
    prefix = _SLUG.sub("-", prefix.lower()).strip("-")[:24] or "run"
    return f"{prefix}-{slug}-{digest}"


@dataclass(frozen=True)
class RunRequest:
    name: str
    make_spec: Callable[[], CageSpec]
    base: Path  # where relative volume paths start (cage.yaml's directory, or the cwd)
    project: Path | None
    command: Sequence[str] | None  # None: the configuration's own command
    interactive: bool
    # the secrets the run needs (`-s`): each is taken from the store, else `ask`ed for
    secrets: Sequence[str] = ()
    ask: Callable[[str], bytes] | None = None
    forget: bool = False  # the `secrets` are removed from the store when the run ends
    fresh: bool = False  # the named volumes start empty (the kept ones are deleted)
    # told, before the command starts, which secrets were newly stored (and where)
    stored: Callable[[list[str], str], None] = field(default=lambda keys, backend: None)
    # told, before the command starts, one line on the credential files the cage masks
    masked: Callable[[str], None] = field(default=lambda line: None)


def run(service: CageService, request: RunRequest) -> int:
    """Create the run's cage, run its command, and remove everything but what is kept,
    whatever happens; the command's exit code."""
    cage = service.store.cage(request.name)
    _claim(service, cage)
    gateway = None
    spec: CageSpec | None = None
    try:
        if request.secrets:  # asked before the gateway is begun: a person may take a while
            spec = request.make_spec()
            _check_name(spec, request.name)
            newly, backend = need_secrets(cage, spec, request.secrets, request.ask)
            if newly:
                request.stored(newly, backend)
        if request.fresh:
            shutil.rmtree(cage.root / VOLUMES, ignore_errors=True)
        # The gateway process is begun before the configuration is read, when it can be, so
        # that its slow start-up (importing mitmproxy) overlaps everything else; it opens no
        # socket until the backend hands it its settings.
        gateway = service.backend.prespawn_gateway(cage)
        if spec is None:
            spec = request.make_spec()
            _check_name(spec, request.name)
        service.backend.validate(spec)
        from agentcage.backends.profile import resolve_volumes

        # not durable: the run's cage is removed when it ends (its secrets and volumes, kept,
        # are written by their own code)
        service.write_state(cage, spec, *resolve_volumes(spec, request.base, request.project,
                                                          (service.store.root,)),
                            durable=False)
        from agentcage.backends import credmasks

        if (masked := credmasks.listed(cage)):
            request.masked(credmasks.describe(masked))
        return service.backend.run(cage, spec, list(request.command or spec.command),
                                   request.interactive, gateway=gateway)
    finally:
        if gateway is not None:
            gateway.close()  # a fork asked for and not taken exits
        service.backend.stop(cage, grace=0)  # its audit log goes with it: no summary to wait for
        if request.forget and spec is not None:
            forget_secrets(cage, spec, request.secrets)
        service.store.remove(request.name, keep=KEPT)


def _check_name(spec: CageSpec, name: str) -> None:
    if spec.name != name:
        raise StateError(f"the configuration names cage {spec.name!r}, not {name!r}")


def _claim(service: CageService, cage: CageDir) -> None:
    """Make the cage this run's, or refuse: a persistent cage of that name, or a run of it
    that is going. A run that died leaves its claim; its remains are cleaned up here."""
    from agentcage.backends import host

    with service.store.lock():
        owner = _owner(cage)
        if owner is not None and host.alive(owner):
            raise StateError(
                f"a run of this project is going as cage {cage.name} (pid {owner}): `agentcage "
                f"exec {cage.name} -- COMMAND` joins it, or --name NAME runs another cage")
        if owner is None and cage.exists():
            raise StateError(f"cage {cage.name!r} exists and is not a run's; choose another "
                             "--name, or `agentcage exec` into it")
        if owner is not None or cage.runtime.exists():  # the remains of a run that died
            service.backend.stop(cage, grace=0)
            service.store.remove(cage.name, keep=KEPT)
        service.store.create(cage.name)
        atomic_write(cage.owner, str(os.getpid()), durable=False)


def _owner(cage: CageDir) -> int | None:
    try:
        return int(cage.owner.read_text())
    except (OSError, ValueError):
        return None


def need_secrets(cage: CageDir, spec: CageSpec, keys: Sequence[str],
                 ask: Callable[[str], bytes] | None) -> tuple[list[str], str]:
    """Make sure each of `keys` is stored for the cage: taken from its store, else asked for
    (`ask`) and stored. Refused: a key the configuration injects nowhere. The keys stored now,
    and the store's backend."""
    from agentcage.secrets import cage as cage_secrets
    from agentcage.secrets import check_env_name, check_value, set_secret

    for key in keys:
        try:
            check_env_name(key)
        except ValueError as e:
            raise ConfigError(f"-s {key}: {e}") from None
        if key not in spec.secret_env:
            injected = ", ".join(spec.secret_env) or "none"
            raise ConfigError(f"-s {key}: the cage injects no such secret (its secret_injection "
                              f"rules and relays name: {injected}); add a rule with -c "
                              "cage.yaml")
    choice = cage_secrets.store_of(cage, spec.secrets_backend, spec.allow_plaintext)
    book = cage_secrets.book_of(cage)
    stored = set(choice.store.names())
    newly = []
    for key in dict.fromkeys(keys):
        if key in stored:
            continue
        if ask is None:
            raise ConfigError(f"-s {key}: not stored for cage {cage.name}, and nothing to ask "
                              "with")
        try:
            value = check_value(key, ask(key))
        except ValueError as e:
            raise ConfigError(f"-s {key}: {e}") from None
        set_secret(choice.store, book, key, value)
        newly.append(key)
    return newly, choice.backend


def forget_secrets(cage: CageDir, spec: CageSpec, keys: Sequence[str]) -> None:
    """Remove `keys` from the cage's store (`run --forget`)."""
    if not keys or not (cage.root / SECRETS).is_dir():
        return
    from agentcage.secrets import cage as cage_secrets
    from agentcage.secrets import remove_secret

    choice = cage_secrets.store_of(cage, spec.secrets_backend, spec.allow_plaintext)
    book = cage_secrets.book_of(cage)
    for key in keys:
        remove_secret(choice.store, book, key)
    if not choice.store.names():  # nothing stored is nothing kept
        shutil.rmtree(cage.root / SECRETS, ignore_errors=True)
