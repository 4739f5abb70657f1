"""plans/nightly.yaml end to end: a planted history, one night run with dag.test(), the
regression_check task failing and its notifier POSTing to a webhook on 127.0.0.1.

The no-op trials' primary metric is their measured window (``duration_s``, about 1.2 s
of sleeps); seven earlier nights are stored at 1.2 s / 1.10, so tonight is about 10 %
"more expensive" than its baseline, well beyond the plan's 5 % threshold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TONIGHT = datetime(2026, 3, 8, 2, 0, tzinfo=UTC)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def webhook():
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    srv = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/nightly", bodies
    srv.shutdown()
    srv.server_close()


def _plant_history(pg_url: str, nights: int, value_s: float) -> None:
    """Earlier nights of the nightly plan's no-op group: 3 valid trials each at ``value_s``,
    stored with the plan's own specs and simulated energy, as tonight's trials run on a
    machine without a GPU: the regression check compares only nights of the same
    conditions (trial spec, GPU model, driver, simulated flag; case C17)."""
    import psycopg2

    from gcbench.plan import expand, load_plan
    from gcbench.store import db

    specs = expand(load_plan(REPO / "plans" / "nightly.yaml"), only_variants=["noop"])

    with db.connection(pg_url):
        pass  # migrated
    conn = psycopg2.connect(pg_url)
    with conn, conn.cursor() as cur:
        cur.execute("SET search_path TO gcbench")
        cur.execute("INSERT INTO plans (plan_name, plan_sha256, plan) VALUES ('nightly', 'planted', '{}')")
        for n in range(1, nights + 1):
            logical = TONIGHT - timedelta(days=n)
            cur.execute(
                "INSERT INTO dag_runs (plan_name, dag_id, run_id, logical_date) VALUES "
                "('nightly', 'gcbench__nightly', %s, %s) RETURNING id",
                (f"scheduled__{logical.isoformat()}", logical),
            )
            run_pk = cur.fetchone()[0]
            for rep, spec in enumerate(specs):
                cur.execute(
                    "INSERT INTO trials (dag_run_id, trial_id, plan_name, variant, workload, kind, repetition, "
                    "spec, status, valid, simulated) VALUES (%s, %s, 'nightly', 'noop', 'noop', 'noop', %s, %s, 'ok', "
                    "true, true) RETURNING id",
                    (run_pk, spec.trial_id, spec.repetition, spec.model_dump_json()),
                )
                cur.execute(
                    "INSERT INTO metrics (trial_pk, name, value) VALUES (%s, 'duration_s', %s)",
                    (cur.fetchone()[0], value_s * (1 + 0.002 * (rep - 1))),
                )
    conn.close()


def test_nightly_regression_fails_the_check_and_notifies(gcbench_env, pg_url, webhook):
    url, bodies = webhook
    _plant_history(pg_url, nights=7, value_s=1.2 / 1.10)
    tmp = gcbench_env
    status_path = tmp / "status.json"
    env = {**os.environ, "AIRFLOW_HOME": str(tmp / "airflow"), "GCBENCH_WEBHOOK_URL": url}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gcbench.factory.testrun",
            str(REPO / "plans" / "nightly.yaml"),
            str(status_path),
            "--variant",
            "noop",
            "--logical-date",
            TONIGHT.isoformat(),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert status_path.exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
    status = json.loads(status_path.read_text())
    assert status["state"] == "failed"
    tasks = status["tasks"]
    assert tasks["regression_check"] == "failed"
    assert {k: v for k, v in tasks.items() if k != "regression_check" and not k.startswith("run_trial")} == {
        "expand_trials": "success",
        "trials_gpu0": "success",
        "collect": "success",
        "validate": "success",
        "report": "success",
        "check_trials": "success",
    }
    assert sorted(v for k, v in tasks.items() if k.startswith("run_trial_gpu0[")) == ["success"] * 3

    (payload,) = bodies
    assert payload["dag_id"] == "gcbench__nightly" and payload["task_id"] == "regression_check"
    assert payload["regressions"] == 1
    (group,) = payload["groups"]
    assert group["variant"] == "noop" and group["verdict"] == "regression" and group["metric"] == "duration_s"
    assert group["n_tonight"] == 3 and group["n_baseline"] == 21 and group["baseline_nights"] == 7
    assert 8.0 < group["pct_change"] < 20.0
    # 3 tonight: no "95 %" interval of the change (C22: it would cover about 75 %), the note says why
    assert group["pct_ci_low"] is None and "n=3 vs 21: at least 5 values per group needed" in group["note"]
    # all 3 above all 21 (ties among the planted values: SciPy's normal approximation); one group: Holm = raw
    assert group["p_mannwhitney_holm"] == group["p_mannwhitney"] < 0.01

    # the report of the night shows the trend of the stored nights
    html = Path(status["report"]).read_text()
    assert "Nightly trend" in html
