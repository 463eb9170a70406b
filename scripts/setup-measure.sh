#!/usr/bin/env bash
# What the measurement half's own tests need beyond the Python venv, as root:
# Debian's chromium (the report and the console are tested in a real headless browser) and
# promptfoo from npm, pinned, into .tools/npm (the promptfoo join is tested on a real eval).
# Called by setup.sh; safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# The newest promptfoo that runs on Node 20 (0.122 needs Node >= 22.22).
PROMPTFOO_VERSION=0.121.20

log() { printf '[setup-measure] %s\n' "$*" >&2; }

if ! command -v chromium >/dev/null 2>&1; then
    log "installing chromium (headless browser tests)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

installed=$(node -e 'try{console.log(require("./.tools/npm/node_modules/promptfoo/package.json").version)}catch(e){}' 2>/dev/null || true)
if [ "$installed" != "$PROMPTFOO_VERSION" ]; then
    if ! command -v npm >/dev/null 2>&1; then
        log "installing nodejs and npm (promptfoo runs on node)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
    fi
    log "installing promptfoo@$PROMPTFOO_VERSION into .tools/npm"
    mkdir -p .tools/npm
    npm install --prefix .tools/npm --no-audit --no-fund --loglevel=error \
        "promptfoo@$PROMPTFOO_VERSION" >/dev/null
fi
log "ready: chromium, .tools/npm/node_modules/.bin/promptfoo ($PROMPTFOO_VERSION)"
