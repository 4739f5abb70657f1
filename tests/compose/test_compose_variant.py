"""A new pipeline variant backfilled into stored nights, under the compose scheduler (issue 22, item 5).

The steps run in this order, after test_compose_stack.py (the deployment back on the
LocalExecutor: a plan without ``hosts:`` runs its trials and builds where the scheduler
is, the one container of the central machine with the engine's socket):

1. ``gcbench__compose-variant`` (tests/compose/plans/compose-variant.yaml: scheduled
   ``@daily``, TinyLM with ``path: [torch]``, a preprocessor ``c`` declared with its
   source folder examples/tokenizer-c in the deployment) is unpaused (its one scheduled
   run fires) and ``airflow backfill create`` stores two past nights with the torch
   variant;
2. ``external-c`` is added to the matrix of the deployment's copy of the plan; once the
   DAG processor has the new DAG (its ``build_tokenizers`` task),
   ``airflow backfill create --reprocess-behavior completed --run-on-latest-version``
   over the same nights runs only the new variant's trials, one per night and
   repetition: the build task makes the toolchain image from the declared Dockerfile
   on the local base image (GCBENCH_BASE_IMAGE), builds tok-c in it and passes the
   conformance check; nothing stored re-runs or is stored twice; the regression check
   raises no alarm (the new variant has no baseline); the report has the new variant
   and the nightly trend's data has it for both nights;
3. a line appended to tok.c in the deployment is a new version: backfilled again, its
   trials run (new trial ids, one per night and repetition), the old version's rows are
   unchanged, and each stored result names its version (``preprocessor.source_sha256``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest
from compose_stack import EngineEvents, Stack

pytestmark = pytest.mark.compose

DAG = "gcbench__compose-variant"
PLAN = "compose-variant"
PLAN_FILE = Path(__file__).parent / "plans" / "compose-variant.yaml"
NIGHTS = ("2026-06-01T00:00:00+00:00", "2026-06-02T00:00:00+00:00")
TORCH = "tinylm-infer[path=torch]"
C = "tinylm-infer[path=external-c]"
TIMINGS: dict[str, float] = {}

# one row per stored trial of the plan's DAG: what must not change once stored
ROWS_SQL = (
    "SELECT t.id, t.trial_id, t.variant, r.run_id, to_char(r.logical_date AT TIME ZONE 'UTC', "
    "'YYYY-MM-DD\"T\"HH24:MI:SS'), t.status, t.samples_count, md5(t.result::text), "
    "coalesce(t.result->'preprocessor'->>'source_sha256', '') "
    "FROM gcbench.trials t JOIN gcbench.dag_runs r ON r.id = t.dag_run_id "
    f"WHERE r.dag_id = '{DAG}' ORDER BY t.id"
)


def _rows(stack: Stack) -> dict[str, tuple[str, ...]]:
    """{trials.id: (trial_id, variant, run_id, logical date, status, samples, result md5, source sha256)}."""
    return {r[0]: tuple(r[1:]) for r in stack.psql(ROWS_SQL)}


def _invalid(stack: Stack) -> list[list[str]]:
    """(variant, run id, reasons) of the plan's stored trials that validation refused."""
    return stack.psql(
        "SELECT t.variant, r.run_id, t.reasons::text FROM gcbench.trials t JOIN gcbench.dag_runs r "
        f"ON r.id = t.dag_run_id WHERE r.dag_id = '{DAG}' AND t.valid IS NOT TRUE"
    )


def _night(iso: str) -> str:
    return iso[:19]


def _specs(plan_file: Path, project_dir: Path | None = None):
    """The plan's trial specs as this checkout expands them; ``project_dir``: the project
    root its preprocessor's source folder is relative to (the deployment's, for the
    version the deployment holds)."""
    from gcbench.plan.loader import load_plan
    from gcbench.plan.trials import expand

    saved = os.environ.get("GCBENCH_PROJECT_ROOT")
    if project_dir is not None:
        os.environ["GCBENCH_PROJECT_ROOT"] = str(project_dir)
    try:
        return expand(load_plan(plan_file))
    finally:
        if saved is None:
            os.environ.pop("GCBENCH_PROJECT_ROOT", None)
        else:
            os.environ["GCBENCH_PROJECT_ROOT"] = saved


