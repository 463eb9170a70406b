#!/usr/bin/env bash
# Quick start, command 2 (as root): set everything up, then lint and run the whole test suite,
# then agentsec's tests again on the older Pythons it runs on (scripts/setup-pythons.sh).
# The tests build real namespaces, bubblewrap sandboxes and mitmproxy gateways; root is required.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/setup-pythons.sh
.venv/bin/ruff check src tests bench
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
for arg in "$@"; do
    if [ -e "${arg%%::*}" ]; then  # tests named by path: those alone, on the cage's Python
        echo "== agentsec's tests on Python 3.9 and 3.11: not run (tests were named by path)"
        exit 0
    fi
done
for version in 3.9 3.11; do
    echo "== agentsec's tests on Python $version"
    ".venv-$version/bin/python" -m pytest "$@" tests/agentsec
done
