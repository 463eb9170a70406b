"""agentcage: run an AI agent in a cage whose only way out is an inspecting egress gateway."""

import sys

__version__ = "0.1.0"

# The distribution installs on Python 3.9 for agentsec, which measures sandboxes where agents
# run; the cage itself is Python 3.12's (and its dependencies are installed only there). This
# file is read first by every way in (the console script, python -m agentcage.cli), and is
# kept to Python 3.9's syntax so that an older interpreter gets this line, not a traceback.
if sys.version_info < (3, 12):
    raise SystemExit(
        f"agentcage needs Python 3.12 or later (this is {sys.version.split()[0]}); "
        "agentsec, in the same package, runs here"
    )
