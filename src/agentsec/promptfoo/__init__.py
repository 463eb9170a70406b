"""Alongside a red-team run: promptfoo's eval output joined with a sandbox report, and the
promptfoo assertion that records the sandbox's score in an eval."""
