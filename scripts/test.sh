#!/usr/bin/env bash
# Quick start, command 2 (as root): set everything up, then lint and run the whole test suite.
# The tests build real namespaces, bubblewrap sandboxes and mitmproxy gateways; root is required.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/ruff check src tests bench
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
