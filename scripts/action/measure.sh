#!/usr/bin/env bash
# The GitHub Action's measuring step (action.yml), kept here so it can be run and tested
# anywhere: measure, write every report format, put the score in the job summary and the step's
# outputs, and exit with agentsec's own code (0 ok, 1 error, 2 gate failed) only after all of it,
# so a failed gate still leaves its evidence for the upload step.
#
# Reads INPUT_* (see action.yml), GITHUB_OUTPUT and GITHUB_STEP_SUMMARY (files; when unset,
# nothing is written there). Needs `agentsec` on PATH.
set -uo pipefail

out=${INPUT_OUT_DIR:-agentsec-reports}
summary=${GITHUB_STEP_SUMMARY:-/dev/null}
outputs=${GITHUB_OUTPUT:-/dev/null}
mkdir -p "$out"

fail() {
    echo "agentsec action: error: $*" >&2
    printf '### agentsec: not measured\n\n%s\n' "$*" >>"$summary"
    { echo "score="; echo "exit-code=1"; } >>"$outputs"
    exit 1
}

if [ -n "${INPUT_PRESET:-}" ]; then
    cmd=(agentsec blast-radius preset "$INPUT_PRESET")
    [ -n "${INPUT_IMAGE:-}" ] && cmd+=(--image "$INPUT_IMAGE")
    default_label=$INPUT_PRESET${INPUT_IMAGE:+_$INPUT_IMAGE}
elif [ -n "${INPUT_IMAGE:-}" ]; then
    engine=${INPUT_ENGINE:-docker}
    case "$engine" in docker | podman) ;; *) fail "engine must be docker or podman, not '$engine'" ;; esac
    cmd=(agentsec blast-radius "$engine" "$INPUT_IMAGE")
    default_label=${engine}_$INPUT_IMAGE
else
    fail "give a preset, or an image (with flags)"
fi

label=${INPUT_LABEL:-$default_label}
stem=$(printf '%s' "$label" | tr -c 'A-Za-z0-9._-' '_')
cmd+=(--label "$label" --out "$out" --json
    --sarif "$out/$stem.sarif" --junit "$out/$stem.junit.xml" --job-summary "$summary")
[ -n "${INPUT_MAX_SCORE:-}" ] && cmd+=(--max-score "$INPUT_MAX_SCORE")
[ -n "${INPUT_BASELINE:-}" ] && cmd+=(--baseline "$INPUT_BASELINE")
if [ -n "${INPUT_FLAGS:-}" ]; then
    read -r -a flags <<<"$INPUT_FLAGS"
    cmd+=(-- "${flags[@]}")
fi

echo "agentsec action: ${cmd[*]}" >&2
"${cmd[@]}" >"$out/run.json"
rc=$?

# The run document names the report and holds the score; no document, nothing was measured.
read_run() {
    python3 - "$out/run.json" <<'PY'
import json, sys
try:
    doc = json.load(open(sys.argv[1], encoding="utf-8"))
    print(doc["report"]["summary"]["score"])
    print(doc["files"]["json"])
except (OSError, ValueError, KeyError, TypeError):
    print()
    print()
PY
}
{ read -r score; read -r report; } < <(read_run)

if [ -n "$report" ] && [ -f "$report" ]; then
    agentsec report "$report" --out "${report%.json}.html" >&2 || rc=1
    {
        echo "score=$score"
        echo "report=$report"
        echo "sarif=$out/$stem.sarif"
    } >>"$outputs"
else
    printf '### agentsec: not measured\n\nagentsec exited %s before writing a report; see the step log.\n' \
        "$rc" >>"$summary"
    echo "score=" >>"$outputs"
fi
echo "exit-code=$rc" >>"$outputs"
exit "$rc"
