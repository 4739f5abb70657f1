"""Stale PostgreSQL lock files of the embedded server (case C18): a lock is stale unless
its PID is proven to be a postmaster of our data directory; the server then starts, and
no process that is not proven ours is ever signalled."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from gcbench import airflow_local
from gcbench.store import db, pglock

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "round3" / "C18-stale-postmaster-pid"


@pytest.fixture
def home(monkeypatch) -> Iterator[Path]:
    """A GCBENCH_HOME whose embedded server was initialised once and is stopped again.

    Under the system temp folder, not pytest's basetemp (mode 0700 locks out the server's
    own user when running as root)."""
    root = Path(tempfile.mkdtemp(prefix="gcbench-c18-"))
    root.chmod(0o755)
    monkeypatch.setenv("GCBENCH_HOME", str(root))
    monkeypatch.delenv("GCBENCH_DATABASE_URL", raising=False)
    db.database_url()
    (root / "postmaster.pid.live").write_bytes((root / "pgdata" / "postmaster.pid").read_bytes())
    db.stop_embedded()
    assert not (root / "pgdata" / "postmaster.pid").exists()
    yield root
    db.stop_embedded()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def unrelated() -> Iterator[subprocess.Popen]:
    """An unrelated process (a sleep) whose PID a stale lock names."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


def _with_pid(template: str, pid: int) -> str:
    lines = template.splitlines()
    return "\n".join([str(pid), *lines[1:]]) + "\n"


def _answers(url: str) -> bool:
    conn = psycopg2.connect(url, connect_timeout=5)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            return cur.fetchone() == (1,)
    finally:
        conn.close()


def test_the_case_lock_file_names_a_pid_a_data_dir_and_a_start_time():
    # the lock file the case found (from a real embedded server): PID, data dir, start time, port, socket dir
    lines = (CASE / "postmaster.pid.example").read_text().splitlines()
    assert lines[0] == "16688" and lines[1].endswith("/pgdata") and lines[3] == "5432" and lines[-1].strip() == "ready"


def test_a_postmaster_pid_of_an_unrelated_process_is_stale_the_server_starts_and_the_process_lives(home, unrelated):
    pid_file = home / "pgdata" / "postmaster.pid"
    pid_file.write_text(_with_pid((home / "postmaster.pid.live").read_text(), unrelated.pid))
    check = pglock.check_lock(pid_file, home / "pgdata")
    assert not check.live and check.pid == unrelated.pid
    assert check.reason == f"PID {unrelated.pid} is 'sleep', not a postgres server"

    url = db.database_url()  # 7655493: "cannot start the embedded PostgreSQL server", then killed the sleep
    assert _answers(url)
    live = pglock.check_lock(pid_file, home / "pgdata")
    assert live.live and live.pid != unrelated.pid
    db.stop_embedded()
    assert unrelated.poll() is None  # never signalled


def test_a_postmaster_pid_of_another_live_postgres_is_stale_and_that_server_is_not_stopped(home):
    # a PID reused by a postgres of another data directory (another GC-Bench home, a system server)
    with db.temporary_server("gcbench-c18-other-") as other_url:
        conn = psycopg2.connect(other_url)
        with conn.cursor() as cur:
            cur.execute("SELECT setting FROM pg_settings WHERE name = 'data_directory'")
            other_dir = Path(cur.fetchone()[0])
        conn.close()
        other_pid = int((other_dir / "postmaster.pid").read_text().split()[0])
        pid_file = home / "pgdata" / "postmaster.pid"
        pid_file.write_text(_with_pid((home / "postmaster.pid.live").read_text(), other_pid))
        check = pglock.check_lock(pid_file, home / "pgdata")
        assert not check.live
        assert check.reason == f"PID {other_pid} is a postgres of another data directory"

        assert _answers(db.database_url())
        db.stop_embedded()
        assert _answers(other_url)  # the other server was neither used nor stopped
        # `gcbench airflow down` stops an orphaned embedded server only when proven ours
        pid_file.write_text(_with_pid((home / "postmaster.pid.live").read_text(), other_pid))
        airflow_local._stop_orphaned_embedded_server(home / "pgdata")
        assert _answers(other_url)


def test_a_stale_socket_lock_file_is_removed_and_the_server_starts(home, unrelated):
    # PostgreSQL itself refuses to start on a socket lock whose PID is alive:
    # 'could not create lock file ".s.PGSQL.5432.lock"'
    sock_lock = home / "pgdata" / ".s.PGSQL.5432.lock"
    sock_lock.write_text(_with_pid((home / "postmaster.pid.live").read_text(), unrelated.pid))
    assert _answers(db.database_url())
    check = pglock.check_lock(sock_lock)
    assert check.live and check.pid != unrelated.pid
    db.stop_embedded()
    assert unrelated.poll() is None


