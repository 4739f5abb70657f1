"""Two trials never share a GPU, and a failed expansion is a failed run, under a real
scheduler (LocalExecutor, PostgreSQL metadata: the stack of ``airflow_stack.py``).

C05: a 1-GPU plan on GPU 0 (``study-a``) and a 2-GPU plan on GPUs 0-1 (``study-b``)
used to get pools ``gcbench_gpu0`` and ``gcbench_gpu0_1`` and run together. With a
third plan on GPU 1 alone (``study-c``, another pool), the three are triggered
together; the stored trials' measured windows and process lifetimes never overlap on
any GPU. A fourth plan is triggered with parameters its expansion refuses
(``repetitions`` 600 x 2 variants is more than Airflow's ``max_map_length``): the run
ends failed at the first try, without retries. About three minutes.
"""

from __future__ import annotations

import shutil
from itertools import combinations
from pathlib import Path

import pytest
from airflow_stack import AirflowStack, sqlalchemy_url

pytestmark = [pytest.mark.slow, pytest.mark.integration]

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "plans"

GPU1_PLAN = """\
name: study-c
devices: [1]
energy: {backend: simulated}
workloads:
  - {name: copy, kind: h2d, settings: {size_bytes: 1048576}}
"""

TOO_MANY = """\
name: too-many
devices: [0]
energy: {backend: simulated}
workloads:
  - {name: noop, kind: noop, matrix: {tick_s: [0.01, 0.02]}}
"""


@pytest.fixture
def airflow_db(make_database):
    return sqlalchemy_url(make_database("af_"))


def _windows(pg_url: str) -> list[dict]:
    """Every stored trial: plan, GPUs, measured window and process lifetime (seconds)."""
    import psycopg2

    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT plan_name, trial_id, status, spec->'devices', (result->>'origin_monotonic')::float8, "
            "(result->'windows'->'main'->>'start_s')::float8, (result->'windows'->'main'->>'end_s')::float8, "
            "extract(epoch FROM started_at), extract(epoch FROM finished_at) FROM gcbench.trials"
        )
        rows = cur.fetchall()
    return [
        {"plan": p, "trial": t, "status": s, "gpus": set(d), "window": (o + a, o + b), "life": (float(x), float(y))}
        for p, t, s, d, o, a, b, x, y in rows
    ]


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _run_done(stack: AirflowStack, dag_id: str, run_id: str) -> dict | None:
    run = stack.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
    return run if run and run["state"] in ("success", "failed") else None


def test_trials_never_share_a_gpu_and_a_failed_expansion_is_a_failed_run(tmp_path, pg_url, airflow_db):
    plans = tmp_path / "plans"
    plans.mkdir()
    for name in ("gpu0_single.yaml", "gpu0_1_pair.yaml"):
        shutil.copy(CASES / name, plans / name)
    (plans / "gpu1_single.yaml").write_text(GPU1_PLAN)
    (plans / "too_many.yaml").write_text(TOO_MANY)
    home = tmp_path / "airflow"
    home.mkdir()
    stack = AirflowStack(
        home,
        plans,
        {
            "GCBENCH_HOME": str(tmp_path / "gcbench"),
            "GCBENCH_DATABASE_URL": pg_url,
            "GCBENCH_REPORTS_DIR": str(tmp_path / "reports"),
            "AIRFLOW__CORE__PARALLELISM": "6",
        },
        metadata_url=airflow_db,
    )
    dag_ids = ["gcbench__study-a", "gcbench__study-b", "gcbench__study-c", "gcbench__too-many"]
    try:
        stack.start(pools=["gcbench_gpu0", "gcbench_gpu1"])
        stack.wait(lambda: all(stack.get(f"/api/v2/dags/{d}") for d in dag_ids), 180, "the four DAGs to be parsed")
        runs = {
            d: stack.post(f"/api/v2/dags/{d}/dagRuns", {"logical_date": None, "conf": {"repetitions": 2}})
            for d in dag_ids[:3]
        }
        failing = stack.post(f"/api/v2/dags/{dag_ids[3]}/dagRuns", {"logical_date": None, "conf": {"repetitions": 600}})
        bad = stack.wait(lambda: _run_done(stack, dag_ids[3], failing["dag_run_id"]), 180, "the failing run")
        bad_tis = {
            t["task_id"]: t
            for t in stack.get(f"/api/v2/dags/{dag_ids[3]}/dagRuns/{failing['dag_run_id']}/taskInstances")[
                "task_instances"
            ]
        }
        done = {
            d: stack.wait(lambda d=d, r=r: _run_done(stack, d, r["dag_run_id"]), 420, f"the run of {d}")
            for d, r in runs.items()
        }
    finally:
        stack.stop()

    assert bad["state"] == "failed"
    expand = bad_tis["expand_trials"]
    assert expand["state"] == "failed" and expand["try_number"] == 1  # deterministic: no retry, no backoff
    assert bad_tis["check_trials"]["state"] == "failed" and bad_tis["collect"]["state"] == "skipped"

    assert {d: r["state"] for d, r in done.items()} == {d: "success" for d in dag_ids[:3]}
    trials = _windows(pg_url)
    assert sorted((t["plan"], len(t["gpus"])) for t in trials) == sorted(
        [("study-a", 1)] * 2 + [("study-b", 2)] * 2 + [("study-c", 1)] * 2
    )
    assert all(t["status"] == "ok" for t in trials)
    assert {0, 1} <= set().union(*(t["gpus"] for t in trials))
    for a, b in combinations(trials, 2):
        if a["gpus"] & b["gpus"]:
            assert not _overlap(a["window"], b["window"]), (a, b)
            assert not _overlap(a["life"], b["life"]), (a, b)
