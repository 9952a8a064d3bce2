#!/usr/bin/env bash
# Builds the server and the load generator in release mode and runs the benchmark; arguments go to pigeon-bench
# (see `scripts/bench.sh --help`). Installs mosquitto first, for the comparison scenario, if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v mosquitto >/dev/null 2>&1 && [ ! -x /usr/sbin/mosquitto ]; then
    echo "installing mosquitto (for the comparison scenario)" >&2
    apt-get install -y mosquitto || { apt-get update && apt-get install -y mosquitto; }
fi

# `swift build` builds only the last of several --product options, hence two builds.
swift build -c release --product pigeon-server
swift build -c release --product pigeon-bench
exec .build/release/pigeon-bench "$@"
