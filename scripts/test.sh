#!/usr/bin/env bash
# Runs Pigeon's whole test suite: builds everything (server, benchmark tool, tests), starts redis-server and
# PostgreSQL on loopback when they are not reachable (installing them if missing; see scripts/services.sh),
# runs the tests (the API and security suites twice: embedded, then PostgreSQL store + Redis buffer; the terminal client's binary
# in tmux, installed if missing) and stops what it started.
# Usage: scripts/test.sh [extra `swift test` arguments, e.g. --filter CrashTests]
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v swift >/dev/null 2>&1; then
    echo "error: the Swift toolchain (swift) is not on PATH" >&2
    exit 1
fi

export PIGEON_SERVICES_STARTED
PIGEON_SERVICES_STARTED="$(mktemp -t pigeon-test-services.XXXXXX)"
trap 'scripts/services.sh stop; rm -f "$PIGEON_SERVICES_STARTED"' EXIT

echo "== starting services"
eval "$(scripts/services.sh start)"
export PIGEON_TEST_REDIS_URL="${PIGEON_TEST_REDIS_URL:-$PIGEON_REDIS_URL}"
export PIGEON_TEST_POSTGRES_URL="${PIGEON_TEST_POSTGRES_URL:-$PIGEON_POSTGRES_URL}"

# The terminal client's screen test drives `pigeon chat` in tmux.
if ! command -v tmux >/dev/null 2>&1; then
    echo "== installing tmux (for the pigeon chat screen test)"
    if [ "$(id -u)" -eq 0 ]; then as_root=(); elif command -v sudo >/dev/null 2>&1; then as_root=(sudo); else
        echo "error: tmux is missing and installing it needs root" >&2; exit 1; fi
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq || { echo "error: apt-get update failed" >&2; exit 1; }
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux || { echo "error: cannot install tmux" >&2; exit 1; }
fi

echo "== building (debug)"
swift build --build-tests

# The security suites flood sockets, fill kernel buffers and create 1,000-member conversations: a pass of their own,
# so they do not starve the timing-sensitive fault suites of the 2 cores.
security="RegistrationTests|ClientAddressTests|AmplificationTests|AbuseLimitTests|ConnectionShutdownTests|ConnectionGuardTests|StoreDiskFullTests|StoreDeduplicationTests|StreamLimitTests|JWKSTests|JWTKeyTests"

echo "== running tests (embedded store and buffer; Redis and PostgreSQL units)"
swift test --skip-build --skip "PigeonKitTests|PigeonTestSupportTests|PigeonCLITests|$security" "$@"

echo "== running the security tests (limits, attacks through real sockets, JWT keys; embedded store and buffer)"
swift test --skip-build --filter "$security" "$@"

echo "== running the client SDK's tests (real in-process servers, fault proxies, a SIGKILLed app)"
# A pass of their own: run in parallel with the server's timing-sensitive fault suites, the two starve each other
# of the 2 cores.
swift test --skip-build --filter "PigeonKitTests|PigeonTestSupportTests" "$@"

echo "== running the terminal client's tests (the built pigeon and pigeon-server binaries; pigeon chat in tmux)"
swift test --skip-build --filter "PigeonCLITests" "$@"

echo "== running the server tests again against --store postgres --buffer redis"
# (The store and fan-out contracts, event partitions, multi-node, processor concurrency and production fault suites pick
# their backends themselves, and the pure ones need none: run once above.)
PIGEON_TEST_BACKEND=production swift test --skip-build --filter PigeonServerTests \
    --skip "StoreContractTests|MultiNodeTests|ProductionFaultTests|JSONTextTests|ClientOperationParserTests|EventPartitionTests|FanoutContractTests|ProcessorConcurrencyTests|ProcessingScheduleTests" "$@"
