#!/usr/bin/env bash
# Runs Pigeon's whole test suite: builds everything (server, benchmark tool, tests) and runs the tests.
# Usage: scripts/test.sh [extra `swift test` arguments, e.g. --filter CrashTests]
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v swift >/dev/null 2>&1; then
    echo "error: the Swift toolchain (swift) is not on PATH" >&2
    exit 1
fi

echo "== building (debug)"
swift build --build-tests

echo "== running tests"
swift test --skip-build "$@"
