#!/usr/bin/env bash
# agentsec runs on the Pythons agents' sandboxes have (3.9 and later), not only on the 3.12 the
# cage needs. For the tests that hold it to that, for each older Python named below: a venv
# (.venv-3.X) with agentsec installed from this checkout and its test tools, where
# scripts/test.sh runs agentsec's tests; and for every Python the tests use (3.12 too), a
# wheelhouse (.wheels/3.X: this project and what it needs there, setuptools included), from which
# AGENTS.md's install step runs in a test as written, without a network.
# Finds each Python as python3.X on PATH or as a pyenv interpreter. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

OLDER=(3.9 3.11)
TEST_TOOLS=("pytest>=8" "pytest-timeout>=2.3" "jsonschema>=4.20" "pyyaml>=6")  # the tests' own

log() { printf '[setup-pythons] %s\n' "$*" >&2; }
quiet_pip() { "$@" 2>&1 | grep -v '^WARNING: Location' || true; }

find_version() {  # the interpreter of Python $1 (e.g. 3.9), or nothing
    local want=$1 candidate v
    for candidate in "python$want" "/usr/bin/python$want"; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' \
                2>/dev/null)" = "$want" ]; then
            command -v "$candidate"; return 0
        fi
    done
    if command -v pyenv >/dev/null 2>&1; then
        v=$(pyenv versions --bare 2>/dev/null | grep -E "^${want//./\\.}\.[0-9]+$" | sort -Vr |
            head -1)
        if [ -n "$v" ]; then echo "$(pyenv prefix "$v")/bin/python$want"; return 0; fi
    fi
    return 1
}

wheelhouse() {  # $1: a python; $2: its version
    local house=".wheels/$2"
    mkdir -p "$house"
    quiet_pip "$1" -m pip wheel -q --wheel-dir "$house" . "setuptools>=77" wheel
    ls "$house"/agentcage-*.whl >/dev/null
}

for version in "${OLDER[@]}"; do
    py=$(find_version "$version") || {
        log "no Python $version found (python$version on PATH, or a pyenv interpreter):"
        log "agentsec's tests on Python $version cannot run without it"
        exit 1
    }
    venv=".venv-$version"
    if [ ! -x "$venv/bin/python" ]; then
        log "creating $venv with $py"
        "$py" -m venv "$venv"
    fi
    log "installing agentsec and its test tools into $venv"
    quiet_pip "$venv/bin/python" -m pip install -q --upgrade pip
    quiet_pip "$venv/bin/python" -m pip install -q -e . "${TEST_TOOLS[@]}"
    "$venv/bin/python" -c 'import agentsec.cli' >/dev/null
    wheelhouse "$venv/bin/python" "$version"
done
wheelhouse .venv/bin/python "$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
log "ready: ${OLDER[*]/#/.venv-} and the wheelhouses in .wheels/"
