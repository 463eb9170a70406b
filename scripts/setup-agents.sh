#!/usr/bin/env bash
# The coding agents the tests and the demo run inside cages, installed the way the scaffolds
# tell users to: `npm install -g`, so they sit in the host's /usr, which a cage mounts
# read-only. Pinned versions; safe to run again (installs only what is missing or different).
# A lock keeps two runs on one machine from installing at the same time.
set -euo pipefail

AGENTS=("@anthropic-ai/claude-code@2.1.332" "@openai/codex@0.171.0")

log() { printf '[setup-agents] %s\n' "$*" >&2; }

if ! command -v npm >/dev/null 2>&1; then
    log "installing nodejs and npm"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi

exec 9>/var/lock/agentcage-setup-agents.lock
flock 9
missing=()
for spec in "${AGENTS[@]}"; do
    name=${spec%@*}
    want=${spec##*@}
    have=$(npm ls -g --depth=0 --json 2>/dev/null |
           python3 -c "import json,sys; d=json.load(sys.stdin).get('dependencies',{}); \
print(d.get('$name',{}).get('version',''))" 2>/dev/null || true)
    [ "$have" = "$want" ] || missing+=("$spec")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} (npm install -g)"
    npm install -g --no-fund --no-audit --loglevel=error "${missing[@]}" >/dev/null
fi
for bin in claude codex; do
    command -v "$bin" >/dev/null || { log "$bin is not on PATH after the install"; exit 1; }
done
