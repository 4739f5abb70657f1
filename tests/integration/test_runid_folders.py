"""Two Airflow run ids that the old run key mapped to one folder (case C19: ``exp:1`` and
``exp+1`` -> ``exp_1``) run through dag.test() (``gcbench.factory.testrun``, real
PostgreSQL) with the run id a REST trigger gives: each keeps its own trial folder and
report, and ``gcbench report`` finds each by id and by folder name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CASE = REPO / "tests" / "fixtures" / "cases" / "round3" / "C19-runid-folder-collision"

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAN = """\
name: k05-collide
devices: [0]
repetitions: 1
window: {steps: 3}
energy: {backend: simulated}
workloads:
  - {name: w, kind: noop, matrix: {tick_s: [0.01]}}
"""


def _run(tmp: Path, plan: Path, run_id: str) -> dict:
    status = tmp / f"status-{len(list(tmp.glob('status-*.json')))}.json"
    dags = tmp / "airflow" / "gcbench-run-dags"  # set before Airflow's config is read (as repro.sh does)
    dags.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "RUNID": run_id,
    }
    proc = subprocess.run(
        [sys.executable, str(CASE / "run_with_run_id.py"), str(plan), str(status)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert status.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(status.read_text())


def test_run_ids_exp_colon_1_and_exp_plus_1_keep_their_own_folders_and_reports(gcbench_env, pg_url):
    from gcbench.cli import find_run
    from gcbench.store import db

    plan = gcbench_env / "plan.yaml"
    plan.write_text(PLAN)
    a = _run(gcbench_env, plan, "exp:1")
    b = _run(gcbench_env, plan, "exp+1")
    assert (a["run_id"], a["state"], b["run_id"], b["state"]) == ("exp:1", "success", "exp+1", "success")
    assert a["run_dir"] != b["run_dir"] and a["report"] != b["report"]
    for status in (a, b):
        report = Path(status["report"])
        assert report.is_file() and f"Run `{status['run_id']}`" in report.with_name("report.md").read_text()
        trials = list(Path(status["run_dir"]).glob("*/result.json"))
        assert len(trials) == 1
    with db.connection(pg_url) as conn:
        for status in (a, b):
            folder = Path(status["report"]).parent.name
            assert find_run(conn, folder)[1] == status["run_id"]
            assert find_run(conn, status["run_id"])[1] == status["run_id"]
