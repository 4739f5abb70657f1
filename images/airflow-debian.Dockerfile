# The Airflow image of docker-compose.yml built without Docker Hub: Apache Airflow 3.3.2
# with gcbench, on a Debian bookworm base made with debootstrap (scripts/debian_base_image.sh).
# It stands in for images/airflow.Dockerfile (FROM apache/airflow:3.3.2) and behaves like it
# for docker-compose.yml: user airflow (uid 50000, gid 0; any uid with gid 0 works),
# AIRFLOW_HOME=/opt/airflow, `/entrypoint <airflow command>` runs `airflow <command>`, curl
# for the health checks.
#
# Build context: the repository root (.dockerignore). Selected by deploy/compose.debian.yml
# (COMPOSE_FILE in the env file, see docs/deployment.md), or by hand:
#   scripts/debian_base_image.sh gcbench/debian:bookworm
#   docker build --network host --build-arg BASE_IMAGE=gcbench/debian:bookworm \
#       -f images/airflow-debian.Dockerfile -t gcbench/airflow:3.3.2-debian .
#
# Python 3.11 is Debian's; Airflow, its providers and gcbench's dependencies come from PyPI,
# pinned by images/debian/airflow-constraints.txt (Airflow's own constraints file lives on
# GitHub, which build machines may not reach: scripts/airflow_constraints.py makes this one
# from the versions the project's venv resolved). A CA bundle at images/local/ca-certificates.crt
# is used for apt and pip (a TLS-inspecting proxy).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE} AS system

ARG AIRFLOW_VERSION=3.3.2
ARG AIRFLOW_UID=50000
ENV DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore PYTHONDONTWRITEBYTECODE=1
# the CA bundle alone (never the torch wheel that may lie beside it; README.md is always there)
COPY images/local/README.md images/local/ca-certificates.cr[t] /tmp/gcbench-local/

RUN set -eu; \
    if [ -f /tmp/gcbench-local/ca-certificates.crt ]; then \
        mkdir -p /etc/apt/apt.conf.d; \
        echo 'Acquire::https::CaInfo "/tmp/gcbench-local/ca-certificates.crt";' > /etc/apt/apt.conf.d/99gcbench-ca; \
    fi; \
    apt-get update; \
    apt-get install -y --no-install-recommends python3 python3-venv ca-certificates curl tini procps; \
    rm -rf /var/lib/apt/lists/* /etc/apt/apt.conf.d/99gcbench-ca; \
    python3 -m venv /opt/airflow-venv; \
    useradd --uid "${AIRFLOW_UID}" --gid 0 --home-dir /home/airflow --create-home --shell /bin/bash airflow; \
    mkdir -p /opt/airflow/logs /opt/airflow/dags /opt/airflow/plugins; \
    chown -R "${AIRFLOW_UID}:0" /opt/airflow /home/airflow; \
    chmod -R g+rwX /opt/airflow /home/airflow

ENV PATH=/opt/airflow-venv/bin:${PATH} AIRFLOW_HOME=/opt/airflow

# gcbench's dependencies as a list, with the export extra (prometheus_client, for
# `gcbench metrics serve`): the layer below is rebuilt when they change, not when another
# part of pyproject.toml does
FROM system AS requirements
COPY pyproject.toml /tmp/pyproject.toml
RUN python -c 'import tomllib; p = tomllib.load(open("/tmp/pyproject.toml", "rb"))["project"]; deps = p["dependencies"] + p["optional-dependencies"]["export"]; print("\n".join(d for d in deps if not d.replace(" ", "").startswith("apache-airflow==")))' > /tmp/deps.txt

FROM system AS airflow
# Airflow, providers and gcbench's dependencies first (one cached layer), gcbench itself after
# (offline: its build backend, setuptools, is installed with the dependencies).
COPY images/debian/airflow-constraints.txt /tmp/gcbench-build/constraints.txt
COPY --from=requirements /tmp/deps.txt /tmp/gcbench-build/deps.txt
RUN set -eu; \
    if [ -f /tmp/gcbench-local/ca-certificates.crt ]; then \
        export SSL_CERT_FILE=/tmp/gcbench-local/ca-certificates.crt PIP_CERT=/tmp/gcbench-local/ca-certificates.crt; \
    fi; \
    cd /tmp/gcbench-build; \
    python -m pip install -c constraints.txt "apache-airflow==${AIRFLOW_VERSION}" \
        apache-airflow-providers-fab apache-airflow-providers-celery -r deps.txt "setuptools>=68" wheel; \
    python -m pip check

COPY pyproject.toml README.m[d] /tmp/gcbench-src/
COPY plugins/gcbench /tmp/gcbench-src/plugins/gcbench
COPY images/debian/airflow-entrypoint.sh /entrypoint
RUN set -eu; \
    cd /tmp/gcbench-src; \
    [ -f README.md ] || echo "GC-Bench" > README.md; \
    python -m pip install --no-deps --no-build-isolation .; \
    cd /; rm -rf /tmp/gcbench-src /tmp/gcbench-build /tmp/gcbench-local; \
    chmod 0755 /entrypoint; \
    python -c "import airflow, gcbench.factory.dag, gcbench.export.prometheus, prometheus_client, airflow.providers.docker, airflow.providers.postgres, airflow.providers.fab, airflow.providers.celery; print('airflow', airflow.__version__, 'with gcbench')"

USER ${AIRFLOW_UID}:0
WORKDIR /opt/airflow
ENV HOME=/home/airflow USER=airflow LOGNAME=airflow PYTHONUNBUFFERED=1
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "/entrypoint"]
CMD ["--help"]
