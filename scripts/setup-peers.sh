#!/usr/bin/env bash
# Install the peer sandboxes agentsec measures as presets, at pinned versions, into the checkout:
# Anthropic's sandbox-runtime (`srt`) and OpenAI's Codex CLI (`codex sandbox`), from npm, under
# .tools/npm (git-ignored), plus the system packages srt needs (socat, ripgrep).
# Tests and presets find the binaries in .tools/npm/node_modules/.bin.
# Safe to run again: it only installs what is missing or at another version.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="$REPO/.tools/npm"

# Pinned: a preset measures one version; a new version is a new measurement.
NPM_PACKAGES=("@anthropic-ai/sandbox-runtime@0.0.78" "@openai/codex@0.171.0")
APT_PACKAGES=(socat ripgrep)

log() { printf '[setup-peers] %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    log "run as root: it installs system packages"
    exit 1
fi

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing system packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v npm >/dev/null 2>&1; then
    log "npm is missing: install nodejs and npm (apt-get install nodejs npm), then run this again"
    exit 1
fi

installed_version() {  # the version of an npm package under $PREFIX, or nothing
    local manifest="$PREFIX/node_modules/$1/package.json"
    [ -f "$manifest" ] && node -p "require('$manifest').version" 2>/dev/null || true
}

wanted=()
for spec in "${NPM_PACKAGES[@]}"; do
    name="${spec%@*}"
    version="${spec##*@}"
    [ "$(installed_version "$name")" = "$version" ] || wanted+=("$spec")
done
if [ ${#wanted[@]} -gt 0 ]; then
    log "installing from npm: ${wanted[*]}"
    mkdir -p "$PREFIX"
    npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error --save-exact "${wanted[@]}" >/dev/null
fi

# The presets also run as an ordinary user: the tools must be readable and runnable by anyone.
chmod -R a+rX "$REPO/.tools"
for bin in srt codex; do
    [ -x "$PREFIX/node_modules/.bin/$bin" ] || { log "$bin did not install"; exit 1; }
done
log "ready: $PREFIX/node_modules/.bin/srt and codex"
