"""Verifier integrity: did a change make the tests pass by doing the work, or by weakening them?

``agentsec integrity diff`` reads the tree before and after an agent's run (two directories, or
two commits of a git repository, read with ``git`` and never checked out) and reports each way
the change could pass without the work: tests deleted, skipped, deselected or emptied of their
assertions, expected values rewritten beside the code, the code under test patched or stubbed,
early exits, and CI steps that can no longer fail. Each is a finding with a stable ID from
``data/integrity_checks.json`` and the project's fixed severity points.

Only files whose content differs between the two trees are read and parsed. Everything read is
untrusted: it is cut to a size, decoded strictly, and cleaned before it is quoted.

``agentsec integrity could`` asks the other half in a sandbox, with the probe: could the
workload write the tests, their configuration and the CI, or read the answer key? Either half,
or both (``integrity check``), make one verifier-integrity report: scored, gated, recorded and
rendered like a sandbox's (``agentsec.kinds``).

Modules, one job each: ``tree`` (the two trees and what differs), ``paths`` (what kind of file a
path is), ``model`` (what the analysers return), ``python_blocks`` (a test file's top-level
blocks, told apart by text before parsing), ``python_tests`` (``ast``), ``js_tokens`` and
``js_tests`` (a small tokenizer; no JavaScript parser is used), ``config_checks`` (runner
configuration and CI workflows), ``catalogue`` (the checks as data), ``checks`` (running them
over a change), ``could`` (the sandbox's half), ``report`` (the report, Markdown and terminal
lines), ``baseline`` (what a report finds beyond an accepted one), ``sarif``.
"""
