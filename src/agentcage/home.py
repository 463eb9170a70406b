"""Where agentcage keeps its state: $AGENTCAGE_HOME, else ~/.config/agentcage.

Import-free (os only): `exec` looks for its server there before anything else is loaded."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # (typing.TYPE_CHECKING, without importing typing on this path)
if TYPE_CHECKING:
    from collections.abc import Mapping

HOME_ENV = "AGENTCAGE_HOME"


def state_directory(env: Mapping[str, str] | None = None) -> str:
    """The state root as a process with environment `env` (None: this one's) finds it; the
    command server asks it of a client's."""
    if env is None:
        return os.environ.get(HOME_ENV) or os.path.join(os.path.expanduser("~"), ".config",
                                                        "agentcage")
    if env.get(HOME_ENV):
        return env[HOME_ENV]
    # as os.path.expanduser("~") reads it: HOME, else the password database (the same uid)
    home = env["HOME"].rstrip("/") or "/" if "HOME" in env else os.path.expanduser("~")
    return os.path.join(home, ".config", "agentcage")
