# The Redis of docker-compose.yml's `celery` profile built without Docker Hub: Debian
# bookworm's redis-server (7.0) on the debootstrap base (scripts/debian_base_image.sh),
# standing in for the official redis:7-bookworm image: redis-server and redis-cli on
# PATH, run as the redis user with its data in /data. docker-compose.yml starts it with
# `--requirepass`; without a configuration file it listens on every address of the
# container.
#
#   docker build --network host --build-arg BASE_IMAGE=gcbench/debian:bookworm \
#       -f images/redis-debian.Dockerfile -t gcbench/redis:7-debian .
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive
# the CA bundle alone (never the torch wheel that may lie beside it; README.md is always there)
COPY images/local/README.md images/local/ca-certificates.cr[t] /tmp/gcbench-local/
RUN set -eu; \
    if [ -f /tmp/gcbench-local/ca-certificates.crt ]; then \
        echo 'Acquire::https::CaInfo "/tmp/gcbench-local/ca-certificates.crt";' > /etc/apt/apt.conf.d/99gcbench-ca; \
    fi; \
    apt-get update; \
    apt-get install -y --no-install-recommends redis-server redis-tools; \
    rm -rf /var/lib/apt/lists/* /etc/apt/apt.conf.d/99gcbench-ca /tmp/gcbench-local; \
    mkdir -p /data; chown redis:redis /data
USER redis
WORKDIR /data
VOLUME /data
EXPOSE 6379
CMD ["redis-server"]
