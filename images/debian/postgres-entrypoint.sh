#!/bin/bash
# Entry point of images/postgres-debian.Dockerfile: the part of the official postgres
# image's contract that docker-compose.yml uses.
#
# First start (PGDATA has no PG_VERSION): initdb with POSTGRES_USER (default postgres) as
# superuser and POSTGRES_PASSWORD as its password, scram-sha-256 for TCP logins and trust
# for the container's own Unix socket; then a temporary server on the socket alone runs
# /docker-entrypoint-initdb.d/* in name order (*.sh executed or sourced, *.sql through
# psql) with ON_ERROR_STOP, and stops. Every start: `postgres` listening on all of the
# container's addresses, as PID 1 (signals reach it: SIGINT is a fast shutdown).
# Started as root, it fixes the ownership of PGDATA and drops to the postgres user.
set -Eeuo pipefail

if [ "${1:0:1}" = '-' ]; then
    set -- postgres "$@"
fi

if [ "$1" = postgres ] && [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 0700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is not set: the superuser needs a password}"
    export POSTGRES_USER="${POSTGRES_USER:-postgres}" POSTGRES_DB="${POSTGRES_DB:-${POSTGRES_USER:-postgres}}"
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 -D "$PGDATA"
    rm -f "$pwfile"
    printf '\nhost all all all scram-sha-256\n' >> "$PGDATA/pg_hba.conf"

    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -c unix_socket_directories=/var/run/postgresql" -w start
    psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --no-password)
    if [ "$POSTGRES_DB" != postgres ]; then
        "${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        [ -e "$f" ] || continue
        case "$f" in
            *.sh)
                if [ -x "$f" ]; then echo "running $f"; "$f"; else echo "sourcing $f"; . "$f"; fi ;;
            *.sql) echo "running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
            *) echo "ignoring $f" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop
    echo "PostgreSQL init process complete; ready for start up."
fi

if [ "$1" = postgres ]; then
    shift
    exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/var/run/postgresql "$@"
fi
exec "$@"
