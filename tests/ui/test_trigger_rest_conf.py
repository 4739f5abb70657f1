"""A REST API trigger's ``conf`` is validated against the plan's Params by a live Airflow
(api-server, scheduler with the LocalExecutor, dag-processor: ``airflow_stack.py``):
what JSON Schema can refuse is refused with HTTP 400 before a run exists, and what it
cannot (``repetitions: 2.0``, C04) is taken as 2 by ``expand_trials``. About a minute.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from airflow_stack import AirflowStack

pytestmark = [pytest.mark.slow, pytest.mark.integration]

PLAN = """\
name: smoke
runner: local
devices: [0]
repetitions: 1
window: {steps: 5}
workloads:
  - name: noop
    kind: noop
    matrix: {tick_s: [0.01, 0.02]}
"""
DAG_ID = "gcbench__smoke"
PARAMS = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "params"


@pytest.fixture
def stack(tmp_path, pg_url):
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "smoke.yaml").write_text(PLAN)
    home = tmp_path / "airflow"
    home.mkdir()
    s = AirflowStack(
        home,
        plans,
        {
            "GCBENCH_HOME": str(tmp_path / "gcbench"),
            "GCBENCH_DATABASE_URL": pg_url,
            "GCBENCH_REPORTS_DIR": str(tmp_path / "reports"),
        },
    )
    try:
        s.start(pools=["gcbench_gpu0"])
        yield s
    finally:
        s.stop()


def trigger(stack: AirflowStack, conf: dict) -> tuple[int, dict]:
    """POST /api/v2/dags/{dag_id}/dagRuns: (HTTP status, JSON body)."""
    req = urllib.request.Request(
        f"{stack.url}/api/v2/dags/{DAG_ID}/dagRuns",
        method="POST",
        data=json.dumps({"logical_date": None, "conf": conf}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {stack.token()}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_rest_conf_is_checked_like_the_form_and_2_0_runs_2_repetitions(stack):
    stack.wait(lambda: stack.get(f"/api/v2/dags/{DAG_ID}"), 90, "the DAG processor to parse dags/")

    status, body = trigger(stack, {"variants": ["noop[tick_s=0.03]"]})
    assert status == 400 and "Invalid input for param variants: 'noop[tick_s=0.03]' is not one of" in body["detail"]
    for bad in ({"repetitions": 0}, {"repetitions": 2.5}, {"runner": "dockr"}, {"variants": "noop[tick_s=0.01]"}):
        status, body = trigger(stack, bad)
        assert status == 400 and "Invalid input for param" in body["detail"], (bad, body)
    assert stack.get(f"/api/v2/dags/{DAG_ID}/dagRuns")["total_entries"] == 0  # nothing was created

    conf = {**json.loads((PARAMS / "repetitions_float.json").read_text()), "variants": ["noop[tick_s=0.01]"]}
    status, run = trigger(stack, conf)  # C04: JSON Schema counts 2.0 as an integer
    assert status == 200, run
    run_id = run["dag_run_id"]

    def finished():
        try:  # a busy API server (one worker, two shared cores) may time out a token request: ask again
            run = stack.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")
        except OSError:
            return None
        return run if run and run["state"] in ("success", "failed") else None

    done = stack.wait(finished, 300, "the run to finish")
    tis = stack.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances")["task_instances"]
    trials = sorted((t["rendered_map_index"], t["state"]) for t in tis if t["task_id"] == "run_trial_gpu0")
    assert done["state"] == "success", {(t["task_id"], t["map_index"]): t["state"] for t in tis}
    assert trials == [("noop[tick_s=0.01] #0", "success"), ("noop[tick_s=0.01] #1", "success")]
