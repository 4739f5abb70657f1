"""Backfill of a new variant: only the missing trials run, stored under their logical dates.

Two nights are run with ``dag.test(logical_date=...)`` (``gcbench.factory.testrun
--logical-date``), then the plan grows by one variant and both nights run again, as
``airflow backfill create --reprocess-behavior completed`` re-runs them: only the new
variant's trials run (trial folders and rows counted), the old ones are neither re-run
nor duplicated, and their ids do not change. Real PostgreSQL, real trial processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAN = """
name: backfill-test
schedule: "0 2 * * *"
devices: [0]
repetitions: 2
order: sequential
window: {{steps: 20}}
workloads:
  - name: noop
    kind: noop
    matrix: {{tick_s: {ticks}}}
"""
NIGHTS = ("2026-02-01T02:00:00+00:00", "2026-02-02T02:00:00+00:00")


def _run(tmp: Path, plan: Path, logical_date: str) -> dict:
    status_path = tmp / "status.json"
    status_path.unlink(missing_ok=True)
    env = {**os.environ, "AIRFLOW_HOME": str(tmp / "airflow")}
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.factory.testrun", str(plan), str(status_path), "--logical-date", logical_date],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert status_path.exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads(status_path.read_text())


def _rows(pg_url: str) -> list[tuple]:
    import psycopg2

    conn = psycopg2.connect(pg_url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT r.logical_date, r.run_id, t.trial_id, t.variant, t.id, t.collected_at, t.status "
                "FROM gcbench.trials t JOIN gcbench.dag_runs r ON r.id = t.dag_run_id ORDER BY t.id"
            )
            return cur.fetchall()
    finally:
        conn.close()


def _folders(runs_root: Path) -> list[str]:
    """Trial folders (named by trial id) of every run of the plan, sorted."""
    return sorted(p.name for p in runs_root.glob("*/*") if p.is_dir())


def _mapped(status: dict) -> int:
    return sum(1 for k in status["tasks"] if k.startswith("run_trial_gpu0["))


def test_new_variant_backfills_only_its_trials(gcbench_env, pg_url):
    from gcbench import config
    from gcbench.plan import expand, load_plan

    tmp = gcbench_env
    plan_path = tmp / "backfill-test.yaml"
    plan_path.write_text(PLAN.format(ticks="[0.01]"))
    old_ids = {s.trial_id for s in expand(load_plan(plan_path))}
    assert len(old_ids) == 2

    first = {}
    for night in NIGHTS:
        status = _run(tmp, plan_path, night)
        assert status["state"] == "success", status
        assert _mapped(status) == 2
        first[night] = status
    before = _rows(pg_url)
    assert len(before) == 4 and {r[2] for r in before} == old_ids
    runs_root = config.home() / "runs" / "backfill-test"
    assert _folders(runs_root) == sorted([*old_ids, *old_ids])
    result_mtimes = {p: p.stat().st_mtime_ns for p in runs_root.glob("*/*/result.json")}
    assert len(result_mtimes) == 4

    # the plan grows by one variant; both nights are processed again
    plan_path.write_text(PLAN.format(ticks="[0.01, 0.02]"))
    grown = load_plan(plan_path)
    all_ids = {s.trial_id for s in expand(grown)}
    new_ids = all_ids - old_ids
    assert old_ids < all_ids and len(new_ids) == 2  # existing ids unchanged
    for night in NIGHTS:
        status = _run(tmp, plan_path, night)
        assert status["state"] == "success", status
        assert _mapped(status) == 2  # only the new variant's trials ran
        assert sorted(p.name for p in Path(status["run_dir"]).iterdir() if p.is_dir()) == sorted(new_ids)
    assert _folders(runs_root) == sorted([*old_ids, *old_ids, *new_ids, *new_ids])

    after = _rows(pg_url)
    assert len(after) == 8
    by_night: dict[str, list[tuple]] = {}
    for row in after:
        by_night.setdefault(row[0].isoformat(), []).append(row)
    assert sorted(by_night) == list(NIGHTS)
    for rows in by_night.values():
        assert sorted(r[2] for r in rows) == sorted(all_ids)  # each trial once per night
        assert all(r[6] == "ok" for r in rows)
        new_variant = {r[3] for r in rows if r[2] in new_ids}
        assert new_variant == {"noop[tick_s=0.02]"}
    # the old trials were not re-run nor re-stored
    assert [r[4:6] for r in after if r[2] in old_ids] == [r[4:6] for r in before]
    assert {p: p.stat().st_mtime_ns for p in result_mtimes} == result_mtimes
