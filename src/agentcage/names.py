"""The syntax of a cage name (shared by cage.yaml, the state directory and the CLI)."""

import re

# \Z, not $: "$" also matches before a trailing newline, and "name\n" is not a name
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}\Z")
