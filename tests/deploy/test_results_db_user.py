"""deploy/postgres/init.sql against a real PostgreSQL: the results role is confined to its schema."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

INIT_SQL = Path(__file__).resolve().parents[2] / "deploy" / "postgres" / "init.sql"


def _psql() -> str:
    for candidate in (shutil.which("psql"), "/usr/lib/postgresql/15/bin/psql"):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.skip("psql (postgresql-client) is not installed")


@pytest.fixture
def deployment(pg_server_url):
    """Run init.sql as the superuser with fresh names; yields (urls, names); drops them afterwards."""
    import psycopg2
    from psycopg2.extensions import make_dsn, parse_dsn

    tag = uuid.uuid4().hex[:8]
    names = {
        "airflow_db": f"af_{tag}",
        "airflow_user": f"af_user_{tag}",
        "airflow_password": "af-pw-" + tag,
        "results_db": f"gc_{tag}",
        "results_user": f"gc_user_{tag}",
        "results_password": "gc-pw-" + tag,
    }
    argv = [_psql(), "--no-psqlrc", "-q", "-d", pg_server_url, "-f", str(INIT_SQL)]
    for key, value in names.items():
        argv += ["-v", f"{key}={value}"]
    subprocess.run(argv, check=True, capture_output=True, text=True)
    base = parse_dsn(pg_server_url)

    def url(db: str, user: str, password: str) -> str:
        return make_dsn(**{**base, "dbname": db, "user": user, "password": password})

    urls = {
        "results": url(names["results_db"], names["results_user"], names["results_password"]),
        "results_user_on_airflow_db": url(names["airflow_db"], names["results_user"], names["results_password"]),
        "airflow": url(names["airflow_db"], names["airflow_user"], names["airflow_password"]),
        "airflow_user_on_results_db": url(names["results_db"], names["airflow_user"], names["airflow_password"]),
    }
    yield urls, names
    admin = psycopg2.connect(pg_server_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        for db in (names["airflow_db"], names["results_db"]):
            cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (db,))
            cur.execute(f'DROP DATABASE IF EXISTS "{db}"')
        for role in (names["airflow_user"], names["results_user"]):
            cur.execute(f'DROP ROLE IF EXISTS "{role}"')
    admin.close()


def test_results_user_migrates_and_writes_only_its_own_schema(deployment):
    import psycopg2

    from gcbench.store import db

    urls, names = deployment
    with db.connection(urls["results"]) as conn:  # migrations run as the results role
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'gcbench'")
            assert cur.fetchone()[0] >= 5
            cur.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            assert cur.fetchone()[0] == 0
    conn = psycopg2.connect(urls["results"])
    try:
        with conn.cursor() as cur:
            with pytest.raises(psycopg2.errors.InsufficientPrivilege):
                cur.execute("CREATE TABLE public.intruder (x int)")
        conn.rollback()
        with conn.cursor() as cur:
            with pytest.raises(psycopg2.errors.InsufficientPrivilege):
                cur.execute("CREATE SCHEMA elsewhere")
        conn.rollback()
        with conn.cursor() as cur:
            cur.execute("SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = current_user")
            assert cur.fetchone() == (False, False, False)
    finally:
        conn.close()


def test_results_user_cannot_connect_to_airflow_metadata_db(deployment):
    import psycopg2

    urls, _ = deployment
    airflow = psycopg2.connect(urls["airflow"])  # Airflow's role creates its tables in public, as `db migrate` does
    with airflow.cursor() as cur:
        cur.execute("CREATE TABLE public.connection (conn_id text, password text)")
    airflow.commit()
    airflow.close()
    with pytest.raises(psycopg2.OperationalError, match="permission denied for database"):
        psycopg2.connect(urls["results_user_on_airflow_db"])
    with pytest.raises(psycopg2.OperationalError, match="permission denied for database"):
        psycopg2.connect(urls["airflow_user_on_results_db"])
