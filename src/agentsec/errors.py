"""The exception tree of agentsec. The CLI catches only AgentsecError and prints one line."""


class AgentsecError(Exception):
    """Base of every error agentsec reports to its user (exit code 1)."""


class CaptureError(AgentsecError):
    """A probe output that cannot be read: not JSON, truncated, or not a probe's output."""


class ReportError(AgentsecError):
    """A saved report that cannot be read or is not a schema_version 1 report."""


class OutputError(AgentsecError):
    """A report or another output file that cannot be written where it was asked for."""


class ProbeRunError(AgentsecError):
    """The probe could not be started, or produced no output, in the target sandbox."""


class CatalogueError(AgentsecError):
    """The shipped data files are inconsistent (a packaging bug, never user input)."""
