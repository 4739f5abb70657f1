"""docker-compose.yml for real: up, driven over Airflow 3's REST API, restarted, switched to Celery.

The steps run in this order on one deployment (``make test-compose``):

1. ``docker compose up -d --wait``: every service started, every health check green;
2. the GC-Bench pages answer only behind Airflow's login;
3. three plans started together, each on its own GPU pool: ``gcbench__smoke`` unpaused
   and triggered with ``{"repetitions": 1}``, a plan whose trial SIGKILLs itself, and a
   plan scheduled every minute, unpaused;
4. the self-killing trial's run ends ``failed``, saying which trial and why;
5. the every-minute plan fires with no trigger and its ``regression_check`` runs;
   ``airflow backfill create`` run in the scheduler container backfills two dates;
   then it is paused again;
6. the smoke run ends ``success``: every trial ran as a sibling container on the host's
   engine (the engine's own events, DockerOperator's log), the results database holds
   the plan's number of trials (``psql`` in the postgres container) and the report page
   answers under ``/gcbench``;
7. the postgres service restarted during a run: the run ends with every trial and every
   sample stored exactly once;
8. ``docker compose down`` (volumes kept), then ``up`` again with the CeleryExecutor and
   the ``celery`` profile: every stored result is still there;
9. two GPU hosts (one ``gpu-worker`` project each, queues ``gpu-a`` and ``gpu-b``): a
   plan with ``hosts:`` runs each trial on its host's worker (queue and hostname of each
   task instance, from the API), one at a time per host GPU (its pool).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import pytest
from compose_stack import REPO, EngineEvents, Stack

pytestmark = pytest.mark.compose

SMOKE = "gcbench__smoke"
KILL = "gcbench__compose-kill"
NIGHTLY = "gcbench__compose-nightly"
RESTART = "gcbench__compose-restart"
HOSTS = "gcbench__compose-hosts"
PLANS = Path(__file__).parent / "plans"
SERVICES = {
    "postgres",
    "airflow-init",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
}
TIMINGS: dict[str, float] = {}


def _expected_trials(path: Path, repetitions: int | None = None) -> list:
    from gcbench.plan.loader import load_plan
    from gcbench.plan.trials import expand

    return expand(load_plan(path), repetitions=repetitions)


def _docker(*args: str) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _ti(tis: list[dict], task_id: str, map_index: int = -1) -> dict:
    (ti,) = [t for t in tis if t["task_id"] == task_id and t["map_index"] == map_index]
    return ti


def _stored(stack: Stack, dag_id: str, run_id: str) -> list[list[str]]:
    """(trial_id, status, exit_code, samples_count, samples rows, error) of one run's trials."""
    return stack.psql(
        "SELECT t.trial_id, t.status, coalesce(t.exit_code::text, ''), t.samples_count, "
        "(SELECT count(*) FROM gcbench.samples s WHERE s.trial_pk = t.id), coalesce(t.error, '') "
        "FROM gcbench.trials t JOIN gcbench.dag_runs r ON r.id = t.dag_run_id "
        f"WHERE r.dag_id = '{dag_id}' AND r.run_id = '{run_id}' ORDER BY t.trial_id"
    )


@pytest.fixture(scope="module")
def stack(stack_env):
    env_file, project = stack_env
    s = Stack(env_file, project)
    TIMINGS["up --wait (first start: migrate, admin, pools)"] = s.up()
    yield s
    out = os.environ.get("GCBENCH_COMPOSE_TIMINGS")
    if out:
        Path(out).write_text(json.dumps(TIMINGS, indent=1))


@pytest.fixture(scope="module")
def started(stack):
    """Three plans at once, each on its own GPU pool: smoke (gpu0), the self-killing trial
    (gpu1), the every-minute plan unpaused (gpu2). Yields (run ids, the engine's events
    from then on)."""
    events = EngineEvents()
    stack.triggered_at = time.monotonic()
    runs = {"smoke": stack.trigger(SMOKE, {"repetitions": 1}), "kill": stack.trigger(KILL, {})}
    stack.unpause(NIGHTLY)
    yield runs, events
    events.close()


