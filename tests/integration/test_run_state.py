"""A DAG run's state tells the truth (dag.test() through ``gcbench.factory.testrun``,
real PostgreSQL): a run whose expansion fails is failed with the reason (C04), and a
re-run with nothing left to do is green and says so in its log and report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAN = """\
name: state
devices: [0]
repetitions: 2
order: sequential
window: {steps: 3}
energy: {backend: simulated}
workloads:
  - name: noop
    kind: noop
    matrix: {tick_s: [0.01]}
"""


def _run(tmp: Path, plan: Path, *args: str) -> tuple[dict, str]:
    status_path = tmp / f"status-{len(list(tmp.glob('status-*.json')))}.json"
    env = {**os.environ, "AIRFLOW_HOME": str(tmp / "airflow")}
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.factory.testrun", str(plan), str(status_path), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert status_path.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(status_path.read_text()), proc.stdout + proc.stderr


def _stored(pg_url: str) -> list[tuple]:
    import psycopg2

    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT r.run_id, t.trial_id, t.status FROM gcbench.trials t "
            "JOIN gcbench.dag_runs r ON r.id = t.dag_run_id ORDER BY t.id"
        )
        return cur.fetchall()


def test_a_run_whose_expansion_fails_is_failed_at_once_with_the_reason(gcbench_env, pg_url):
    # Parameters Airflow's form accepts (1 <= repetitions <= 1000) but the expansion
    # refuses: 600 x 8 smoke variants is more than Airflow's max_map_length. (An unknown
    # variant, C04, is refused by the Param schema before a run exists:
    # tests/plan/test_params.py.)
    status, log = _run(gcbench_env, REPO / "plans" / "smoke.yaml", "--repetitions", "600")
    assert status["state"] == "failed"
    tasks = status["tasks"]
    assert tasks["expand_trials"] == "failed" and tasks["check_trials"] == "failed"
    assert tasks["collect"] == "skipped" and tasks["report"] in ("skipped", "upstream_failed")
    assert not any(k.startswith("run_trial_") and v == "success" for k, v in tasks.items())
    run_failed = [line for line in log.splitlines() if line.startswith("run failed: ")]
    assert len(run_failed) == 1 and "expand_trials: " in run_failed[0] and "max_map_length" in run_failed[0]
    assert _stored(pg_url) == []


def test_a_rerun_with_every_trial_stored_succeeds_and_says_so(gcbench_env, pg_url):
    plan = gcbench_env / "state.yaml"
    plan.write_text(PLAN)
    night = "2026-03-01T02:00:00+00:00"
    first, _ = _run(gcbench_env, plan, "--logical-date", night)
    assert first["state"] == "success" and first["trials"]["ok"] == 2
    again, log = _run(gcbench_env, plan, "--logical-date", night)
    assert again["state"] == "success", again
    assert again["tasks"]["check_trials"] == "success" and again["tasks"]["run_trial_gpu0"] == "skipped"
    assert "Nothing to run: all 2 trials of this run were already stored for logical date " + night in log
    assert "nothing to run: every trial of this run was already stored" in log
    assert len(_stored(pg_url)) == 2  # nothing ran twice
    md = Path(again["report"]).with_name("report.md").read_text()
    assert "Nothing to run: all 2 trials of this run were already stored" in md
