#!/usr/bin/env bash
# Starts (or stops) the services of Pigeon's production mode on loopback: redis-server (AOF, appendfsync always)
# and PostgreSQL. Installs them from Debian's packages when they are missing. Starts only what is not already
# reachable, remembers what it started, and `stop` stops exactly that.
#
#   scripts/services.sh start     # prints `export PIGEON_REDIS_URL=... PIGEON_POSTGRES_URL=...` lines to eval
#   scripts/services.sh stop
#   scripts/services.sh status
#
# Ports and places (environment): PIGEON_SERVICES_DIR (/tmp/pigeon-services), PIGEON_REDIS_PORT (6390),
# PIGEON_POSTGRES_PORT (5440). A service that cannot start is an error (exit 1), never silently skipped.
set -euo pipefail

DIR="${PIGEON_SERVICES_DIR:-/tmp/pigeon-services}"
REDIS_PORT="${PIGEON_REDIS_PORT:-6390}"
PG_PORT="${PIGEON_POSTGRES_PORT:-5440}"
REDIS_URL="redis://127.0.0.1:${REDIS_PORT}/0"
PG_URL="postgres://postgres@127.0.0.1:${PG_PORT}/postgres"
# What this invocation started is recorded here; the test command uses its own file, so it stops only its own.
STARTED="${PIGEON_SERVICES_STARTED:-$DIR/started}"

log() { echo "services: $*" >&2; }
die() { echo "services: error: $*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else die "need root for: $*"; fi
}

pg_bin() {
    local name="$1"
    if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
    local found
    found="$(ls -d /usr/lib/postgresql/*/bin/"$name" 2>/dev/null | sort -V | tail -1 || true)"
    [ -n "$found" ] && echo "$found"
}

install_missing() {
    local packages=()
    command -v redis-server >/dev/null 2>&1 || packages+=(redis-server)
    [ -n "$(pg_bin pg_ctl)" ] || packages+=(postgresql)
    if [ ${#packages[@]} -gt 0 ]; then
        log "installing ${packages[*]} from Debian's packages"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || die "apt-get update failed"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >&2 || die "apt-get install ${packages[*]} failed"
    fi
}

redis_up() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }
pg_up() { "$(pg_bin pg_isready)" -h 127.0.0.1 -p "$PG_PORT" -q 2>/dev/null; }

start_redis() {
    if redis_up; then log "redis already reachable on $REDIS_PORT"; return; fi
    mkdir -p "$DIR/redis"
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$DIR/redis" --appendonly yes --appendfsync always \
        --save "" --daemonize yes --pidfile "$DIR/redis/redis.pid" --logfile "$DIR/redis/redis.log" >&2 \
        || die "redis-server did not start (see $DIR/redis/redis.log)"
    for _ in $(seq 1 100); do redis_up && break; sleep 0.1; done
    redis_up || die "redis-server does not answer on $REDIS_PORT (see $DIR/redis/redis.log)"
    echo redis >>"$STARTED"
    log "started redis-server on 127.0.0.1:$REDIS_PORT (AOF, appendfsync always)"
}

start_postgres() {
    if pg_up; then log "postgresql already reachable on $PG_PORT"; return; fi
    local data="$DIR/postgres/data" sockets="$DIR/postgres/sockets" logfile="$DIR/postgres/postgres.log"
    mkdir -p "$DIR/postgres" "$sockets"
    chmod 755 "$DIR"
    local runas=()
    if [ "$(id -u)" -eq 0 ]; then
        id postgres >/dev/null 2>&1 || die "the postgres user is missing (is the postgresql package installed?)"
        chown -R postgres:postgres "$DIR/postgres"
        runas=(runuser -u postgres --)
    fi
    if [ ! -s "$data/PG_VERSION" ]; then
        "${runas[@]}" "$(pg_bin initdb)" -D "$data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$DIR/initdb.log" 2>&1 \
            || { cat "$DIR/initdb.log" >&2; die "initdb failed"; }
    fi
    "${runas[@]}" "$(pg_bin pg_ctl)" -D "$data" -l "$logfile" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $sockets -c max_connections=1000 -c shared_buffers=256MB" start >&2 \
        || { tail -20 "$logfile" >&2 || true; die "PostgreSQL did not start (see $logfile)"; }
    pg_up || die "PostgreSQL does not answer on $PG_PORT (see $logfile)"
    echo postgres >>"$STARTED"
    log "started PostgreSQL on 127.0.0.1:$PG_PORT (data in $data)"
}

stop_all() {
    [ -f "$STARTED" ] || { log "nothing was started by this script"; return; }
    if grep -qx redis "$STARTED"; then
        redis-cli -h 127.0.0.1 -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
        log "stopped redis-server"
    fi
    if grep -qx postgres "$STARTED"; then
        local runas=()
        [ "$(id -u)" -eq 0 ] && runas=(runuser -u postgres --)
        "${runas[@]}" "$(pg_bin pg_ctl)" -D "$DIR/postgres/data" -m fast -w stop >/dev/null 2>&1 || true
        log "stopped PostgreSQL"
    fi
    rm -f "$STARTED"
}

case "${1:-}" in
start)
    mkdir -p "$DIR"
    install_missing
    start_redis
    start_postgres
    echo "export PIGEON_REDIS_URL=$REDIS_URL"
    echo "export PIGEON_POSTGRES_URL=$PG_URL"
    ;;
stop) stop_all ;;
status)
    redis_up && echo "redis: up ($REDIS_URL)" || echo "redis: down"
    pg_up && echo "postgres: up ($PG_URL)" || echo "postgres: down"
    ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