def test_every_service_is_up_with_a_green_health_check(stack):
    containers = {c["Service"]: c for c in stack.ps()}
    assert set(containers) == SERVICES
    init = containers.pop("airflow-init")
    assert init["State"] == "exited" and init["ExitCode"] == 0, init
    for name, c in containers.items():
        assert c["State"] == "running" and c["Health"] == "healthy", (name, c["State"], c["Health"])
    images = {c["Service"]: c["Image"] for c in stack.ps()}
    assert images["postgres"].startswith("gcbench/postgres:") and images["airflow-scheduler"].startswith(
        "gcbench/airflow:"
    ), images  # the images built without Docker Hub
    pools = {p["name"]: p["slots"] for p in stack.api("GET", "/pools")["pools"]}
    assert {"gcbench_gpu0": 1, "gcbench_gpu1": 1, "gcbench_gpu2": 1}.items() <= pools.items()
    assert {"gcbench_hosta_gpu0": 1, "gcbench_hostb_gpu0": 1}.items() <= pools.items()  # from the plans
    assert stack.api("GET", "/importErrors")["total_entries"] == 0


def test_gcbench_pages_need_airflows_login(stack):
    for path in ("/gcbench/", "/gcbench/api/plans", "/gcbench/dag_runs/gcbench__smoke/x"):
        status, _ = stack.request("GET", path, auth=False)
        assert status == 401, (path, status)
    status, _ = stack.request("GET", "/gcbench/api/plans", auth=False, headers={"Authorization": "Bearer forged"})
    assert status == 403
    status, plans = stack.request("GET", "/gcbench/api/plans")  # Bearer token from /auth/token
    assert status == 200 and "smoke" in [p["plan"] for p in plans], plans
    status, page = stack.request("GET", "/gcbench/", auth=False, headers={"Cookie": f"_token={stack.token()}"})
    assert status == 200 and "GC-Bench reports" in page  # the UI's cookie


def test_a_trial_that_kills_itself_turns_its_run_red_with_the_reason(stack, started):
    runs, _ = started
    run = stack.wait_run(KILL, runs["kill"], timeout_s=900)
    assert run["state"] == "failed"
    tis = stack.task_instances(KILL, runs["kill"])
    states = {(t["task_id"], t["map_index"]): t["state"] for t in tis}
    assert states.pop(("check_trials", -1)) == "failed"
    assert set(states.values()) == {"success"}, states  # collected, validated and reported first
    stored = {r[0]: r for r in _stored(stack, KILL, runs["kill"])}
    (killed,) = [s for s in _expected_trials(PLANS / "compose-kill.yaml") if s.variant == "killed"]
    assert stored[killed.trial_id][1:3] == ["failed", "137"]  # SIGKILL inside the container
    assert sorted(r[1] for r in stored.values()) == ["failed", "ok"]
    check = _ti(tis, "check_trials")
    log = stack.task_log(KILL, runs["kill"], "check_trials", check["try_number"])
    assert (
        f"1 trial(s) failed: {killed.trial_id} (killed #0): trial process ended without a result (exit status 137)"
    ) in log, log[-3000:]


def test_a_scheduled_plan_fires_on_its_own_and_runs_its_regression_check(stack, started):
    def scheduled_run():  # the first one, once ended: no earlier night to compare with
        runs = stack.api("GET", f"/dags/{NIGHTLY}/dagRuns?run_type=scheduled&limit=100")["dag_runs"]
        first = min(runs, key=lambda r: r["logical_date"], default=None)
        return first if first and first["state"] in ("success", "failed") else None

    run = stack.wait_for(scheduled_run, 600, "a scheduled run of the every-minute plan")
    TIMINGS["first scheduled run of the every-minute plan, from its unpause"] = time.monotonic() - stack.triggered_at
    tis = stack.task_instances(NIGHTLY, run["dag_run_id"])
    assert run["run_type"] == "scheduled" and run["state"] == "success", [(t["task_id"], t["state"]) for t in tis]
    check = _ti(tis, "regression_check")
    assert check["state"] == "success"
    log = stack.task_log(NIGHTLY, run["dag_run_id"], "regression_check", check["try_number"])
    assert f"{NIGHTLY} {run['dag_run_id']}: no energy regression in 1 group(s)" in log, log[-3000:]
    assert "noop: not checked (no baseline yet: 0 earlier night(s), 3 needed)" in log, log[-3000:]


