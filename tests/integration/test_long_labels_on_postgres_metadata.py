"""C03: a trial whose variant label is longer than Airflow's rendered_map_index (250 characters)
runs to success with Airflow's metadata on PostgreSQL, labelled with its shortened label."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "tests" / "fixtures" / "cases" / "plans" / "long_variant_label.yaml"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def sqlalchemy_url(dsn: str) -> str:
    from psycopg2.extensions import parse_dsn
    from sqlalchemy.engine import URL

    parts = parse_dsn(dsn)
    query = {k: parts[k] for k in ("host", "port") if k in parts}
    return URL.create(
        "postgresql+psycopg2",
        username=parts.get("user"),
        password=parts.get("password"),
        database=parts["dbname"],
        query=query,
    ).render_as_string(hide_password=False)


def test_c03_long_label_is_stored_shortened_with_its_trial_id(gcbench_env, make_database):
    import psycopg2

    from gcbench.plan import expand, load_plan
    from gcbench.plan.identifiers import MAP_INDEX_LABEL_MAX_CHARS, trial_label

    tmp = gcbench_env
    airflow_db = make_database("af_")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp / "airflow"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sqlalchemy_url(airflow_db),
    }
    status_path = tmp / "status.json"
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.factory.testrun", str(PLAN), str(status_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert status_path.exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
    status = json.loads(status_path.read_text())
    assert status["state"] == "success" and status["trials"]["ok"] == 1, status

    (spec,) = expand(load_plan(PLAN))
    expected = trial_label(spec.variant, spec.repetition, spec.trial_id)
    assert len(spec.variant) > MAP_INDEX_LABEL_MAX_CHARS and len(expected) == MAP_INDEX_LABEL_MAX_CHARS
    conn = psycopg2.connect(airflow_db)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT state, rendered_map_index FROM task_instance WHERE task_id = 'run_trial_gpu0' AND map_index = 0"
        )
        assert cur.fetchall() == [("success", expected)]
    conn.close()

    # gcbench report takes the run's folder name (reports/<plan>/<folder>) as well as its run id
    report = Path(status["report"])
    cli = subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "report", report.parent.name],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert cli.stdout.split() == [str(report), str(report.with_name("report.md"))]