@pytest.fixture(scope="module")
def stack(stack_env):
    """The deployment on the LocalExecutor (test_compose_stack.py ends on Celery, whose
    default-queue worker has no engine socket); started when this module runs alone."""
    env_file, project = stack_env
    s = Stack(env_file, project)
    s.shell_env = {"AIRFLOW_EXECUTOR": "LocalExecutor"}
    TIMINGS["variant backfill: up --wait on the LocalExecutor"] = s.up()
    s.project_dir = Path(s.env["GCBENCH_PROJECT_DIR"])
    yield s
    s.unpause(DAG, paused=True)
    out = os.environ.get("GCBENCH_COMPOSE_TIMINGS")
    if out:
        merged = json.loads(Path(out).read_text()) if Path(out).is_file() else {}
        Path(out).write_text(json.dumps({**merged, **TIMINGS}, indent=1))


@pytest.fixture(scope="module")
def events():
    ev = EngineEvents()
    yield ev
    ev.close()


def _started(events: EngineEvents, since: int) -> list[str]:
    """Trial ids of the plan's trial containers started since event number ``since``."""
    return sorted(
        e["Actor"]["Attributes"]["gcbench.trial_id"]
        for e in list(events.events)[since:]
        if e["Actor"]["Attributes"].get("gcbench.plan") == PLAN
    )


def _backfill(stack: Stack, *extra: str) -> list[dict]:
    """``airflow backfill create`` over NIGHTS in the scheduler container; returns the two
    runs once the backfill has completed."""
    proc = stack.compose(
        "exec",
        "-T",
        "airflow-scheduler",
        "airflow",
        "backfill",
        "create",
        "--dag-id",
        DAG,
        "--from-date",
        NIGHTS[0],
        "--to-date",
        NIGHTS[1],
        "--run-on-latest-version",
        *extra,
        timeout=300,
    )
    assert proc.returncode == 0

    def done():
        backfills = stack.api("GET", f"/backfills?dag_id={DAG}&limit=100")["backfills"]
        if not backfills or any(b["completed_at"] is None for b in backfills):
            return None
        runs = stack.api("GET", f"/dags/{DAG}/dagRuns?run_type=backfill&limit=100")["dag_runs"]
        return runs if all(r["state"] in ("success", "failed") for r in runs) else None

    runs = stack.wait_for(done, 900, f"the backfill {' '.join(extra)} of {DAG}", every_s=3)
    assert sorted(r["logical_date"][:10] for r in runs) == [n[:10] for n in NIGHTS], runs
    return sorted(runs, key=lambda r: r["logical_date"])


def _states(stack: Stack, run: dict) -> list:
    return [(t["task_id"], t["map_index"], t["state"]) for t in stack.task_instances(DAG, run["dag_run_id"])]


def _log(stack: Stack, run: dict, task_id: str) -> str:
    (ti,) = [t for t in stack.task_instances(DAG, run["dag_run_id"]) if t["task_id"] == task_id]
    assert ti["state"] == "success", (task_id, ti["state"])
    return stack.task_log(DAG, run["dag_run_id"], task_id, ti["try_number"])


def _image_exists(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True, timeout=60).returncode == 0


STATE: dict = {}


