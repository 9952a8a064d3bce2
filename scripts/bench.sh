#!/usr/bin/env bash
# Builds the server and the load generator in release mode (scratch path .build-release, apart from the debug
# builds in .build) and runs the benchmark; arguments go to pigeon-bench (see `scripts/bench.sh --help`).
# Installs mosquitto, nats-server and redis-server first, for the comparison scenarios (mosquitto, nats, redis), if they are missing. When a production backend is requested
# (--backends production or production-2) or the scale-out scenario (--scenario scale-out, which spawns production
# nodes of its own), starts redis-server and PostgreSQL through scripts/services.sh unless they are reachable, passes
# their URLs in PIGEON_REDIS_URL and PIGEON_POSTGRES_URL, and on exit stops what it started.
# `scripts/bench.sh pigeonkit [options]` instead builds and runs pigeonkit-bench, the client SDK's benchmark (with a
# server inside its own process; `scripts/bench.sh pigeonkit --help` lists its options); it needs nothing installed.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "pigeonkit" ]; then
    shift
    for product in pigeonkit-bench pigeonkit-device pigeonkit-size-probe empty-probe pigeon; do
        swift build -c release --scratch-path .build-release --product "$product"
    done
    # The size figures also for the build a distribution ships (optimised for size, link-time optimised).
    scripts/build-client.sh --probes
    exec .build-release/release/pigeonkit-bench --size-build .build-size/release "$@"
fi

if ! command -v mosquitto >/dev/null 2>&1 && [ ! -x /usr/sbin/mosquitto ]; then
    echo "installing mosquitto (for the comparison scenario)" >&2
    apt-get install -y mosquitto || { apt-get update && apt-get install -y mosquitto; }
fi
if ! command -v nats-server >/dev/null 2>&1 && [ ! -x /usr/sbin/nats-server ]; then
    echo "installing nats-server (for the NATS JetStream comparison scenario)" >&2
    apt-get install -y nats-server || { apt-get update && apt-get install -y nats-server; }
fi
if ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/bin/redis-server ]; then
    echo "installing redis-server (for the Redis Streams comparison scenario)" >&2
    apt-get install -y redis-server || { apt-get update && apt-get install -y redis-server; }
fi

production=false
previous=""
for argument in "$@"; do
    case "$previous|$argument" in
    "--backends|"*production* | *"|--backends="*production*) production=true ;;
    "--scenario|"*scale-out* | *"|--scenario="*scale-out*) production=true ;;
    esac
    previous="$argument"
done

# `swift build` builds only the last of several --product options, hence two builds.
swift build -c release --scratch-path .build-release --product pigeon-server
swift build -c release --scratch-path .build-release --product pigeon-bench

if [ "$production" = false ]; then
    exec .build-release/release/pigeon-bench --server-binary .build-release/release/pigeon-server "$@"
fi

export PIGEON_SERVICES_STARTED
PIGEON_SERVICES_STARTED="$(mktemp -t pigeon-bench-services.XXXXXX)"
trap 'scripts/services.sh stop; rm -f "$PIGEON_SERVICES_STARTED"' EXIT
eval "$(scripts/services.sh start)"
.build-release/release/pigeon-bench --server-binary .build-release/release/pigeon-server "$@"
