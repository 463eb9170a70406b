#!/usr/bin/env bash
# The coding agents and peer sandboxes the tests, the demo and agentsec's presets run, installed
# the way users install them: `npm install -g`, so they sit in the host's /usr (which a cage
# mounts read-only) and are on PATH for every user (the presets also run as an ordinary user).
#   Claude Code, Codex CLI and pi: run inside cages (tests/agentcage/test_real_agents.py, the
#   demo)
#   Anthropic's sandbox-runtime (`srt`, needs socat and ripgrep), Codex's own sandbox and
#   firejail (Debian's, with apt): measured as agentsec presets (srt-*, codex-*, firejail-*)
# Pinned versions (a preset measures one version; a new one is a new measurement). Safe to run
# again: installs only what is missing or at another version. A lock keeps two runs on one
# machine from installing at the same time.
set -euo pipefail

NPM_PACKAGES=("@anthropic-ai/claude-code@2.1.332" "@openai/codex@0.171.0"
              "@anthropic-ai/sandbox-runtime@0.0.78"
              "@mariozechner/pi-coding-agent@0.73.1")
APT_PACKAGES=(socat ripgrep fd-find firejail)  # fd-find: pi's find tool; firejail: a preset

log() { printf '[setup-agents] %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    log "run as root: it installs system packages and global npm packages"
    exit 1
fi
missing=()
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
        missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing system packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

exec 9>/var/lock/agentcage-setup-agents.lock
flock 9
root=$(npm root -g)
wanted=()
for spec in "${NPM_PACKAGES[@]}"; do
    name=${spec%@*}
    version=${spec##*@}
    have=$(node -p "require('$root/$name/package.json').version" 2>/dev/null || true)
    [ "$have" = "$version" ] || wanted+=("$spec")
done
if [ ${#wanted[@]} -gt 0 ]; then
    log "installing ${wanted[*]} (npm install -g)"
    npm install -g --no-fund --no-audit --loglevel=error "${wanted[@]}" >/dev/null
fi
for bin in claude codex pi srt firejail; do
    command -v "$bin" >/dev/null || { log "$bin is not on PATH after the install"; exit 1; }
done
