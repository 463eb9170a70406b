#!/usr/bin/env bash
# Quick start, command 1 (as root): set everything up, then, in a fake internet built from
# network namespaces, (1) measure four sandboxes with agentsec and (2) build a cage, try it from
# inside, and measure it with agentsec (agentcage verify). Reports go to reports/.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/agentsec demo "$@"
echo
exec .venv/bin/agentcage demo "$@"
