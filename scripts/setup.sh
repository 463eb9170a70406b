#!/usr/bin/env bash
# Set up everything agentcage needs on a fresh Debian/Ubuntu machine, as root:
# system packages (bubblewrap, nftables, dnsmasq, ...) and a Python >= 3.12 venv in .venv.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(bubblewrap iproute2 nftables iptables dnsmasq-base keyutils util-linux
    podman runc debootstrap
    busybox-static  # the busybox image the tests build (no registry is reachable from them)
    slirp4netns uidmap  # rootless cages: their uplink, and subordinate id maps
    systemd-container runsc  # systemd-nspawn and gVisor: agentsec presets, measured as sandboxes
    python3-pip  # pip inside the cage (the package-install workload tests)
    vim  # a person editing a cage (agentcage edit) in vi, at a terminal
    tmux)  # the tests drive the agents' TUIs at a terminal (send-keys, capture-pane)

log() { printf '[setup] %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    log "run as root: network namespaces and the test world need it (see README, 'Why root')"
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

# The host tool and the gateway (mitmproxy 12) need Python >= 3.12.
find_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3.13 python3.12 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            command -v "$candidate"; return 0
        fi
    done
    if command -v pyenv >/dev/null 2>&1; then
        for v in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.1[2-9]' | sort -Vr); do
            echo "$(pyenv prefix "$v")/bin/python3"; return 0
        done
    fi
    return 1
}

if [ ! -x .venv/bin/python ]; then
    py=$(find_python) || {
        log "no Python >= 3.12 found: install python3.12 (or set PYTHON=/path/to/python3.12)"
        exit 1
    }
    log "creating .venv with $py"
    "$py" -m venv .venv
fi

# Claude Code and Codex CLI (run in cages by the tests and the demo) and the peer sandboxes
# agentsec's presets measure (srt, Codex's own), pinned, with npm install -g.
./scripts/setup-agents.sh

log "installing agentcage and its dependencies into .venv"
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -e '.[gateway,dev]' 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -c 'import agentsec, agentcage, mitmproxy' >/dev/null

# The measurement half's browser and promptfoo tests need chromium and a pinned promptfoo.
./scripts/setup-measure.sh
log "ready: .venv/bin/agentsec and .venv/bin/agentcage"
