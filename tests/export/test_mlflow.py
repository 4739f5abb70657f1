"""The MLflow exporter against a real ``mlflow server`` (PyPI's mlflow, started here),
read back through MLflow's REST API: one parent run per DAG run, one child per trial with
its spec as parameters, figures as metrics, validity as tags and result.json as artifact;
again is idempotent; an unreachable server is a warning and a queued export, never a
failed run.

The server runs from an interpreter that has mlflow: ``GCBENCH_TEST_MLFLOW`` (path of its
``mlflow`` executable), else ``.gcbench-test/mlflow/bin/mlflow`` (``make test-export``
creates it: mlflow lives in a venv of its own, its dependencies would move Airflow's
pins), else ``mlflow`` on PATH. Without any, the tests are skipped with that hint, unless
``GCBENCH_REQUIRE_MLFLOW`` is set (``make test-export`` sets it): then they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _mlflow_exe() -> str | None:
    for candidate in (os.environ.get("GCBENCH_TEST_MLFLOW"), str(REPO / ".gcbench-test" / "mlflow" / "bin" / "mlflow")):
        if candidate and Path(candidate).is_file():
            return candidate
    return shutil.which("mlflow")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(base: str, path: str) -> dict:
    with urllib.request.urlopen(f"{base}{path}", timeout=10) as resp:
        return json.loads(resp.read())


def _post(base: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"{base}{path}", data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    exe = _mlflow_exe()
    if exe is None:
        hint = "no mlflow executable: make test-export (a venv of its own), or GCBENCH_TEST_MLFLOW=/path/to/mlflow"
        if os.environ.get("GCBENCH_REQUIRE_MLFLOW"):  # make test-export (and so CI): never pass by skipping
            pytest.fail(f"GCBENCH_REQUIRE_MLFLOW is set but there is {hint}")
        pytest.skip(hint)
    root = tmp_path_factory.mktemp("mlflow")
    port = _free_port()
    log = (root / "server.log").open("wb")
    proc = subprocess.Popen(
        [
            exe,
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300  # a loaded 2-core machine: mlflow 3 takes a minute or more to start
    while True:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
                if resp.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, 9)  # the server's uvicorn and job workers too
            proc.wait()
            pytest.fail("mlflow server did not start: " + (root / "server.log").read_text()[-2000:])
        time.sleep(0.5)
    # /health answers before the tracking API is warm: its first search (the store's first
    # query, job workers still starting) took over the exporter's timeout on a loaded machine
    try:
        req = urllib.request.Request(
            f"{base}/api/2.0/mlflow/experiments/search",
            data=json.dumps({"max_results": 1}).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=max(10.0, deadline - time.monotonic())) as resp:
            resp.read()
    except OSError as exc:
        os.killpg(proc.pid, 9)
        proc.wait()
        pytest.fail(
            f"mlflow server answers /health but not its API ({exc}): " + (root / "server.log").read_text()[-2000:]
        )
    yield base
    os.killpg(proc.pid, 15)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, 9)  # its job workers (huey) may outlive the server's SIGTERM
    except ProcessLookupError:
        pass
    proc.wait()
    log.close()


def _stored_run(conn, tmp_path, run_id: str):
    """A plan with two h2d trials collected into the database, as a DAG run stores them."""
    import importlib.util

    from gcbench.plan import expand, plan_from_text
    from gcbench.store import ingest, runs

    helper = importlib.util.spec_from_file_location("ingest_helpers", REPO / "tests" / "store" / "test_ingest.py")
    module = importlib.util.module_from_spec(helper)
    helper.loader.exec_module(module)
    plan = plan_from_text(
        "name: mlf\nrepetitions: 1\nworkloads:\n  - {name: copy, kind: h2d, matrix: {memory: [pinned, pageable]}}\n"
    )
    pk = runs.register_run(conn, plan, plan.dag_id, run_id, "2026-11-04T02:00:00+00:00")
    specs = expand(plan)
    for spec in specs:
        module.write_trial(tmp_path / spec.trial_id, spec)
        ingest.collect_trial(
            conn, pk, spec, tmp_path / spec.trial_id, carbon={"intensity_kg_per_kwh": 0.2, "band": [0.1, 0.3]}
        )
    return plan, specs


def _runs(base: str, experiment: str) -> list[dict]:
    exp = _get(base, f"/api/2.0/mlflow/experiments/get-by-name?experiment_name={experiment}")["experiment"]
    return _post(
        base, "/api/2.0/mlflow/runs/search", {"experiment_ids": [exp["experiment_id"]], "max_results": 100}
    ).get("runs", [])


def test_a_stored_run_is_a_parent_run_with_one_child_per_trial(mlflow_server, pg_url, tmp_path):
    from gcbench.export import mlflow
    from gcbench.store import db

    with db.connection(pg_url) as conn:
        plan, specs = _stored_run(conn, tmp_path, "manual__mlflow-1")
        with conn.cursor() as cur:  # as validation stores a named window it left out
            cur.execute(
                "UPDATE trials SET windows_withheld = %s::jsonb WHERE trial_id = %s",
                (json.dumps({"eval": "window eval too short for the sensor: 0.500 s"}), specs[1].trial_id),
            )
        conn.commit()
        target = mlflow.MlflowTarget(mlflow_server, "gcbench-test-export")
        out = mlflow.export_run(conn, plan, "manual__mlflow-1", target)
        assert out.trials == 2
        again = mlflow.export_run(conn, plan, "manual__mlflow-1", target)  # idempotent
        assert again.parent_run_id == out.parent_run_id

    runs = _runs(mlflow_server, "gcbench-test-export")
    tags = [{t["key"]: t["value"] for t in r["data"].get("tags", [])} for r in runs]
    parents = [r for r, t in zip(runs, tags, strict=True) if t.get("gcbench.level") == "dag_run"]
    children = [r for r, t in zip(runs, tags, strict=True) if t.get("gcbench.level") == "trial"]
    assert len(parents) == 1 and len(children) == 2  # not duplicated by the second export
    assert parents[0]["info"]["run_name"] == "mlf manual__mlflow-1"
    by_trial = {{t["key"]: t["value"] for t in c["data"]["tags"]}["gcbench.trial_id"]: c for c in children}
    assert set(by_trial) == {s.trial_id for s in specs}
    child = by_trial[specs[0].trial_id]
    ctags = {t["key"]: t["value"] for t in child["data"]["tags"]}
    assert ctags["mlflow.parentRunId"] == out.parent_run_id
    assert "gcbench.windows_withheld" not in ctags
    withheld_tags = {t["key"]: t["value"] for t in by_trial[specs[1].trial_id]["data"]["tags"]}
    assert withheld_tags["gcbench.windows_withheld"] == "eval: window eval too short for the sensor: 0.500 s"
    assert (ctags["gcbench.status"], ctags["gcbench.valid"], ctags["gcbench.simulated"]) == ("ok", "unknown", "true")
    params = {p["key"]: p["value"] for p in child["data"]["params"]}
    assert params["kind"] == "h2d" and params["variant"] == specs[0].variant and params["repetition"] == "0"
    assert params["factors.memory"] == specs[0].factors["memory"] and params["energy.backend"] == "auto"
    metrics = {m["key"]: m["value"] for m in child["data"]["metrics"]}
    assert metrics["gpu_energy_j"] == 450.0 and metrics["gpu_j_per_gb"] == 150.0
    assert metrics["co2e_kg"] == pytest.approx(450.0 / 3.6e6 * 0.2)
    assert child["info"]["status"] == "FINISHED"
    listed = _get(mlflow_server, f"/api/2.0/mlflow/artifacts/list?run_id={child['info']['run_id']}")
    assert [f["path"] for f in listed["files"]] == ["result.json"]
    exp_id = child["info"]["experiment_id"]
    url = f"{mlflow_server}/api/2.0/mlflow-artifacts/artifacts/{exp_id}/{child['info']['run_id']}/artifacts/result.json"
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert json.loads(resp.read())["trial_id"] == specs[0].trial_id


def test_an_unreachable_server_is_a_warning_and_a_queued_export_sent_later(
    mlflow_server, pg_url, tmp_path, monkeypatch
):
    from gcbench.export import mlflow
    from gcbench.store import db

    monkeypatch.setenv("GCBENCH_HOME", str(tmp_path / "home"))
    lines: list[str] = []
    with db.connection(pg_url) as conn:
        plan, _ = _stored_run(conn, tmp_path, "manual__mlflow-2")
        down = mlflow.MlflowTarget(f"http://127.0.0.1:{_free_port()}", "gcbench-test-queued")
        assert (
            mlflow.export_with_retry(conn, plan, "manual__mlflow-2", down, lines.append, attempts=2, wait_s=0.01)
            is None
        )
    assert lines[-1].startswith(
        "warning: mlflow export of manual__mlflow-2 failed after 2 attempts (MLflow at http://127.0.0.1:"
    )
    (queued,) = mlflow.pending()
    assert (queued["plan"], queued["run_id"], queued["experiment"]) == (
        "mlf",
        "manual__mlflow-2",
        "gcbench-test-queued",
    )
    # the server is back (here: the real one): `gcbench export mlflow --pending` sends the queue
    mlflow.set_pending([{**queued, "tracking_uri": mlflow_server}])
    env = {**os.environ, "GCBENCH_DATABASE_URL": pg_url, "GCBENCH_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "export", "mlflow", "--pending"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(
        f"logged 2 trial(s) of manual__mlflow-2 to {mlflow_server}, experiment gcbench-test-queued"
    )
    assert mlflow.pending() == []
    assert len(_runs(mlflow_server, "gcbench-test-queued")) == 3


def test_a_dag_run_logs_itself_after_its_report(mlflow_server, gcbench_env, pg_url):
    """dag.test() of a small plan (``gcbench.factory.testrun``) with GCBENCH_MLFLOW_TRACKING_URI: its trials are in MLflow."""
    plan = gcbench_env / "mlf-dag.yaml"
    plan.write_text(
        "name: mlf-dag\ndevices: [0]\nrepetitions: 2\nwindow: {steps: 3}\nenergy: {backend: simulated}\n"
        "workloads:\n  - {name: noop, kind: noop, matrix: {tick_s: [0.01]}}\n"
    )
    env = {**os.environ, "AIRFLOW_HOME": str(gcbench_env / "airflow"), "GCBENCH_MLFLOW_TRACKING_URI": mlflow_server}
    status_path = gcbench_env / "status.json"
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.factory.testrun", str(plan), str(status_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    status = json.loads(status_path.read_text())
    assert status["state"] == "success", proc.stdout[-3000:]
    runs = _runs(mlflow_server, "gcbench-mlf-dag")
    levels = sorted({t["key"]: t["value"] for t in r["data"]["tags"]}["gcbench.level"] for r in runs)
    assert levels == ["dag_run", "trial", "trial"]
    parent = next(r for r in runs if {t["key"]: t["value"] for t in r["data"]["tags"]}["gcbench.level"] == "dag_run")
    listed = _get(mlflow_server, f"/api/2.0/mlflow/artifacts/list?run_id={parent['info']['run_id']}")
    assert {f["path"] for f in listed["files"]} == {"report.html", "report.md"}
