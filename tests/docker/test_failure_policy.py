"""The docker runner's failure policy against a real engine.

* a trial that ran and failed is a result, not an error: ``run_docker`` returns its exit
  status (the Airflow task succeeds, so it is not retried) and ``collect`` stores it as
  failed with the container's output as its log tail;
* infrastructure failures (engine unreachable, container that cannot be created or
  started) raise, so Airflow retries them with backoff;
* a task killed (SIGTERM) or timed out (``execution_timeout``) leaves no container.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gcbench.factory.local import write_spec
from gcbench.plan import expand, plan_from_text

pytestmark = pytest.mark.docker

TRIAL_IMAGE = os.environ.get("GCBENCH_TEST_TRIAL_IMAGE", "gcbench/trial:latest")


def containers_of(client, trial_id: str):
    """Containers (any state) of one trial, by the runner's label."""
    return client.containers.list(all=True, filters={"label": f"gcbench.trial_id={trial_id}"})


REPO = Path(__file__).resolve().parents[2]

PLAN = """\
name: dockfail
runner: docker
image: {image}
devices: [0]
warmup: {{steps: 0}}
window: {{seconds: {window_s}}}
energy: {{backend: simulated, sample_hz: 10, counter_hz: 10}}
workloads:
  - name: w
    kind: noop
    settings: {settings}
"""


def make_spec(tmp_path: Path, *, window_s: float = 0.5, settings: str = "{}", image: str = TRIAL_IMAGE):
    plan = plan_from_text(PLAN.format(image=image, window_s=window_s, settings=settings))
    (spec,) = expand(plan, repetitions=1)
    outdir = tmp_path / "trial" / spec.trial_id
    write_spec(spec, outdir)
    return spec, outdir


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GCBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GCBENCH_PROJECT_ROOT", str(REPO))
    return tmp_path / "home"


def test_trial_that_ran_and_succeeded_returns_0_and_leaves_no_container(docker_client, no_gpu_engine, home, tmp_path):
    from gcbench.factory.docker import run_docker

    spec, outdir = make_spec(tmp_path)
    assert run_docker(spec, TRIAL_IMAGE, outdir, {}, timeout_s=60) == 0
    result = json.loads((outdir / "result.json").read_text())
    assert result["status"] == "ok" and result["environment"]["in_container"] is True
    # written by the container as the calling user, readable by collect
    for name in ("result.json", "samples.csv", "trial.log"):
        assert (outdir / name).stat().st_uid == os.getuid()
    assert "window main begins" in (outdir / "runner.log").read_text()
    assert containers_of(docker_client, spec.trial_id) == []


def test_failed_trial_is_returned_not_raised_and_collected_as_failed(
    docker_client, no_gpu_engine, home, tmp_path, pg_url, monkeypatch
):
    from gcbench.factory.docker import run_docker
    from gcbench.store import db, ingest, runs

    monkeypatch.setenv("GCBENCH_DATABASE_URL", pg_url)
    spec, outdir = make_spec(tmp_path, settings="{tick_s: 0}")  # the workload raises ValueError: exit 1
    code = run_docker(spec, TRIAL_IMAGE, outdir, {}, timeout_s=60)
    assert code == 1
    assert containers_of(docker_client, spec.trial_id) == []
    assert "tick_s must be > 0" in (outdir / "runner.log").read_text()
    plan = plan_from_text(PLAN.format(image=TRIAL_IMAGE, window_s=0.5, settings="{tick_s: 0}"))
    with db.connection(pg_url) as conn:
        pk = runs.register_run(conn, plan, plan.dag_id, "manual__fail", None)
        outcome = ingest.collect_trial(conn, pk, spec, outdir, exit_code=code)
        assert outcome.status == "failed"
        with conn.cursor() as cur:
            cur.execute("SELECT status, log_tail FROM gcbench.trials WHERE trial_id = %s", (spec.trial_id,))
            status, log_tail = cur.fetchone()
    assert status == "failed" and "tick_s must be > 0" in (log_tail or "")


def test_trial_killed_inside_its_container_is_a_failed_trial(docker_client, no_gpu_engine, home, tmp_path):
    from gcbench.factory.docker import run_docker

    spec, outdir = make_spec(tmp_path, window_s=30, settings="{kill_self_after_s: 0.3}")
    assert run_docker(spec, TRIAL_IMAGE, outdir, {}, timeout_s=60) == 137  # SIGKILL, as an OOM kill
    assert not (outdir / "result.json").exists() and (outdir / "samples.csv").exists()
    assert containers_of(docker_client, spec.trial_id) == []


