"""C14: each attempt proves its own output (fixtures/cases/round3/C14-stale-result-after-kill).

A trial folder reused by a later attempt (a re-run of the same trial, an Airflow retry,
"Clear" in the UI, two run ids that map to one folder): the earlier attempt's files are
moved to ``attempts/<n>-<id>/`` and kept; a result.json counts only if it carries the
attempt id the runner started last; a killed attempt is stored failed.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from gcbench.factory.local import begin_attempt, run_local
from gcbench.plan import expand, plan_from_text
from gcbench.store import db, ingest, runs, trialdir
from gcbench.store.sanitize import IngestNotes

pytestmark = pytest.mark.integration

PLAN = plan_from_text(
    "name: k05-collide\nrepetitions: 1\nwindow: {seconds: 4}\nenergy: {backend: simulated}\n"
    "workloads: [{name: w, kind: noop}]\n"
)


@pytest.fixture
def conn(pg_url):
    with db.connection(pg_url) as c:
        yield c


def _stored(conn, pk):
    with conn.cursor() as cur:
        cur.execute("SELECT status, exit_code, started_at FROM trials WHERE dag_run_id = %s", (pk,))
        return cur.fetchone()


def _trial_pid(outdir: Path) -> int | None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gcbench.trial" in cmd and str(outdir).encode() in cmd:
            return int(proc.name)
    return None


def _kill_in_window(outdir: Path, after_s: float = 1.0) -> None:
    """SIGKILL the attempt's trial process ``after_s`` into its window (the OOM killer)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        log = outdir / "trial.log"
        if log.exists() and "window main begins" in log.read_text():
            break
        time.sleep(0.05)
    time.sleep(after_s)
    pid = _trial_pid(outdir)
    assert pid is not None, "the trial process of the attempt was not found"
    os.kill(pid, signal.SIGKILL)


def test_c14_killed_rerun_is_stored_failed_not_with_the_earlier_result(conn, tmp_path):
    spec = expand(PLAN)[0]
    outdir = tmp_path / "exp_1" / spec.trial_id  # one folder for run ids exp:1 and exp+1
    first = run_local(spec, outdir, timeout_s=120)
    assert first.exit_code == 0
    a_result = json.loads((outdir / "result.json").read_text())
    assert a_result["attempt_id"] == first.attempt_id
    pk_a = runs.register_run(conn, PLAN, PLAN.dag_id, "exp:1", None)
    assert ingest.collect_trial(conn, pk_a, spec, outdir, exit_code=first.exit_code).status == "ok"
    # run B: the same trial in the same folder, SIGKILLed 1 s into its window
    killer = threading.Thread(target=_kill_in_window, args=(outdir,))
    killer.start()
    second = run_local(spec, outdir, timeout_s=120)
    killer.join()
    assert second.exit_code == -signal.SIGKILL and second.attempt_id != first.attempt_id
    assert not (outdir / "result.json").exists()  # nothing of attempt A stands in for attempt B
    kept = outdir / "attempts" / f"1-{first.attempt_id}"
    assert json.loads((kept / "result.json").read_text())["started_at"] == a_result["started_at"]
    pk_b = runs.register_run(conn, PLAN, PLAN.dag_id, "exp+1", None)
    out = ingest.collect_trial(conn, pk_b, spec, outdir, exit_code=trialdir.runner_exit_code(outdir))
    assert out.status == "failed"
    assert out.reason.startswith("trial process ended without a result (exit status -9)")
    status, exit_code, started_at = _stored(conn, pk_b)
    assert (status, exit_code, started_at) == ("failed", -9, None)  # not attempt A's start, energy or status
    # the stale samples.csv of attempt A is not attempt B's: B's samples start after A's ended
    b_samples = (outdir / "samples.csv").read_text().splitlines() if (outdir / "samples.csv").exists() else []
    a_samples = (kept / "samples.csv").read_text().splitlines()
    assert out.samples <= max(len(b_samples) - 1, 0) < len(a_samples) - 1  # B ran ~1 s of a 4 s window


def test_a_result_of_another_attempt_is_refused(tmp_path):
    # a zombie of an earlier attempt (a container still running after an Airflow retry)
    # writes its result.json after the new attempt began
    spec = expand(PLAN)[0]
    outdir = tmp_path / spec.trial_id
    old = begin_attempt(outdir)
    new = begin_attempt(outdir)
    (outdir / "result.json").write_text(
        json.dumps(
            {
                "trial_id": spec.trial_id,
                "plan": spec.plan,
                "attempt_id": old,
                "status": "ok",
                "metrics": {},
                "energy": {},
            }
        )
    )
    result, why = trialdir.load_result(outdir, spec, IngestNotes())
    assert result is None
    assert why == (
        f"result.json refused: written by attempt {old!r}, not by the attempt the runner started last "
        f"({new!r}): another attempt's output"
    )
    assert (outdir / "attempts" / f"1-{old}" / "attempt.json").exists()


def test_a_folder_from_before_attempts_keeps_its_files_aside(tmp_path):
    outdir = tmp_path / "t"
    outdir.mkdir()
    for name in ("spec.json", "result.json", "samples.csv", "runner.json", "trial.log"):
        (outdir / name).write_text(name)
    attempt = begin_attempt(outdir)
    assert sorted(p.name for p in outdir.iterdir()) == ["attempt.json", "attempts", "spec.json"]
    aside = outdir / "attempts" / "1-unrecorded"
    assert sorted(p.name for p in aside.iterdir()) == ["result.json", "runner.json", "samples.csv", "trial.log"]
    assert trialdir.current_attempt(outdir) == attempt


def test_own_result_of_a_killed_process_is_stored_failed(conn, tmp_path):
    # the attempt wrote its result, then the runner saw it killed (time limit, OOM killer)
    plan = plan_from_text(
        "name: k05-short\nrepetitions: 1\nwindow: {seconds: 0.3}\nenergy: {backend: simulated}\n"
        "workloads: [{name: w, kind: noop}]\n"
    )
    spec = expand(plan)[0]
    outdir = tmp_path / spec.trial_id
    assert run_local(spec, outdir, 60).exit_code == 0
    pk = runs.register_run(conn, plan, plan.dag_id, "manual__k", None)
    out = ingest.collect_trial(conn, pk, spec, outdir, exit_code=-9)
    assert out.status == "failed"
    assert out.reason == "killed (exit status -9) after writing result.json (status ok)"
    assert _stored(conn, pk)[:2] == ("failed", -9)


def test_a_result_without_an_attempt_id_in_a_runners_folder_is_refused(tmp_path):
    # the trial run by hand (no GCBENCH_ATTEMPT_ID) in a folder the runner began an attempt in:
    # a newer file, but not the attempt the runner saw
    spec = expand(PLAN)[0]
    outdir = tmp_path / spec.trial_id
    attempt = begin_attempt(outdir)
    result = {"trial_id": spec.trial_id, "plan": spec.plan, "attempt_id": None, "status": "ok"}
    (outdir / "result.json").write_text(json.dumps(result | {"metrics": {}, "energy": {}}))
    loaded, why = trialdir.load_result(outdir, spec, IngestNotes())
    assert loaded is None
    assert why == (
        f"result.json refused: written by attempt None, not by the attempt the runner started last "
        f"({attempt!r}): another attempt's output"
    )
