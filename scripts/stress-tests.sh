#!/usr/bin/env bash
# Runs the timing-sensitive suites (several nodes, killed servers, limits, connection guards, SDK sync) again and again
# while a CPU hog keeps both cores busy, and reports the pass rate: a test that waits for a fixed time, or bounds a wait
# too tightly, fails here long before it fails CI.
#
#   scripts/stress-tests.sh [runs (default 5)] [suite filter (default: the timing-sensitive suites)]
#
# The hog is `stress-ng --cpu N` (N = the machine's cores; installed from Debian's packages when missing) at normal
# priority. Starts redis-server and PostgreSQL like scripts/test.sh (and stops what it started). Exits non-zero when a
# run failed; each failed run's log is kept under .build/stress-logs.
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${1:-5}"
filter="${2:-MultiNodeTests|CrashTests|ProductionFaultTests|NodeIdentityTests|AbuseLimitTests|StreamLimitTests|ConnectionGuardTests|ConnectionShutdownTests|SyncTests|CrashAndPersistenceTests}"

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
        echo "error: installing $* needs root" >&2; exit 1; fi
}
if ! command -v stress-ng >/dev/null 2>&1; then
    echo "== installing stress-ng (Debian) for the CPU hog"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || { echo "error: apt-get update failed" >&2; exit 1; }
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng || { echo "error: cannot install stress-ng" >&2; exit 1; }
fi

export PIGEON_SERVICES_STARTED
PIGEON_SERVICES_STARTED="$(mktemp -t pigeon-stress-services.XXXXXX)"
hog=""
cleanup() {
    if [ -n "$hog" ]; then kill "$hog" 2>/dev/null || true; wait "$hog" 2>/dev/null || true; fi
    scripts/services.sh stop
    rm -f "$PIGEON_SERVICES_STARTED"
}
trap cleanup EXIT
eval "$(scripts/services.sh start)"
export PIGEON_TEST_REDIS_URL="${PIGEON_TEST_REDIS_URL:-$PIGEON_REDIS_URL}"
export PIGEON_TEST_POSTGRES_URL="${PIGEON_TEST_POSTGRES_URL:-$PIGEON_POSTGRES_URL}"

echo "== building (debug)"
swift build --build-tests

logs=.build/stress-logs
mkdir -p "$logs"
cores="$(nproc)"
echo "== CPU hog: stress-ng --cpu $cores"
stress-ng --cpu "$cores" --timeout 0 --quiet &
hog=$!

passed=0
failed=0
for run in $(seq 1 "$runs"); do
    log="$logs/run-$run.log"
    started=$SECONDS
    if swift test --skip-build --filter "$filter" --experimental-maximum-parallelization-width "${PIGEON_TEST_PARALLEL_WIDTH:-6}" >"$log" 2>&1; then
        passed=$((passed + 1))
        echo "run $run: passed ($((SECONDS - started)) s)"
        rm -f "$log"
    else
        failed=$((failed + 1))
        echo "run $run: FAILED ($((SECONDS - started)) s); log: $log"
        grep -E "✘ Test .*(recorded an issue|failed)" "$log" | head -20 || true
    fi
done
echo "stress: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
