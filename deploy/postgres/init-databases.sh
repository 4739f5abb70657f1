#!/usr/bin/env bash
# First start of the postgres container (/docker-entrypoint-initdb.d): creates Airflow's
# metadata database and GC-Bench's results database with their own roles, passwords
# from the environment (the deployment's env file). See init.sql beside this file.
set -euo pipefail
: "${AIRFLOW_DB_PASSWORD:?set AIRFLOW_DB_PASSWORD in the env file}"
: "${GCBENCH_DB_PASSWORD:?set GCBENCH_DB_PASSWORD in the env file}"
psql --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
    -v airflow_db="${AIRFLOW_DB_NAME:-airflow}" -v airflow_user="${AIRFLOW_DB_USER:-airflow}" \
    -v airflow_password="${AIRFLOW_DB_PASSWORD}" \
    -v results_db="${GCBENCH_DB_NAME:-gcbench}" -v results_user="${GCBENCH_DB_USER:-gcbench}" \
    -v results_password="${GCBENCH_DB_PASSWORD}" \
    -f "${GCBENCH_INIT_SQL:-/gcbench-init/init.sql}"
