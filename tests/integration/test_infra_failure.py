"""An infrastructure failure (no Docker engine) fails the DAG run without losing anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAN = """\
name: infra
runner: docker
repetitions: 2
window: {seconds: 1.1}
energy: {backend: simulated}
workloads: [{name: noop, kind: noop}]
"""


def test_engine_unreachable_fails_the_run_and_stores_trials_as_never_ran(gcbench_env, pg_url):
    tmp = gcbench_env
    plan = tmp / "infra.yaml"
    plan.write_text(PLAN)
    env = {**os.environ, "AIRFLOW_HOME": str(tmp / "airflow"), "DOCKER_HOST": f"unix://{tmp}/no-docker.sock"}
    status_path = tmp / "status.json"
    subprocess.run(
        [sys.executable, "-m", "gcbench.factory.testrun", str(plan), str(status_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    status = json.loads(status_path.read_text())
    assert status["state"] == "failed"
    tasks = status["tasks"]
    assert tasks["collect"] == "success" and tasks["report"] == "success" and tasks["check_trials"] == "failed"
    assert {v for k, v in tasks.items() if k.startswith("run_trial_gpu0[")} == {"failed"}
    import psycopg2

    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT status, error FROM gcbench.trials")
        rows = cur.fetchall()
    assert len(rows) == 2
    assert all(s == "failed" and e.startswith("trial never ran") for s, e in rows)