def test_airflow_backfill_create_in_the_scheduler_container_backfills_two_dates(stack, started):
    t0 = time.monotonic()
    proc = stack.compose(
        "exec",
        "-T",
        "airflow-scheduler",
        "airflow",
        "backfill",
        "create",
        "--dag-id",
        NIGHTLY,
        "--from-date",
        "2026-06-01T00:00:00+00:00",
        "--to-date",
        "2026-06-01T00:01:00+00:00",
        "--run-on-latest-version",
        timeout=300,
    )
    assert proc.returncode == 0

    def backfill_runs():
        runs = stack.api("GET", f"/dags/{NIGHTLY}/dagRuns?run_type=backfill&limit=10")["dag_runs"]
        return runs if len(runs) >= 2 and all(r["state"] in ("success", "failed") for r in runs) else None

    runs = stack.wait_for(backfill_runs, 600, "the two backfill runs")
    TIMINGS["backfill of two dates"] = time.monotonic() - t0
    stack.unpause(NIGHTLY, paused=True)  # no more runs every minute
    assert len(runs) == 2 and {r["state"] for r in runs} == {"success"}, runs
    dates = sorted(datetime.fromisoformat(r["logical_date"].replace("Z", "+00:00")) for r in runs)
    assert dates[0] != dates[1] and all(d.strftime("%Y-%m-%d %H") == "2026-06-01 00" for d in dates)
    stored = stack.psql(
        "SELECT r.logical_date, count(t.*) FROM gcbench.dag_runs r JOIN gcbench.trials t "
        f"ON t.dag_run_id = r.id WHERE r.dag_id = '{NIGHTLY}' AND r.run_id LIKE 'backfill__%' "
        "GROUP BY 1 ORDER BY 1"
    )
    assert [int(n) for _, n in stored] == [1, 1], stored  # one trial stored for each backfilled date


def test_smoke_run_triggered_over_the_api_runs_every_trial_as_a_sibling_container(stack, started):
    runs, events = started
    run = stack.wait_run(SMOKE, runs["smoke"], timeout_s=1200)
    TIMINGS["smoke run from its trigger (8 trials; tokenizers built unless cached)"] = (
        time.monotonic() - stack.triggered_at
    )
    tis = stack.task_instances(SMOKE, runs["smoke"])
    assert run["state"] == "success", [(t["task_id"], t["map_index"], t["state"]) for t in tis]
    assert run["conf"] == {"repetitions": 1}
    expected = _expected_trials(REPO / "plans" / "smoke.yaml", repetitions=1)
    trial_tis = [t for t in tis if t["task_id"] == "run_trial_gpu0"]
    assert len(trial_tis) == len(expected) == 8 and {t["state"] for t in trial_tis} == {"success"}
    assert {t["pool"] for t in trial_tis} == {"gcbench_gpu0"}

    stored = _stored(stack, SMOKE, runs["smoke"])
    assert sorted(r[0] for r in stored) == sorted(s.trial_id for s in expected)
    assert {(r[1], r[2]) for r in stored} == {("ok", "0")}
    assert all(int(r[3]) > 0 and r[3] == r[4] for r in stored), stored
    in_container = stack.psql(
        "SELECT DISTINCT (result->'environment'->>'in_container') FROM gcbench.trials t "
        "JOIN gcbench.dag_runs r ON r.id = t.dag_run_id "
        f"WHERE r.run_id = '{runs['smoke']}'"
    )
    assert in_container == [["true"]]
    # the host's engine started one trial container per trial: siblings of the Airflow containers
    assert events.started("smoke") == {s.trial_id for s in expected}
    log = stack.task_log(SMOKE, runs["smoke"], "run_trial_gpu0", trial_tis[0]["try_number"], trial_tis[0]["map_index"])
    assert "Starting docker container from image gcbench/trial:latest" in log, log[-3000:]