def test_stored_nights_of_the_torch_variant(stack, events):
    t0 = time.monotonic()
    mark = len(events.events)
    stack.unpause(DAG)  # tasks of a paused DAG never run; its one scheduled run fires now
    runs = _backfill(stack)  # beside the scheduled run: one trial at a time on the plan's GPU
    for run in runs:
        assert run["state"] == "success", _states(stack, run)
    scheduled = stack.wait_for(
        lambda: next(
            (
                r
                for r in stack.api("GET", f"/dags/{DAG}/dagRuns?run_type=scheduled&limit=10")["dag_runs"]
                if r["state"] in ("success", "failed")
            ),
            None,
        ),
        600,
        "the scheduled run of the variant plan",
    )
    assert scheduled["state"] == "success", _states(stack, scheduled)
    TIMINGS["variant backfill: scheduled run + two nights, torch"] = time.monotonic() - t0
    torch = [s for s in _specs(PLAN_FILE) if s.variant == TORCH]
    assert len(torch) == len(_specs(PLAN_FILE))  # the plan as shipped: torch only
    rows = _rows(stack)
    per_night = {n: sorted(r[0] for r in rows.values() if r[3] == _night(n)) for n in NIGHTS}
    assert per_night == {n: sorted(s.trial_id for s in torch) for n in NIGHTS}, rows
    assert {r[1] for r in rows.values()} == {TORCH} and {r[4] for r in rows.values()} == {"ok"}
    assert len(rows) == 3 * len(torch)  # the scheduled night too
    assert _started(events, mark) == sorted([s.trial_id for s in torch] * 3)
    assert _invalid(stack) == []  # the regression check and the trend see only valid trials
    STATE.update(runs=runs, rows=rows, scheduled=scheduled)


def test_added_variant_is_backfilled_alone_built_checked_and_reported(stack, events):
    assert STATE, "runs after test_stored_nights_of_the_torch_variant"
    deployed = stack.project_dir / "plans" / "compose-variant.yaml"
    text = deployed.read_text()
    assert text.count("path: [torch]") == 1
    deployed.write_text(text.replace("path: [torch]", "path: [torch, external-c]"))
    t0 = time.monotonic()

    def reparsed():
        tasks = stack.api("GET", f"/dags/{DAG}/tasks")["tasks"]
        return "build_tokenizers" in {t["task_id"] for t in tasks}

    stack.wait_for(reparsed, 300, "the DAG processor to parse the edited plan", every_s=3)
    TIMINGS["variant backfill: edited plan parsed"] = time.monotonic() - t0
    specs = _specs(deployed, stack.project_dir)
    new = sorted(s.trial_id for s in specs if s.variant == C)
    assert new and {s.trial_id for s in specs if s.variant == TORCH} == {r[0] for r in STATE["rows"].values()}
    STATE["toolchain_image_existed"] = _image_exists("gcbench/preprocessor-c-toolchain:1")
    mark = len(events.events)
    t0 = time.monotonic()
    runs = _backfill(stack, "--reprocess-behavior", "completed")
    image = "kept" if STATE["toolchain_image_existed"] else "made"
    TIMINGS[f"variant backfill: external-c added (toolchain image {image}, build, conformance, trials)"] = (
        time.monotonic() - t0
    )
    assert [r["dag_run_id"] for r in runs] == [r["dag_run_id"] for r in STATE["runs"]]  # the same nights, re-run
    for run in runs:
        assert run["state"] == "success", _states(stack, run)

    # only the new variant ran: one trial container per night and repetition
    assert _started(events, mark) == sorted(new * len(NIGHTS))
    rows = _rows(stack)
    assert {k: rows[k] for k in STATE["rows"]} == STATE["rows"]  # every stored trial as it was
    added = {k: r for k, r in rows.items() if k not in STATE["rows"]}
    for night in NIGHTS:
        assert sorted(r[0] for r in added.values() if r[3] == _night(night)) == new, added
    assert {(r[1], r[4]) for r in added.values()} == {(C, "ok")}
    assert len(added) == len(new) * len(NIGHTS)
    duplicates = stack.psql(
        "SELECT count(*) FROM (SELECT t.dag_run_id, t.trial_id FROM gcbench.trials t JOIN gcbench.dag_runs r "
        f"ON r.id = t.dag_run_id WHERE r.dag_id = '{DAG}' GROUP BY 1, 2 HAVING count(*) > 1) d"
    )
    assert duplicates == [["0"]]
    assert _invalid(stack) == []
    (version,) = {r[7] for r in added.values()}
    assert len(version) == 64

    # the build task: toolchain image made from the declared Dockerfile, tok-c built and proven
    logs = [_log(stack, run, "build_tokenizers") for run in runs]
    made = [log for log in logs if "making the toolchain image" in log]
    if STATE["toolchain_image_existed"]:  # kept by the engine since an earlier make test-compose
        assert not made
    else:  # made from examples/tokenizer-c/Dockerfile on GCBENCH_BASE_IMAGE, by one of the runs or both
        assert made and all(f"BASE_IMAGE={stack.env['GCBENCH_BASE_IMAGE']}" in log for log in made), logs[0][-3000:]
    for log in logs:
        assert "preprocessor c: " in log and f"(source {version[:12]}," in log, log[-3000:]
        assert "inputs," in log and "ids identical to the reference" in log, log[-3000:]

    # the regression check: green, and the new variant is not checked (no history), not a regression
    for run in runs:
        log = _log(stack, run, "regression_check")
        assert f"{DAG} {run['dag_run_id']}: no energy regression in 2 group(s)" in log, log[-3000:]
        assert f"{C}: not checked (no baseline yet: " in log, log[-3000:]
        assert f"{TORCH}: not checked (no baseline yet: " in log, log[-3000:]

    # the report of each night has the new variant; the nightly trend's data has it on both nights
    for run in runs:
        assert _log(stack, run, "report")
        quoted = urllib.parse.quote(run["dag_run_id"], safe="")
        status, page = stack.request("GET", f"/gcbench/dag_runs/{DAG}/{quoted}")
        assert status == 200 and "GC-Bench report: compose-variant" in page, (status, str(page)[:500])
        assert "external-c" in page and "Nightly trend" in page
    trend = stack.psql(
        "SELECT to_char(r.logical_date AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS'), count(*) "
        "FROM gcbench.trials t JOIN gcbench.dag_runs r ON r.id = t.dag_run_id "
        f"WHERE r.dag_id = '{DAG}' AND t.variant = '{C}' AND t.valid IS TRUE AND t.status = 'ok' GROUP BY 1 ORDER BY 1"
    )
    assert trend == [[_night(n), str(len(new))] for n in NIGHTS]  # what history_frame plots
    STATE.update(rows=rows, version=version, new=new)


