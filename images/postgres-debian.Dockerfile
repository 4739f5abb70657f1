# The PostgreSQL of docker-compose.yml built without Docker Hub: Debian bookworm's
# PostgreSQL 15 on the debootstrap base (scripts/debian_base_image.sh). It stands in for
# the official postgres:16-bookworm image and keeps the part of its contract the
# deployment uses (images/debian/postgres-entrypoint.sh): POSTGRES_USER / POSTGRES_PASSWORD /
# POSTGRES_DB, PGDATA=/var/lib/postgresql/data (a volume), the scripts of
# /docker-entrypoint-initdb.d run once at the first start, password (scram-sha-256) logins
# over TCP, pg_isready and psql on PATH.
#
# A data volume made by one PostgreSQL major version does not start under another: switch
# between this image (15) and the official one (16) only with a fresh volume or a
# pg_dump/pg_restore.
#
#   docker build --network host --build-arg BASE_IMAGE=gcbench/debian:bookworm \
#       -f images/postgres-debian.Dockerfile -t gcbench/postgres:15-debian .
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

ARG PG_MAJOR=15
ENV DEBIAN_FRONTEND=noninteractive
# the CA bundle alone (never the torch wheel that may lie beside it; README.md is always there)
COPY images/local/README.md images/local/ca-certificates.cr[t] /tmp/gcbench-local/
RUN set -eu; \
    if [ -f /tmp/gcbench-local/ca-certificates.crt ]; then \
        echo 'Acquire::https::CaInfo "/tmp/gcbench-local/ca-certificates.crt";' > /etc/apt/apt.conf.d/99gcbench-ca; \
    fi; \
    mkdir -p /etc/postgresql-common; \
    echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf; \
    apt-get update; \
    apt-get install -y --no-install-recommends "postgresql-${PG_MAJOR}" postgresql-client; \
    rm -rf /var/lib/apt/lists/* /etc/apt/apt.conf.d/99gcbench-ca /tmp/gcbench-local; \
    mkdir -p /var/lib/postgresql/data /var/run/postgresql /docker-entrypoint-initdb.d; \
    chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql; \
    chmod 2777 /var/run/postgresql
COPY images/debian/postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod 0755 /usr/local/bin/docker-entrypoint.sh

ENV PATH=/usr/lib/postgresql/${PG_MAJOR}/bin:${PATH} PGDATA=/var/lib/postgresql/data LANG=C.UTF-8
VOLUME /var/lib/postgresql/data
EXPOSE 5432
# fast shutdown (SIGINT): `docker stop` ends open sessions instead of waiting for them
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