def test_report_page_answers_under_gcbench(stack, started):
    runs, _ = started
    stack.wait_run(SMOKE, runs["smoke"], timeout_s=1200)
    status, listed = stack.request("GET", "/gcbench/api/plans/smoke/runs")
    assert status == 200 and runs["smoke"] in [r["run_id"] for r in listed], listed
    quoted = urllib.parse.quote(runs["smoke"], safe="")
    status, page = stack.request("GET", f"/gcbench/dag_runs/{SMOKE}/{quoted}")  # the DAG-run tab's link
    assert status == 200 and "GC-Bench report: smoke" in page and "SIMULATED" in page
    status, _ = stack.request("GET", f"/gcbench/dag_runs/{SMOKE}/{quoted}", auth=False)
    assert status == 401


def test_restarting_postgres_during_a_run_loses_nothing_and_stores_nothing_twice(stack):
    run_id = stack.trigger(RESTART, {})
    t0 = time.monotonic()
    stack.wait_for(
        lambda: any(
            t["task_id"] == "run_trial_gpu0" and t["state"] == "running" for t in stack.task_instances(RESTART, run_id)
        ),
        600,
        "a running trial",
        every_s=1,
    )
    stack.compose("restart", "postgres", timeout=120)
    run = stack.wait_run(RESTART, run_id, timeout_s=900)
    TIMINGS["run with a postgres restart"] = time.monotonic() - t0
    tis = stack.task_instances(RESTART, run_id)
    assert run["state"] == "success", [(t["task_id"], t["map_index"], t["state"], t["try_number"]) for t in tis]
    TIMINGS["tasks retried after the postgres restart"] = sum(t["try_number"] > 1 for t in tis)
    expected = _expected_trials(PLANS / "compose-restart.yaml")
    stored = _stored(stack, RESTART, run_id)
    assert sorted(r[0] for r in stored) == sorted(s.trial_id for s in expected)  # each trial once
    assert all(r[1] == "ok" and int(r[3]) > 0 and r[3] == r[4] for r in stored), stored  # each sample once
    duplicates = stack.psql(
        "SELECT count(*) FROM (SELECT trial_pk, t_s FROM gcbench.samples GROUP BY 1, 2 HAVING count(*) > 1) d"
    )
    assert duplicates == [["0"]]


SNAPSHOT_SQL = (
    "SELECT r.dag_id, r.run_id, t.trial_id, t.status, t.samples_count, "
    "(SELECT count(*) FROM gcbench.samples s WHERE s.trial_pk = t.id), "
    "(SELECT count(*) FROM gcbench.metrics m WHERE m.trial_pk = t.id) "
    "FROM gcbench.trials t JOIN gcbench.dag_runs r ON r.id = t.dag_run_id ORDER BY 1, 2, 3"
)


def test_down_and_up_again_keeps_every_stored_result(stack):
    smoke_runs = [r for r in stack.api("GET", f"/dags/{SMOKE}/dagRuns")["dag_runs"] if r["state"] == "success"]
    assert smoke_runs, "the smoke run is stored before the restart"
    before = stack.psql(SNAPSHOT_SQL)
    assert len(before) >= 8 + 2 + 4
    t0 = time.monotonic()
    stack.compose("down", timeout=300)
    assert stack.ps() == []
    volumes = _docker(
        "volume", "ls", "--filter", f"label=com.docker.compose.project={stack.project}", "--format", "{{.Name}}"
    ).split()
    assert f"{stack.project}_postgres-data" in volumes
    # up again, now as the central machine of several GPU hosts: CeleryExecutor + Redis
    stack.shell_env = {"AIRFLOW_EXECUTOR": "CeleryExecutor"}
    stack.up("--profile", "celery")
    TIMINGS["down, then up with the celery profile"] = time.monotonic() - t0
    assert stack.psql(SNAPSHOT_SQL) == before
    assert stack.run(SMOKE, smoke_runs[0]["dag_run_id"])["state"] == "success"  # Airflow's metadata kept too
    status, listed = stack.request("GET", "/gcbench/api/plans/smoke/runs")
    assert status == 200 and smoke_runs[0]["dag_run_id"] in [r["run_id"] for r in listed]
    services = {c["Service"]: c for c in stack.ps("--profile", "celery")}
    assert {"redis", "airflow-worker"} <= set(services)
    assert services["redis"]["Health"] == "healthy" and services["airflow-worker"]["State"] == "running"


