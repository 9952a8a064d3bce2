#!/usr/bin/env bash
# Runs Pigeon's whole test suite: builds everything (server, benchmark tool, tests), starts redis-server and
# PostgreSQL on loopback when they are not reachable (installing them if missing; see scripts/services.sh),
# runs the tests (the API and security suites twice: embedded, then PostgreSQL store + Redis buffer; the terminal client's binary
# in tmux, installed if missing; the web tests: schemathesis and headless Chromium, scripts/web-tests.sh) and stops what it started.
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

# Each pass runs under a watchdog: a test that hangs fails the run loudly within the pass's limit, naming the
# tests that started and never ended and what their servers were doing, instead of running into CI's own limit.
pass_minutes="${PIGEON_TEST_PASS_MINUTES:-12}"
# How many tests of a pass run at once. Swift Testing otherwise starts every test of a pass together: in the backend
# pass, 163 tests and the 20-odd servers, Redis and PostgreSQL they start shared 2 cores, the test process's 2
# cooperative threads had hundreds of jobs queued, and whatever a test bounds in time lost to the queue (measured:
# 247 partition leases of 2 s expired in one pass, leases never renewed in time and Redis operations past their
# deadline; with 6 at once, none expired and the pass took as long: 95 s against 87-103 s).
parallel_width="${PIGEON_TEST_PARALLEL_WIDTH:-6}"
run_pass() {
    local title="$1"; shift
    echo "== $title"
    local log events pid rc
    log="$(mktemp -t pigeon-test-pass.XXXXXX)"
    # Swift Testing's event stream is written as the tests go (swift test's own output is buffered): what the
    # watchdog reads to name the tests that started and never ended.
    events="$log.events"
    setsid "$@" --experimental-maximum-parallelization-width "$parallel_width" \
        --experimental-event-stream-output "$events" --experimental-event-stream-version 0 >"$log" 2>&1 &
    pid=$!
    tail -n +1 -f --pid="$pid" "$log" &
    local tailer=$!
    local started=$SECONDS
    while kill -0 "$pid" 2>/dev/null; do
        if (( SECONDS - started > pass_minutes * 60 )); then
            sleep 1
            echo "error: the pass '$title' did not finish within $pass_minutes minutes (PIGEON_TEST_PASS_MINUTES); killed it" >&2
            echo "error: tests that started and never ended:" >&2
            python3 - "$events" >&2 <<'PY' || true
import json, sys
running = {}
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    try:
        record = json.loads(line)
    except ValueError:
        continue
    if record.get("kind") != "event":
        continue
    event = record["payload"]
    if event.get("kind") == "testStarted":
        running[event["testID"]] = event.get("instant", {}).get("since1970", 0)
    elif event.get("kind") == "testEnded":
        running.pop(event["testID"], None)
for test, since in sorted(running.items(), key=lambda item: item[1]):
    print("    " + test)
PY
            echo "error: the pass's processes:" >&2
            ps -o pid,etime,stat,args -g "$pid" >&2 || true
            if command -v psql >/dev/null 2>&1 && [ -n "${PIGEON_TEST_POSTGRES_URL:-}" ]; then
                echo "error: PostgreSQL sessions that are not idle:" >&2
                psql "$PIGEON_TEST_POSTGRES_URL" -X -c "SELECT pid, state, wait_event_type, wait_event, now() - xact_start AS in_transaction, left(query, 100) AS query FROM pg_stat_activity WHERE backend_type = 'client backend' AND state <> 'idle' AND pid <> pg_backend_pid()" >&2 || true
            fi
            kill -TERM -- "-$pid" 2>/dev/null || true
            sleep 5
            kill -KILL -- "-$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
            wait "$tailer" 2>/dev/null || true
            rm -f "$log" "$events"
            exit 1
        fi
        sleep 2
    done
    rc=0
    wait "$pid" || rc=$?
    wait "$tailer" 2>/dev/null || true
    rm -f "$log" "$events"
    if (( rc != 0 )); then
        echo "error: the pass '$title' failed (exit status $rc)" >&2
        exit "$rc"
    fi
}

