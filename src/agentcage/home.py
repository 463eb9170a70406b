"""Where agentcage keeps its state: $AGENTCAGE_HOME, else ~/.config/agentcage.

Import-free (os only): `exec` looks for its server there before anything else is loaded."""

from __future__ import annotations

import os

HOME_ENV = "AGENTCAGE_HOME"


def state_directory() -> str:
    return os.environ.get(HOME_ENV) or os.path.join(os.path.expanduser("~"), ".config",
                                                    "agentcage")
