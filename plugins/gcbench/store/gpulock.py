"""GPU leases: one PostgreSQL advisory lock per (host, GPU), held for a trial's life.

Airflow pools queue trials (one pool per single GPU, 1 slot), but a task sits in one
pool only, so a 2-GPU trial cannot occupy the pools of both its GPUs, and pools do
not span Airflow deployments. The lease is what makes two trials never share a GPU,
whatever mix of DAGs, plans, GPU counts and ``gcbench run`` sessions:

* every trial takes, before its process or container starts, a session-level
  advisory lock in the **results database** for each of its GPUs, keyed by
  ``<host>/gpu<index>`` (:func:`gpu_host`: ``GCBENCH_GPU_HOST``, else the machine's
  host name), in one fixed order (sorted keys), so two trials that need overlapping
  GPU sets can never deadlock;
* the locks belong to one connection opened for the lease and closed when the
  trial ends, on any exit: a normal end, an exception, or the holder's death
  (SIGKILL included), since PostgreSQL drops a session's advisory locks with its
  connection;
* waiting happens before the trial starts, so it is in neither the measured window
  nor the trial's time limit; it is logged (who holds the GPU, since when) every
  :data:`LOG_EVERY_S` seconds and bounded by ``GCBENCH_GPU_LOCK_TIMEOUT_S``
  (:data:`DEFAULT_TIMEOUT_S`).

Resources wider than a GPU get the same lease (C13): RAPL counts a whole CPU socket and
CodeCarbon the whole machine, so two trials on two GPUs of one host would each book the
other's CPU energy. Every trial also takes the host's lock ``<host>/host-energy``
(:func:`host_key`), before its GPUs: *exclusive* when it measures a host-wide meter
(:func:`gcbench.energy.hostshare.measures_host_energy`), *shared* otherwise. Trials
that measure no host-wide energy still run side by side on their own GPUs; one that does
runs alone on its host, so its CPU figures are its own. (Trials started outside a lease,
e.g. by hand, are caught afterwards: :mod:`gcbench.energy.hostshare` flags overlaps.)

Everything that writes to the same results database sees the same locks: one
central database (docs/multi-host.md) covers every host. Source: PostgreSQL manual,
"Advisory Locks" (section 13.3.5) and ``pg_advisory_lock`` (section 9.28.10).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gcbench.errors import GCBenchError

LOCK_CLASS = 0x4750_5530
"""First key of every GPU lock (``pg_advisory_lock(int4, int4)``): "GPU0" in ASCII. The
second key is ``hashtext('<host>/gpu<index>')``. Other GC-Bench locks use the one-key
(bigint) form or a DAG run's primary key, which never reaches this value."""

DEFAULT_TIMEOUT_S = 24 * 3600.0
"""Longest wait for a trial's GPUs unless ``GCBENCH_GPU_LOCK_TIMEOUT_S`` says otherwise."""

LOG_EVERY_S = 30.0
"""How often a waiting trial says who holds its GPU."""

ATTEMPT_S = 2.0
"""Each blocking attempt lasts this long (PostgreSQL queues waiters in order, so a
waiter is first in line when the holder lets go); between attempts a stop request
(Ctrl-C of ``gcbench run``) or the timeout is noticed."""


class GpuBusyError(GCBenchError):
    """A trial's GPUs stayed leased by other trials for longer than the lock timeout.

    Attributes:
        keys: the GPU keys (``host/gpuN``) not obtained.
    """

    def __init__(self, keys: list[str], message: str):
        self.keys = keys
        super().__init__(message)


class LeaseAborted(GCBenchError):
    """The wait for a GPU was given up because a stop was requested."""


def gpu_host() -> str:
    """This machine's name in GPU lock keys: ``GCBENCH_GPU_HOST`` or the host name.

    Set ``GCBENCH_GPU_HOST`` where the host name is not the GPU machine's (a container
    with its own host name, a remote Docker engine): every process that runs trials on
    one machine must use the same name.
    """
    return os.environ.get("GCBENCH_GPU_HOST") or socket.gethostname()


def gpu_keys(devices: list[int], host: str | None = None) -> list[str]:
    """Lock keys of a trial's GPUs, in the order they are taken (sorted).

    >>> gpu_keys([1, 0], host="h200a")
    ['h200a/gpu0', 'h200a/gpu1']
    """
    host = host or gpu_host()
    return [f"{host}/gpu{d}" for d in sorted(set(devices))]


def host_key(host: str | None = None) -> str:
    """Lock key of the host's host-wide meters (RAPL sockets, the whole machine).

    >>> host_key("h200a")
    'h200a/host-energy'
    """
    return f"{host or gpu_host()}/host-energy"


def lock_timeout_s() -> float:
    """``GCBENCH_GPU_LOCK_TIMEOUT_S`` (seconds, > 0) or :data:`DEFAULT_TIMEOUT_S`.

    Raises:
        GCBenchError: the variable is set but not a positive number.
    """
    raw = os.environ.get("GCBENCH_GPU_LOCK_TIMEOUT_S")
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise GCBenchError(f"GCBENCH_GPU_LOCK_TIMEOUT_S={raw!r}: expected a positive number of seconds")
    return value


@dataclass
class GpuLease:
    """GPUs held by one trial.

    Attributes:
        keys: the GPU keys held (``host/gpuN``), in the order taken.
        wait_s: seconds spent waiting for them (0 when they were free).
        holder: the description other waiters see (``application_name``).
        host_key: the host lock held (:func:`host_key`); host_exclusive: held alone
            (the trial measures a host-wide meter) rather than shared.
    """

    keys: list[str]
    wait_s: float = 0.0
    holder: str = ""
    host_key: str | None = None
    host_exclusive: bool = False
    _conn: Any = field(default=None, repr=False)  # a psycopg2 connection (untyped)

    def alive(self) -> bool:
        """Whether the lease's connection (and so the locks) still stands."""
        conn = self._conn
        if conn is None or conn.closed:
            return False
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
            return True
        except Exception:  # noqa: BLE001 - any failure means the session is gone
            return False


