#!/usr/bin/env bash
# Builds the terminal client `pigeon` (and, with --probes, pigeonkit-bench's size probes) for distribution: release,
# optimised for size (-Osize), with whole-program link-time optimisation (SwiftPM's LTO, full), linked by lld with
# identical code folding and packed relative relocations. A clean build takes about 10 minutes on 2 cores; the
# binaries land in .build-size/release/ (strip them to ship: `strip .build-size/release/pigeon`).
# Usage: scripts/build-client.sh [--probes]
set -euo pipefail
cd "$(dirname "$0")/.."

products=(pigeon)
if [ "${1:-}" = "--probes" ]; then products+=(pigeonkit-size-probe empty-probe); fi
for product in "${products[@]}"; do
    swift build -c release --scratch-path .build-size --product "$product" \
        --experimental-lto-mode=full -Xswiftc -Osize -Xswiftc -use-ld=lld \
        -Xlinker --icf=all -Xlinker -z -Xlinker pack-relative-relocs
done
echo "built: $(for product in "${products[@]}"; do printf '.build-size/release/%s ' "$product"; done)"