def _gpu_host(stack: Stack, name: str, queue: str) -> str:
    """Start one GPU host's worker project (docs/multi-host.md); returns its container hostname."""
    project = f"{stack.project}-{name}"
    files = ["docker-compose.yml", "deploy/compose.debian.yml", "tests/compose/gpu-host-network.yml"]
    stack.compose(
        "--profile",
        "gpu-worker",
        "up",
        "-d",
        "--no-build",
        "airflow-worker-gpu",
        project=project,
        files=files,
        extra_env={
            "GCBENCH_QUEUE": queue,
            "AIRFLOW_EXECUTOR": "CeleryExecutor",
            "GCBENCH_CENTRAL_NETWORK": f"{stack.project}_default",
        },
        timeout=300,
    )
    (container,) = json.loads(_docker("inspect", f"{project}-airflow-worker-gpu-1"))
    assert container["State"]["Running"], container["State"]
    return container["Config"]["Hostname"]


def _overlaps(intervals: list[tuple[str, str]]) -> bool:
    spans = sorted(
        (datetime.fromisoformat(a.replace("Z", "+00:00")), datetime.fromisoformat(b.replace("Z", "+00:00")))
        for a, b in intervals
    )
    return any(nxt[0] < cur[1] for cur, nxt in pairwise(spans))


def test_celery_two_gpu_hosts_run_each_trial_on_its_hosts_worker_one_per_gpu(stack):
    assert stack.shell_env.get("AIRFLOW_EXECUTOR") == "CeleryExecutor", "runs after the celery restart"
    t0 = time.monotonic()
    hostname = {"hosta": _gpu_host(stack, "gpu-a", "gpu-a"), "hostb": _gpu_host(stack, "gpu-b", "gpu-b")}
    queue = {"hosta": "gpu-a", "hostb": "gpu-b"}
    run_id = stack.trigger(HOSTS, {})
    run = stack.wait_run(HOSTS, run_id, timeout_s=900)
    TIMINGS["two-host plan under Celery (4 trials)"] = time.monotonic() - t0
    tis = stack.task_instances(HOSTS, run_id)
    assert run["state"] == "success", [(t["task_id"], t["map_index"], t["state"], t["hostname"]) for t in tis]
    central = {t["hostname"] for t in tis if t["task_id"] in ("expand_trials", "validate", "report")}
    assert {t["queue"] for t in tis if t["task_id"] in ("expand_trials", "validate", "report")} == {"default"}
    assert not central & set(hostname.values()), "central tasks ran on a GPU host"
    for host in ("hosta", "hostb"):
        trials = [t for t in tis if t["task_id"] == f"run_trial_{host}_gpu0"]
        assert len(trials) == 2, [t["task_id"] for t in tis]  # round-robin: two trials per host
        for t in trials + [_ti(tis, f"collect_{host}")]:
            assert (t["queue"], t["hostname"], t["state"]) == (queue[host], hostname[host], "success"), t
        assert {t["pool"] for t in trials} == {f"gcbench_{host}_gpu0"}
        assert not _overlaps([(t["start_date"], t["end_date"]) for t in trials]), [
            (t["start_date"], t["end_date"]) for t in trials
        ]  # the host GPU's pool: one trial at a time
    stored = _stored(stack, HOSTS, run_id)
    assert sorted(r[0] for r in stored) == sorted(s.trial_id for s in _expected_trials(PLANS / "compose-hosts.yaml"))
    assert {r[1] for r in stored} == {"ok"}