def holders(conn, key: str) -> list[str]:
    """Who holds the lock of ``key`` now: ``application_name`` and since when, per session."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT a.application_name, a.backend_start FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s::oid "
            "AND l.objid = (hashtext(%s)::bigint & 4294967295)::oid AND l.objsubid = 2",
            (LOCK_CLASS, key),
        )
        rows = cur.fetchall()
    return [f"{name or 'another session'} (since {started:%Y-%m-%d %H:%M:%S %Z})" for name, started in rows]


@contextmanager
def hold_gpus(
    devices: list[int],
    holder: str,
    *,
    host: str | None = None,
    url: str | None = None,
    timeout_s: float | None = None,
    log: Callable[[str], None] = print,
    should_stop: Callable[[], object] | None = None,
    host_energy: bool = False,
) -> Iterator[GpuLease]:
    """Lease a trial's GPUs (and its share of the host) for the duration of the ``with`` block.

    Args:
        devices: the trial's GPU indices on this host; empty: no GPU is locked (the
            host lock still is).
        holder: what other waiters are told holds the GPU (trial id, plan, run).
        host: the GPU machine's name in the keys; default :func:`gpu_host`.
        url: results database URL; default ``GCBENCH_DATABASE_URL`` or the embedded one.
        timeout_s: longest wait; default :func:`lock_timeout_s`.
        log: where waiting is reported (the task log).
        should_stop: polled between attempts; a true value (e.g. a reason) gives up the wait.
        host_energy: the trial measures a host-wide meter (RAPL, CodeCarbon): the host
            lock is taken exclusively, so no other trial runs on the host meanwhile;
            otherwise it is shared (see the module docstring).

    Yields:
        A :class:`GpuLease` (its ``wait_s`` says how long the trial waited).

    Raises:
        GpuBusyError: the GPUs were not free within the timeout (an infrastructure
            failure: Airflow retries the task).
        LeaseAborted: ``should_stop`` said so while waiting.
        StoreError: the results database is unreachable.
    """
    import psycopg2

    from gcbench.store import db

    keys = gpu_keys(devices, host)
    whole = host_key(host)
    timeout = lock_timeout_s() if timeout_s is None else timeout_s
    conn = db.connect(url)
    try:
        try:
            wait_s = _acquire(
                conn, [(whole, host_energy), *((k, True) for k in keys)], holder, timeout, log, should_stop
            )
        except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
            from gcbench.errors import StoreError

            raise StoreError(
                f"lost the results database while leasing GPUs {', '.join(keys)}: {str(exc).strip()}"
            ) from exc
        lease = GpuLease(keys, wait_s, holder, whole, host_energy, conn)
        log(
            (f"GPUs {', '.join(keys)} leased" if keys else "no GPU leased")
            + (f" after waiting {wait_s:.1f} s" if wait_s >= 0.05 else "")
            + (f" ({whole} exclusive: host-wide energy measured)" if host_energy else f" ({whole} shared)")
        )
        yield lease
        if not lease.alive():
            log(
                f"warning: the lease of GPUs {', '.join(keys)} was lost during the trial "
                "(the results database connection dropped); another trial may have started on them"
            )
    finally:
        conn.close()  # ends the session: PostgreSQL releases every lock it held


def _acquire(
    conn,
    keys: list[tuple[str, bool]],
    holder: str,
    timeout: float,
    log: Callable[[str], None],
    should_stop: Callable[[], object] | None,
) -> float:
    """Take the locks of ``keys`` ((key, exclusive) pairs) in order on ``conn``; returns
    the seconds waited."""
    import psycopg2

    conn.autocommit = True
    with conn.cursor() as cur:
        # pg_stat_activity shows it to waiters; NAMEDATALEN limits it to 63 bytes
        cur.execute("SET application_name = %s", (f"gcbench {holder}".encode()[:63].decode(errors="ignore"),))
        cur.execute("SET lock_timeout = %s", (f"{int(ATTEMPT_S * 1000)}ms",))
    started = time.monotonic()
    next_log = started
    for key, exclusive in keys:
        call = "pg_advisory_lock" if exclusive else "pg_advisory_lock_shared"
        what = f"host lock {key}" if key.endswith("/host-energy") else f"GPU {key}"
        while True:
            try:
                with conn.cursor() as cur:
                    cur.execute(f"SELECT {call}(%s, hashtext(%s))", (LOCK_CLASS, key))
                break
            except psycopg2.errors.LockNotAvailable:
                waited = time.monotonic() - started
                if should_stop is not None and should_stop():
                    raise LeaseAborted(f"stopped while waiting for {what}") from None
                if waited >= timeout:
                    raise GpuBusyError(
                        [k for k, _ in keys],
                        f"{what} still in use after waiting {waited:.0f} s "
                        f"(GCBENCH_GPU_LOCK_TIMEOUT_S={timeout:.0f}); held by "
                        f"{', '.join(holders(conn, key)) or 'unknown'}",
                    ) from None
                if time.monotonic() >= next_log:
                    who = ", ".join(holders(conn, key)) or "another trial"
                    log(f"waiting for {what} ({waited:.0f} s so far): in use by {who}")
                    next_log = time.monotonic() + LOG_EVERY_S
    return time.monotonic() - started
