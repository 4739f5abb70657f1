#!/bin/bash
# Entry point of images/airflow-debian.Dockerfile, as apache/airflow's /entrypoint treats
# its arguments: an Airflow command (`api-server`, `scheduler`, `celery worker ...`) runs
# as `airflow <command>`; `bash`, `python` and `airflow` run as given.
set -euo pipefail
if [ $# -eq 0 ]; then
    exec airflow --help
fi
case "$1" in
    bash|sh|python|python3|airflow|/*) exec "$@" ;;
    *) exec airflow "$@" ;;
esac