# The suites that start servers and Redis of their own, kill them, or drive PostgreSQL and Redis directly: a pass of
# their own, so that fewer processes and connections compete for the 2 cores at once (in one pass with the API
# suites, slow machines let too few sends through before a kill and missed reconnection deadlines).
backends="CrashTests|BrowserServerProcessTests|PushCrashTests|MultiNodeTests|PushMultiNodeTests|ProductionFaultTests|RedisStreamsBufferTests|PigeonRedisTests|ProcessorConcurrencyTests|EventPartitionTests|StoreContractTests|GroupStoreContractTests|FanoutContractTests|PostgresBatchTests|PostgresAttachmentTests|NodeIdentityTests|BackupTests|AtRestEncryptionTests"

# The tests that measure this process's resident memory while an upload streams through it: each alone in its
# process (a suite running beside them allocates too, and their figure is then its noise).
memory_tests=(aHundredMebibyteUploadIsStreamedNotHeld aLargeUploadAndItsDownloadStreamInBoundedMemory a64MiBUploadIsStreamedInBoundedMemory)
memory=$(IFS='|'; echo "${memory_tests[*]}")

# The pure rules first: no I/O, seconds; a broken rule fails the run before anything slow starts.
run_pass "running the pure rules (PigeonDomainTests: no I/O, no server)" \
    swift test --skip-build --filter PigeonDomainTests "$@"

run_pass "running tests (embedded store and buffer)" \
    swift test --skip-build --skip "PigeonDomainTests|PigeonKitTests|PigeonTestSupportTests|PigeonCLITests|$security|$backends|$memory" "$@"

run_pass "running the backend and fault tests (PostgreSQL, Redis, several nodes, killed servers)" \
    swift test --skip-build --filter "$backends" --skip "$memory" "$@"

for test in "${memory_tests[@]}"; do
    run_pass "running $test alone (resident memory while an upload streams)" swift test --skip-build --filter "$test" "$@"
done
PIGEON_TEST_BACKEND=production run_pass "running aHundredMebibyteUploadIsStreamedNotHeld alone against --store postgres --buffer redis" \
    swift test --skip-build --filter aHundredMebibyteUploadIsStreamedNotHeld "$@"

run_pass "running the security tests (limits, attacks through real sockets, JWT keys; embedded store and buffer)" \
    swift test --skip-build --filter "$security" "$@"

# The client SDK's tests get a pass of their own: run in parallel with the server's timing-sensitive fault suites,
# the two starve each other of the 2 cores.
run_pass "running the client SDK's tests (real in-process servers, fault proxies, a SIGKILLed app)" \
    swift test --skip-build --filter "PigeonKitTests|PigeonTestSupportTests" "$@"

run_pass "running the terminal client's tests (the built pigeon and pigeon-server binaries; pigeon chat in tmux)" \
    swift test --skip-build --filter "PigeonCLITests" "$@"

# The store and fan-out contracts, event partitions, multi-node, processor concurrency and production fault suites pick
# their backends themselves, and the pure ones need none: run once above. (The API suites used to need two passes of
# their own here: with Foundation's Process, which waits in select(), the test process hung past 1,024 descriptors.
# Test servers are started with posix_spawn now (PigeonTestSupport's ChildProcess), and 6 tests at a time hold far
# fewer.)
production_skip="StoreContractTests|GroupStoreContractTests|BrowserServerProcessTests|MultiNodeTests|PushMultiNodeTests|ProductionFaultTests|EventPartitionTests|FanoutContractTests|ProcessorConcurrencyTests|PostgresBatchTests|PostgresAttachmentTests|AtRestEncryptionTests|CrashTests|$security|$memory"
PIGEON_TEST_BACKEND=production run_pass "running the server's tests again against --store postgres --buffer redis" \
    swift test --skip-build --filter PigeonServerTests --skip "$production_skip" "$@"

PIGEON_TEST_BACKEND=production run_pass "running the security and crash tests again against --store postgres --buffer redis" \
    swift test --skip-build --filter "$security|CrashTests" "$@"

# The web tests (schemathesis against the live server's /openapi.json; headless Chromium on the demo and admin pages)
# run the built binary; a filtered run (extra arguments) is about Swift tests only.
if [ "$#" -eq 0 ]; then
    echo "== running the web tests (schemathesis contract test, headless Chromium through Playwright)"
    scripts/web-tests.sh
fi
