"""`agentcage edit NAME`: the cage's cage.yaml in the user's editor, then applied as `cage
update` applies a file.

What opens is the cage.yaml the cage was last made or updated from, as its user wrote it (its
comments kept; cages.py `source`), in a private temporary file. When the editor exits:
unchanged text changes nothing; valid text is applied (validated by the model, then `update`:
the secrets, CA, logs, volumes, grants and create's options kept, a restart only when more
than the domain lists changed) and becomes the text the next edit opens; invalid text changes
nothing, and the error is shown with the choice to edit it again, or to leave with the text
kept in the cage's directory (nothing typed is lost). The file the cage was made from is not
touched: this is the cage's own copy.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentcage.errors import AgentcageError, ConfigError

REJECTED_FILE = "cage.edit-rejected.yaml"  # in the cage's directory: an edit that was refused


def editor_command() -> list[str]:
    """$VISUAL, else $EDITOR, else vi: split as a shell would (`code --wait` works)."""
    for var in ("VISUAL", "EDITOR"):
        value = os.environ.get(var, "").strip()
        if value:
            return shlex.split(value)
    return ["vi"]


def run_editor(path: Path) -> None:
    argv = [*editor_command(), str(path)]
    if shutil.which(argv[0]) is None:
        raise ConfigError(f"editor {argv[0]!r} not found; set VISUAL or EDITOR")
    code = subprocess.run(argv).returncode
    if code != 0:
        raise ConfigError(f"the editor exited with {code}; nothing changed")


def edit(name: str, service: Any, again: Callable[[str], bool],
         applied: Callable[[dict[str, Any]], None]) -> bool:
    """Edit the cage `name` (`service`: a CageService). `again(error)`: whether to reopen the
    editor after an invalid edit; `applied(result)`: shows what `update` did. False when
    nothing changed."""
    from agentcage.config.load import load_config_text

    source, text = service.source(name)
    cage_root = service.store.cage(name).root
    base = source.parent if source is not None else Path(service.backend.meta(
        service.store.cage(name)).project)
    workdir = Path(tempfile.mkdtemp(prefix="agentcage-edit-"))  # 0700: ours alone
    try:
        path = workdir / f"{name}.yaml"
        current = text
        while True:
            path.write_text(current)
            os.chmod(path, 0o600)
            run_editor(path)
            edited = path.read_text()
            if edited == text:
                return False
            try:
                config = load_config_text(edited, source=f"the edited cage.yaml of {name}")
                if config.name != name:
                    raise ConfigError(f"the edited cage.yaml names cage {config.name!r}; "
                                      f"an edit keeps the name {name!r}")
                result = service.update(name, config, base)
            except AgentcageError as e:
                if again(str(e)):
                    current = edited
                    continue
                rejected = cage_root / REJECTED_FILE
                rejected.write_text(edited)
                os.chmod(rejected, 0o600)
                raise ConfigError(f"{e}; nothing changed (the edit is kept in {rejected})") \
                    from None
            service.record_source(name, source, edited)
            applied(result)
            return True
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
