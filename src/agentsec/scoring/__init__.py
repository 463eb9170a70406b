"""Turn a probe output into findings, axis states and a score."""
