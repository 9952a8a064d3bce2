#!/usr/bin/env bash
# Runs the web tests, each a script in Tests/Web/test_*.py run against the built pigeon-server binary: the contract
# test (schemathesis against the live server's /openapi.json), the browser tests (headless Chromium through Playwright
# on the demo and admin pages and PigeonJS) and PigeonJS's types (tsc against its modules). Installs what is missing:
# chromium and node-typescript (Debian), playwright and schemathesis (PyPI). Fails loudly when one cannot be
# installed. Screenshots and server logs go to .build/web-artefacts.
# Usage: scripts/web-tests.sh [test file names, e.g. test_demo.py] (after `swift build`)
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
        echo "error: installing $* needs root" >&2; exit 1; fi
}

# The emoji font only makes the screenshots show the ticks (⏰ ⚠️); the DOM assertions do not need it.
missing=()
if ! command -v chromium >/dev/null 2>&1 && [ -z "${PIGEON_CHROMIUM:-}" ]; then missing+=(chromium); fi
if ! dpkg -s fonts-noto-color-emoji >/dev/null 2>&1; then missing+=(fonts-noto-color-emoji); fi
# The TypeScript compiler checks PigeonJS's declarations against its modules (test_types.py).
if ! command -v tsc >/dev/null 2>&1; then missing+=(node-typescript); fi
if [ "${#missing[@]}" -gt 0 ]; then
    echo "== installing ${missing[*]} (Debian) for the browser tests"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || { echo "error: apt-get update failed" >&2; exit 1; }
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" || { echo "error: cannot install ${missing[*]}" >&2; exit 1; }
fi
export PIGEON_CHROMIUM="${PIGEON_CHROMIUM:-$(command -v chromium)}"

python="${PYTHON:-python3}"
if ! "$python" -c "import playwright, schemathesis" >/dev/null 2>&1; then
    echo "== installing playwright and schemathesis (PyPI; Playwright drives the system chromium, no browser download)"
    "$python" -m pip install -q --disable-pip-version-check "playwright==1.65.2" "schemathesis==4.32.5" \
        || { echo "error: cannot install playwright and schemathesis with pip" >&2; exit 1; }
fi

export PIGEON_SERVER_BINARY="${PIGEON_SERVER_BINARY:-$(swift build --show-bin-path)/pigeon-server}"
if [ ! -x "$PIGEON_SERVER_BINARY" ]; then
    echo "error: $PIGEON_SERVER_BINARY is missing: run swift build first" >&2
    exit 1
fi
export PIGEON_WEB_ARTEFACTS="${PIGEON_WEB_ARTEFACTS:-$PWD/.build/web-artefacts}"
mkdir -p "$PIGEON_WEB_ARTEFACTS"

if [ "$#" -gt 0 ]; then tests=("${@/#/Tests/Web/}"); else tests=(Tests/Web/test_*.py); fi
failed=()
for test in "${tests[@]}"; do
    echo "== $test"
    # A hung browser or server fails the test loudly instead of running into CI's own limit.
    rc=0
    timeout --kill-after=10 "${PIGEON_WEB_TEST_SECONDS:-600}" "$python" "$test" || rc=$?
    if (( rc == 124 || rc == 137 )); then echo "error: $test did not finish within ${PIGEON_WEB_TEST_SECONDS:-600} s; killed it" >&2; fi
    if (( rc != 0 )); then failed+=("$test"); fi
done
echo "web test artefacts (screenshots, server logs): $PIGEON_WEB_ARTEFACTS"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "error: web tests failed: ${failed[*]}" >&2
    exit 1
fi
