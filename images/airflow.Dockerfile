# The Airflow image of docker-compose.yml: Apache Airflow 3.3.2 with gcbench installed
# (the DAG factory, the docker and local runners, collect/validate/report).
#
# Build context: the repository root (see .dockerignore).
#   docker compose build          # or:
#   docker build -f images/airflow.Dockerfile -t gcbench/airflow:3.3.2 .
#
# BASE_IMAGE is a build argument (a mirror of apache/airflow where Docker Hub is not
# reachable). The DAGs, plans and native sources are not copied: docker-compose.yml mounts
# the checkout, so a plan edit needs no rebuild; a change to plugins/gcbench does.
ARG BASE_IMAGE=apache/airflow:3.3.2
FROM ${BASE_IMAGE}

ARG AIRFLOW_VERSION=3.3.2
COPY --chown=airflow:0 pyproject.toml README.m[d] /opt/gcbench-src/
COPY --chown=airflow:0 plugins/gcbench /opt/gcbench-src/plugins/gcbench
# Airflow itself stays the base image's version; torch is not installed (trials run in
# the trial image). The export extra (prometheus_client) serves `gcbench metrics serve`
# (the gcbench-metrics service of the `metrics` profile).
RUN cd /opt/gcbench-src \
    && { [ -f README.md ] || echo "GC-Bench" > README.md; } \
    && pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" ".[export]" \
    && python -c "import gcbench.factory.dag, gcbench.export.prometheus, prometheus_client, airflow.providers.docker, airflow.providers.postgres; print('gcbench', __import__('gcbench').__name__, 'ok')"
