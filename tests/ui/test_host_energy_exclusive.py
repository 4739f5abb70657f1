"""C13 under a real scheduler (LocalExecutor, PostgreSQL metadata: the stack of
``airflow_stack.py``): trials on two GPUs of one host that measure the socket's RAPL
energy never overlap, and their CPU figures add up to what the socket drew.

Two plans, one on GPU 0 and one on GPU 1 (their own pools, so Airflow would run them at
the same time), both reading a fake RAPL tree whose one package draws 100 W whatever
runs (fixtures/cases/round3/C13-rapl-concurrent-trials/rapl_writer.py). Before the fix
each of two overlapping trials booked the whole socket (301.5 J + 301.3 J for ~300 J).
About three minutes.
"""

from __future__ import annotations

import subprocess
import sys
import time
from itertools import combinations
from pathlib import Path

import pytest
from airflow_stack import AirflowStack, sqlalchemy_url

pytestmark = [pytest.mark.slow, pytest.mark.integration]

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "round3" / "C13-rapl-concurrent-trials"
SOCKET_W = 100.0

PLAN = """\
name: {name}
devices: [{gpu}]
repetitions: 2
window: {{seconds: 2}}
energy: {{backend: simulated, rapl_root: {root}}}
workloads:
  - {{name: on-gpu{gpu}, kind: noop}}
"""


@pytest.fixture
def airflow_db(make_database):
    return sqlalchemy_url(make_database("af_"))


def _trials(pg_url: str) -> list[dict]:
    import psycopg2

    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT plan_name, status, flags, (result->>'origin_monotonic')::float8, "
            "(result->'windows'->'main'->>'start_s')::float8, (result->'windows'->'main'->>'end_s')::float8, "
            "(result->'energy'->'main'->>'cpu_energy_j')::float8 FROM gcbench.trials"
        )
        rows = cur.fetchall()
    return [{"plan": p, "status": s, "flags": f, "window": (o + a, o + b), "cpu_j": c} for p, s, f, o, a, b, c in rows]


def _run_done(stack: AirflowStack, dag_id: str, run_id: str) -> dict | None:
    run = stack.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
    return run if run and run["state"] in ("success", "failed") else None


def test_rapl_trials_on_two_gpus_of_one_host_add_up_to_the_socket(tmp_path, pg_url, airflow_db):
    root = tmp_path / "powercap"
    writer = subprocess.Popen([sys.executable, str(CASE / "rapl_writer.py"), str(root)])
    plans = tmp_path / "plans"
    plans.mkdir()
    for gpu in (0, 1):
        (plans / f"rapl_gpu{gpu}.yaml").write_text(PLAN.format(name=f"rapl-gpu{gpu}", gpu=gpu, root=root))
    home = tmp_path / "airflow"
    home.mkdir()
    stack = AirflowStack(
        home,
        plans,
        {
            "GCBENCH_HOME": str(tmp_path / "gcbench"),
            "GCBENCH_DATABASE_URL": pg_url,
            "GCBENCH_REPORTS_DIR": str(tmp_path / "reports"),
            "GCBENCH_HOST_SHARE_DIR": str(tmp_path / "host-share"),
            "AIRFLOW__CORE__PARALLELISM": "6",
        },
        metadata_url=airflow_db,
    )
    dag_ids = ["gcbench__rapl-gpu0", "gcbench__rapl-gpu1"]
    try:
        while not (root / "intel-rapl:0" / "energy_uj").exists():
            time.sleep(0.05)
        stack.start(pools=["gcbench_gpu0", "gcbench_gpu1"])
        stack.wait(lambda: all(stack.get(f"/api/v2/dags/{d}") for d in dag_ids), 180, "the two DAGs to be parsed")
        runs = {d: stack.post(f"/api/v2/dags/{d}/dagRuns", {"logical_date": None, "conf": {}}) for d in dag_ids}
        done = {
            d: stack.wait(lambda d=d, r=r: _run_done(stack, d, r["dag_run_id"]), 420, f"the run of {d}")
            for d, r in runs.items()
        }
    finally:
        stack.stop()
        writer.kill()
        writer.wait()

    assert {d: r["state"] for d, r in done.items()} == {d: "success" for d in dag_ids}, stack.logs()
    trials = _trials(pg_url)
    assert sorted(t["plan"] for t in trials) == ["rapl-gpu0"] * 2 + ["rapl-gpu1"] * 2
    for a, b in combinations(trials, 2):  # one host lease: never two RAPL windows at once
        assert not (a["window"][0] < b["window"][1] and b["window"][0] < a["window"][1]), (a, b)
    for t in trials:
        assert t["status"] == "ok" and "cpu_energy_shared" not in t["flags"]
        assert t["cpu_j"] == pytest.approx(SOCKET_W * (t["window"][1] - t["window"][0]), rel=0.05)
    drawn_j = SOCKET_W * sum(t["window"][1] - t["window"][0] for t in trials)  # the windows are disjoint
    assert sum(t["cpu_j"] for t in trials) == pytest.approx(drawn_j, rel=0.05)