def test_a_changed_source_is_a_new_version_backfilled_beside_the_old(stack, events):
    assert "version" in STATE, "runs after test_added_variant_is_backfilled_alone_built_checked_and_reported"
    tok = stack.project_dir / "examples" / "tokenizer-c" / "tok.c"
    tok.write_text(tok.read_text() + "/* a new version: tests/compose/test_compose_variant.py */\n")
    specs = _specs(stack.project_dir / "plans" / "compose-variant.yaml", stack.project_dir)
    new = sorted(s.trial_id for s in specs if s.variant == C)
    (version,) = {s.preprocessor["source_sha256"] for s in specs if s.variant == C}
    assert version != STATE["version"] and not set(new) & set(STATE["new"])
    mark = len(events.events)
    t0 = time.monotonic()
    runs = _backfill(stack, "--reprocess-behavior", "completed")
    TIMINGS["variant backfill: new tok-c version (build, conformance, trials)"] = time.monotonic() - t0
    for run in runs:
        assert run["state"] == "success", _states(stack, run)
    assert _started(events, mark) == sorted(new * len(NIGHTS))
    rows = _rows(stack)
    assert {k: rows[k] for k in STATE["rows"]} == STATE["rows"]  # the old version's rows as they were
    added = {k: r for k, r in rows.items() if k not in STATE["rows"]}
    for night in NIGHTS:
        assert sorted(r[0] for r in added.values() if r[3] == _night(night)) == new, added
    assert {(r[1], r[4], r[7]) for r in added.values()} == {(C, "ok", version)}
    old = [r for r in rows.values() if r[1] == C and r[7] == STATE["version"]]
    assert len(old) == len(STATE["new"]) * len(NIGHTS)  # both versions stored, each labelled
    for log in (_log(stack, run, "build_tokenizers") for run in runs):
        assert f"(source {version[:12]}," in log and "ids identical to the reference" in log, log[-3000:]
    for run in runs:
        log = _log(stack, run, "regression_check")
        assert "no energy regression" in log and f"{C}: not checked (" in log, log[-3000:]
