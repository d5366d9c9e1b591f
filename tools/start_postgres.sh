#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback for the tests of `--storage postgresql://...` (several machines).
# Prints one line on stdout, the URL to export:
#   export RAGZOO_TEST_POSTGRES="$(tools/start_postgres.sh)"
# Idempotent and quick: the server already running is reused; Debian's package is installed only when no
# PostgreSQL is found (that needs root). Everything lives in RAGZOO_PG_DIR (default /tmp/ragzoo-postgres), away
# from any cluster of the machine's own: `tools/start_postgres.sh stop` stops it, deleting the folder removes it.
# Settings: RAGZOO_PG_DIR, RAGZOO_PG_PORT (55432). The user ragzoo may create databases (each test makes its own).
set -euo pipefail

DIR="${RAGZOO_PG_DIR:-/tmp/ragzoo-postgres}"
PORT="${RAGZOO_PG_PORT:-55432}"
DATA="$DIR/data"
PASSWORD="ragzoo-test"  # a loopback test server's password, not a secret: the URL below carries it anyway

say() { echo "start_postgres: $*" >&2; }
fail() { say "$*"; exit 1; }

bindir() {
    local found
    found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -n "$found" ] && [ -x "$found/initdb" ]; then echo "$found"; return; fi
    found=$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")
    if [ -x "$found/initdb" ]; then echo "$found"; fi
}

BIN=$(bindir)
if [ -z "$BIN" ]; then
    [ "$(id -u)" = 0 ] || fail "PostgreSQL is not installed; as root: apt-get install -y postgresql"
    say "installing Debian's postgresql package"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    BIN=$(bindir)
    [ -n "$BIN" ] || fail "apt-get installed postgresql but no initdb was found under /usr/lib/postgresql"
fi

# initdb and the server refuse to run as root: as root they run as the postgres user the package made
if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || fail "no postgres user (Debian's package creates it); reinstall postgresql"
    OWNER=postgres
    as_owner() { runuser -u postgres -- "$@"; }
else
    OWNER=$(id -un)
    as_owner() { "$@"; }
fi

if [ "${1:-}" = "stop" ]; then
    if [ -f "$DATA/PG_VERSION" ] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
        as_owner "$BIN/pg_ctl" -D "$DATA" -m fast stop >/dev/null
        say "stopped"
    fi
    exit 0
fi

mkdir -p "$DIR"
chown "$OWNER" "$DIR"
chmod 700 "$DIR"

if [ ! -f "$DATA/PG_VERSION" ]; then
    say "creating a cluster in $DATA"
    pwfile=$(mktemp "$DIR/pw.XXXXXX")
    echo "$PASSWORD" > "$pwfile"
    chown "$OWNER" "$pwfile"
    # the superuser is reached through the folder's own socket only; TCP (loopback) asks for a password
    as_owner "$BIN/initdb" -D "$DATA" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
        --pwfile="$pwfile" -E UTF8 --no-locale >"$DIR/initdb.log" 2>&1 \
        || { rm -f "$pwfile"; cat "$DIR/initdb.log" >&2; fail "initdb failed"; }
    rm -f "$pwfile"
fi

if ! as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    say "starting the server on 127.0.0.1:$PORT"
    as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DIR/server.log" -w -t 30 \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -c unix_socket_directories=$DIR -c max_connections=200" \
        start >/dev/null || { tail -n 20 "$DIR/server.log" >&2; fail "the server did not start ($DIR/server.log)"; }
fi
PORT=$(sed -n 4p "$DATA/postmaster.pid")  # the running server's own (it may have been started on another one)

psql_su() { as_owner "$BIN/psql" -h "$DIR" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtA "$@"; }
if [ "$(psql_su -c "SELECT 1 FROM pg_roles WHERE rolname = 'ragzoo'")" != "1" ]; then
    psql_su -c "CREATE ROLE ragzoo LOGIN CREATEDB PASSWORD '$PASSWORD'" >/dev/null
fi
if [ "$(psql_su -c "SELECT 1 FROM pg_database WHERE datname = 'ragzoo'")" != "1" ]; then
    psql_su -c "CREATE DATABASE ragzoo OWNER ragzoo" >/dev/null
fi

echo "postgresql://ragzoo:$PASSWORD@127.0.0.1:$PORT/ragzoo"
