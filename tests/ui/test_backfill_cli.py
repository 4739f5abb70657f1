"""``airflow backfill create`` for real: a scheduler (LocalExecutor) runs the backfill
of two past nights, then, after a variant is added to the plan, the same command with
``--reprocess-behavior completed`` runs only the new variant's trials for those nights.

Uses the Airflow stack of ``airflow_stack.py`` (api-server, scheduler, dag-processor,
PostgreSQL metadata: SQLite locks under a backfill and the scheduler together) and the
real PostgreSQL of ``pg_url`` for results. About two minutes.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest
from airflow_stack import AirflowStack, sqlalchemy_url

pytestmark = [pytest.mark.slow, pytest.mark.integration]

PLAN = """\
name: bf
schedule: "0 2 * * *"
devices: [0]
repetitions: 2
order: sequential
window: {{steps: 5}}
workloads:
  - name: noop
    kind: noop
    matrix: {{tick_s: {ticks}}}
"""
DAG_ID = "gcbench__bf"
NIGHTS = ("2026-02-01T02:00:00+00:00", "2026-02-02T02:00:00+00:00")


def _backfill(stack: AirflowStack, *extra: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow",
            "backfill",
            "create",
            "--dag-id",
            DAG_ID,
            "--from-date",
            "2026-02-01T00:00:00+00:00",
            "--to-date",
            "2026-02-02T23:00:00+00:00",
            *extra,
        ],
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _backfill_runs(stack: AirflowStack) -> dict[str, dict]:
    runs = (stack.get(f"/api/v2/dags/{DAG_ID}/dagRuns?run_type=backfill") or {}).get("dag_runs", [])
    return {r["logical_date"].replace("Z", "+00:00"): r for r in runs if r["run_type"] == "backfill"}


def _done(stack: AirflowStack):
    runs = _backfill_runs(stack)
    if sorted(runs) == list(NIGHTS) and all(r["state"] in ("success", "failed") for r in runs.values()):
        return runs
    return None


def _trials(pg_url: str) -> list[tuple]:
    import psycopg2

    conn = psycopg2.connect(pg_url)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT r.logical_date, t.trial_id, t.variant, t.id FROM gcbench.trials t "
            "JOIN gcbench.dag_runs r ON r.id = t.dag_run_id WHERE r.dag_id = %s ORDER BY t.id",
            (DAG_ID,),
        )
        rows = cur.fetchall()
    conn.close()
    return [(r[0].isoformat(), *r[1:]) for r in rows]


@pytest.fixture
def airflow_db(make_database):
    """A fresh database for Airflow's metadata on the test server (SQLAlchemy URL); dropped afterwards."""
    return sqlalchemy_url(make_database("af_"))


def test_backfill_create_runs_only_missing_trials(tmp_path, pg_url, airflow_db):
    from gcbench.plan import expand, plan_from_text

    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "bf.yaml").write_text(PLAN.format(ticks="[0.01]"))
    old_ids = {s.trial_id for s in expand(plan_from_text(PLAN.format(ticks="[0.01]")))}
    home = tmp_path / "airflow"
    home.mkdir()
    stack = AirflowStack(
        home,
        plans,
        {
            "GCBENCH_HOME": str(tmp_path / "gcbench"),
            "GCBENCH_DATABASE_URL": pg_url,
            "GCBENCH_REPORTS_DIR": str(tmp_path / "reports"),
        },
        metadata_url=airflow_db,
    )
    try:
        stack.start(pools=["gcbench_gpu0"])
        stack.wait(lambda: stack.get(f"/api/v2/dags/{DAG_ID}"), 90, "the DAG to be parsed")
        _backfill(stack)
        runs = stack.wait(lambda: _done(stack), 150, "the first backfill")
        assert {d: r["state"] for d, r in runs.items()} == {n: "success" for n in NIGHTS}
        first = [row for row in _trials(pg_url) if row[0] in NIGHTS]
        assert Counter(row[0] for row in first) == {n: 2 for n in NIGHTS}
        assert {row[1] for row in first} == old_ids

        # a new variant; wait until the DAG processor has the new version, then reprocess the nights
        grown = PLAN.format(ticks="[0.01, 0.02]")
        (plans / "bf.yaml").write_text(grown)
        all_ids = {s.trial_id for s in expand(plan_from_text(grown))}
        new_ids = all_ids - old_ids
        stack.wait(
            lambda: "noop[tick_s=0.02]" in str(stack.get(f"/api/v2/dags/{DAG_ID}/details") or ""),
            90,
            "the grown plan to be parsed",
        )
        before_ends = {d: r["end_date"] for d, r in runs.items()}
        # the scheduler marks a backfill completed a loop after its last run ends; a second
        # backfill of the same DAG is refused until then
        stack.wait(
            lambda: (
                (b := (stack.get(f"/api/v2/backfills?dag_id={DAG_ID}") or {}).get("backfills"))
                and all(x.get("completed_at") for x in b)
            ),
            90,
            "the first backfill to be marked completed",
        )
        _backfill(stack, "--reprocess-behavior", "completed", "--run-on-latest-version")
        runs = stack.wait(
            lambda: (r := _done(stack)) and all(x["end_date"] != before_ends[d] for d, x in r.items()) and r,
            150,
            "the second backfill",
        )
        assert {d: r["state"] for d, r in runs.items()} == {n: "success" for n in NIGHTS}
        after = [row for row in _trials(pg_url) if row[0] in NIGHTS]
    finally:
        stack.stop()
    assert Counter(row[0] for row in after) == {n: 4 for n in NIGHTS}
    for night in NIGHTS:
        assert sorted(r[1] for r in after if r[0] == night) == sorted(all_ids)  # each trial once per night
    assert [r for r in after if r[1] in old_ids] == first  # not re-run, not re-stored
    assert {r[2] for r in after if r[1] in new_ids} == {"noop[tick_s=0.02]"}
