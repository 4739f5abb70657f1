"""plans/smoke.yaml with the docker runner, for real: ``gcbench run PLAN --runner docker``.

Airflow's ``dag.test()`` runs the plan's DAG; the native tokenizers are compiled in
toolchain containers and every trial runs in a trial container (no network) through
the DockerOperator; ``collect`` loads the samples into PostgreSQL and ``report`` writes
the report. On an engine without GPUs the trials measure the simulated device, labelled
so in the data.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "plans" / "smoke.yaml"


@pytest.fixture(scope="module")
def smoke_run(docker_client, pg_server_url, tmp_path_factory):
    """Run the smoke plan once through the docker runner; yields (completed process, tmp, db url)."""
    import psycopg2
    from psycopg2.extensions import make_dsn, parse_dsn

    tmp = tmp_path_factory.mktemp("smoke-docker")
    admin = psycopg2.connect(pg_server_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS smoke_docker")
        cur.execute("CREATE DATABASE smoke_docker")
    admin.close()
    url = make_dsn(**{**parse_dsn(pg_server_url), "dbname": "smoke_docker"})
    env = {
        **os.environ,
        "GCBENCH_HOME": str(tmp / "home"),
        "GCBENCH_REPORTS_DIR": str(tmp / "reports"),
        "GCBENCH_DATABASE_URL": url,
        "GCBENCH_PROJECT_ROOT": str(REPO),
        "AIRFLOW_HOME": str(tmp / "airflow"),
        "GCBENCH_DOCKER_GPUS": os.environ.get("GCBENCH_DOCKER_GPUS", "none"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "run", str(PLAN), "--runner", "docker"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    yield proc, tmp, url


def _expected():
    from gcbench.plan.loader import load_plan
    from gcbench.plan.trials import expand

    specs = expand(load_plan(PLAN))
    return len(specs), {s.kind for s in specs}


def _rows(url: str, sql: str, *args):
    import psycopg2

    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()
    finally:
        conn.close()


def test_smoke_plan_runs_every_trial_in_a_container(smoke_run):
    proc, tmp, url = smoke_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = _rows(
        url,
        "SELECT kind, status, (result->'environment'->>'in_container')::boolean, samples_count, simulated,"
        " exit_code FROM gcbench.trials WHERE plan_name = 'smoke'",
    )
    count, kinds = _expected()
    assert len(rows) == count
    assert {r[0] for r in rows} == kinds
    for kind, status, in_container, samples, simulated, exit_code in rows:
        assert status == "ok" and exit_code == 0, (kind, status)
        assert in_container is True, kind
        assert samples > 0, kind
        assert simulated == (os.environ.get("GCBENCH_DOCKER_GPUS", "none") == "none")


def test_samples_and_metrics_stored_for_every_trial(smoke_run):
    _, _, url = smoke_run
    (stored,) = _rows(url, "SELECT count(*) FROM gcbench.samples s JOIN gcbench.trials t ON t.id = s.trial_pk")[0:1]
    (expected,) = _rows(url, "SELECT sum(samples_count) FROM gcbench.trials")[0:1]
    assert stored[0] == expected[0] > 0
    missing = _rows(
        url,
        "SELECT t.trial_id FROM gcbench.trials t WHERE NOT EXISTS"
        " (SELECT 1 FROM gcbench.metrics m WHERE m.trial_pk = t.id AND m.name = 'duration_s')",
    )
    assert missing == []
    paths = _rows(url, "SELECT DISTINCT t.spec->'factors'->>'path' FROM gcbench.trials t WHERE kind = 'tinylm'")
    assert {p[0] for p in paths} >= {"torch", "external-go", "external-rust"}


def test_tokenizers_compiled_in_containers(smoke_run):
    _, tmp, _ = smoke_run
    tools = tmp / "home" / "tools"
    for impl in ("go", "rust"):
        (info,) = list(tools.glob(f"gcbench-tok-{impl}-*.json"))
        assert json.loads(info.read_text())["builder"] == f"docker:gcbench/tokenizer-{impl}-toolchain:1"
        assert os.access(info.with_suffix(""), os.X_OK)


def test_trial_folders_belong_to_the_runner_user(smoke_run):
    _, tmp, _ = smoke_run
    results = list((tmp / "home" / "runs" / "smoke").glob("*/*/result.json"))
    assert len(results) == _expected()[0]
    for path in results:
        for f in path.parent.iterdir():
            assert f.stat().st_uid == os.getuid(), f


def test_report_written_and_stored(smoke_run):
    _, tmp, url = smoke_run
    reports = list((tmp / "reports" / "smoke").glob("*/report.html"))
    assert len(reports) == 1 and reports[0].stat().st_size > 10_000
    assert (reports[0].parent / "report.md").exists()
    assert _rows(url, "SELECT count(*) FROM gcbench.reports")[0][0] == 1


def test_no_container_left_behind(smoke_run, docker_client):
    for label in ("gcbench.trial_id", "gcbench.tokenizer"):
        assert docker_client.containers.list(all=True, filters={"label": label}) == []