def test_airflow_down_never_signals_the_pid_of_a_stale_lock(home, unrelated):
    pid_file = home / "pgdata" / "postmaster.pid"
    pid_file.write_text(_with_pid((home / "postmaster.pid.live").read_text(), unrelated.pid))
    (home / "pgdata" / ".handle_pids.json").write_text("[]")
    airflow_local._stop_orphaned_embedded_server(home / "pgdata")  # 7655493: os.kill(pid, SIGTERM) on pg_ctl failure
    assert unrelated.poll() is None


def test_a_live_server_of_our_data_dir_is_proven_and_kept(home):
    url = db.database_url()
    pid = pglock.proven_postmaster(home / "pgdata")
    assert pid is not None
    assert pglock.clear_stale_locks(home / "pgdata") == []
    assert _answers(url)
    db.stop_embedded()
    assert pglock.proven_postmaster(home / "pgdata") is None


def test_a_dead_holder_left_by_a_killed_run_no_longer_keeps_the_server_up(home):
    # a `gcbench run` killed with SIGKILL leaves its PID in .handle_pids.json: no later
    # process was the last holder, so the server was never stopped
    dead = subprocess.Popen(["true"])
    dead.wait()
    holders = home / "pgdata" / ".handle_pids.json"
    holders.write_text(f"[{dead.pid}]")
    assert _answers(db.database_url())
    assert dead.pid not in json.loads(holders.read_text())
    db.stop_embedded()
    assert pglock.proven_postmaster(home / "pgdata") is None  # stopped
    assert not (home / "pgdata" / "postmaster.pid").exists()


def _lock_text(pid: int, pgdata: Path, sockdir: Path) -> str:
    return f"{pid}\n{pgdata}\n1796151323\n5432\n{sockdir}\n\n  2327923        50\nready   \n"


def test_a_lock_whose_socket_answers_is_kept_though_its_pid_is_of_another_namespace(unrelated):
    """Another input of kind C18: a server in another container (PID namespace) sharing the
    data directory. Its PID here is an unrelated process, but its socket answers: removing
    its postmaster.pid would let a second postmaster start on the same data. Kept; with
    nobody listening on the socket (a stale socket file left by a crash) it is removed."""
    import socket

    pgdata = Path(tempfile.mkdtemp(prefix="gc18-"))  # short: a Unix socket path has 107 bytes at most
    lock = pgdata / "postmaster.pid"
    lock.write_text(_lock_text(unrelated.pid, pgdata, pgdata))
    sock_path = pgdata / ".s.PGSQL.5432"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(1)
    try:
        assert not pglock.check_lock(lock, pgdata).live
        assert pglock.clear_stale_locks(pgdata) == [] and lock.exists()
    finally:
        server.close()
    assert sock_path.exists()  # left behind, as after a crash: nobody listens
    (removed,) = pglock.clear_stale_locks(pgdata)
    assert removed.path == lock and not lock.exists() and "not a postgres server" in removed.reason
    assert unrelated.poll() is None
    shutil.rmtree(pgdata)


@pytest.mark.parametrize("text", ["", "\n", "garbage\n", "-1\n/x\n", "0\n", "16688"])
def test_an_empty_truncated_or_garbage_lock_is_stale_and_names_no_pid_to_signal(tmp_path, text):
    """Other inputs of kind C18: a postmaster.pid cut by a crash (empty, one line, no data
    directory) or not a lock at all. Never live, never a PID to signal; removed."""
    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    lock = pgdata / "postmaster.pid"
    lock.write_text(text)
    assert not pglock.check_lock(lock, pgdata).live
    assert pglock.proven_postmaster(pgdata) is None
    (removed,) = pglock.clear_stale_locks(pgdata)
    assert removed.path == lock and not lock.exists()


def test_a_copied_lock_naming_another_data_dir_is_removed_though_that_server_answers(unrelated):
    """``cp -a`` of a running server's folder: the copy's postmaster.pid names the original
    data directory and socket, where a server answers. It does not serve the copy: removed."""
    import socket

    original = Path(tempfile.mkdtemp(prefix="gc18o-"))
    copy = Path(tempfile.mkdtemp(prefix="gc18c-"))
    lock = copy / "postmaster.pid"
    lock.write_text(_lock_text(unrelated.pid, original, original))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(original / ".s.PGSQL.5432"))
    server.listen(1)
    try:
        (removed,) = pglock.clear_stale_locks(copy)
        assert removed.path == lock and not lock.exists() and "another data directory" in removed.reason
    finally:
        server.close()
        shutil.rmtree(original)
        shutil.rmtree(copy)
