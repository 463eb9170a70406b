#!/usr/bin/env bash
# Quick start, command 1 (as root): set everything up, then build a fake internet out of network
# namespaces and measure three sandboxes in it: an open configuration and two bubblewrap ones.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/agentsec demo "$@"