def test_engine_unreachable_raises_for_a_retry(home, tmp_path):
    from airflow.exceptions import AirflowException
    from docker.errors import DockerException

    from gcbench.factory.docker import run_docker

    spec, outdir = make_spec(tmp_path)
    with pytest.raises((DockerException, AirflowException), match="(?i)docker|connect"):
        run_docker(spec, TRIAL_IMAGE, outdir, {}, timeout_s=60, docker_url=f"unix://{tmp_path}/no-engine.sock")


def test_container_start_error_raises_and_removes_the_container(docker_client, home, tmp_path, monkeypatch):
    from docker.errors import APIError

    from gcbench.factory.docker import run_docker

    # GPUs requested from an engine without the NVIDIA toolkit: created, then start fails
    monkeypatch.setenv("GCBENCH_DOCKER_GPUS", "all")
    spec, outdir = make_spec(tmp_path)
    with pytest.raises(APIError, match="device driver"):
        run_docker(spec, TRIAL_IMAGE, outdir, {}, timeout_s=60)
    assert containers_of(docker_client, spec.trial_id) == []


def test_missing_image_raises(docker_client, no_gpu_engine, home, tmp_path):
    from gcbench.factory.docker import run_docker

    image = "127.0.0.1:9/gcbench-missing:1"  # no registry there: the pull fails at once
    spec, outdir = make_spec(tmp_path, image=image)
    with pytest.raises(Exception) as info:
        run_docker(spec, image, outdir, {}, timeout_s=60)
    assert "TrialContainer" not in type(info.value).__name__
    assert containers_of(docker_client, spec.trial_id) == []


def _wait_running(client, trial_id: str, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [c for c in containers_of(client, trial_id) if c.status == "running"]
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"no running container of trial {trial_id} after {timeout_s} s")


def _wait_gone(client, trial_id: str, timeout_s: float = 30.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if not containers_of(client, trial_id):
            return time.monotonic() - started
        time.sleep(0.2)
    raise AssertionError(f"container of trial {trial_id} still there {timeout_s} s after the kill")


KILL_SCRIPT = """
import sys
from pathlib import Path
from gcbench.factory.docker import run_docker
from gcbench.spec import TrialSpec
spec = TrialSpec.from_file(sys.argv[1])
run_docker(spec, sys.argv[2], Path(sys.argv[3]), {}, timeout_s=600)
"""


def test_sigterm_to_the_task_stops_and_removes_the_container(docker_client, no_gpu_engine, home, tmp_path):
    spec, outdir = make_spec(tmp_path, window_s=300)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, str(outdir / "spec.json"), TRIAL_IMAGE, str(outdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ),
    )
    try:
        _wait_running(docker_client, spec.trial_id)
        proc.send_signal(signal.SIGTERM)  # what Airflow's supervisor sends a task it kills
        gone_after_s = _wait_gone(docker_client, spec.trial_id)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert gone_after_s < 15
    assert proc.returncode != 0 and "TrialContainerKilled" in out


def test_execution_timeout_removes_the_container(docker_client, no_gpu_engine, home, tmp_path):
    from airflow.sdk.exceptions import AirflowTaskTimeout
    from airflow.sdk.execution_time.timeout import timeout

    from gcbench.factory.docker import run_docker

    spec, outdir = make_spec(tmp_path, window_s=300)
    started = time.monotonic()
    with pytest.raises(AirflowTaskTimeout):
        with timeout(8):  # what the task runner wraps execute() in for execution_timeout
            run_docker(spec, TRIAL_IMAGE, outdir, {}, timeout_s=600)
    assert time.monotonic() - started < 30
    assert containers_of(docker_client, spec.trial_id) == []


def test_run_trial_tasks_retry_with_backoff_and_have_an_execution_timeout():
    from gcbench.factory.dag import build_dag

    plan = plan_from_text(PLAN.format(image=TRIAL_IMAGE, window_s=0.5, settings="{}"))
    dag = build_dag(plan)
    (run,) = [t for t in dag.tasks if t.task_id.startswith("run_trial_")]
    assert run.retries == 2 and run.retry_exponential_backoff
    assert run.execution_timeout is not None
    assert run.execution_timeout.total_seconds() > plan.trial_timeout_s
