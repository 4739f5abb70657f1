"""Ctrl-C means stop: SIGINT to the process group of ``gcbench run`` (what a terminal sends
its foreground job) mid-trial stops that trial, stores it as interrupted with the
samples it has, starts no further trial, fails the run and marks it interrupted, writes
the report of what completed, prints one line and exits 130 once every process it
started has ended; running the command again does only the missing trials."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAN = """\
name: ctrlc
devices: [0]
repetitions: 4
order: sequential
window: {seconds: 5}
energy: {backend: simulated, sample_hz: 20}
workloads:
  - name: noop
    kind: noop
"""


def _ours(marker: str) -> list[str]:
    """Live processes whose environment holds this test's GCBENCH_HOME or whose command
    line names a path in it (the embedded PostgreSQL's data folder)."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(p.info["cmdline"] or [])
            if (
                p.pid != os.getpid()
                and p.status() != psutil.STATUS_ZOMBIE
                and (marker in cmdline or p.environ().get("GCBENCH_HOME") == marker)
            ):
                found.append(f"{p.pid}: {' '.join(p.info['cmdline'] or [])[:120]}")
        except psutil.Error:
            continue
    return found


QUERY = """
import json, sys
from gcbench.store import db
with db.connection() as conn, conn.cursor() as cur:
    cur.execute(sys.argv[1])
    rows = cur.fetchall()
db.stop_embedded()
print(json.dumps(rows, default=str))
"""


def _query(env: dict, sql: str) -> list[list]:
    """Rows from the embedded results database of this test's GCBENCH_HOME (started for
    the query, stopped after it, as ``gcbench runs`` does)."""
    out = subprocess.run([sys.executable, "-c", QUERY, sql], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _trials(env: dict) -> list[list]:
    return _query(
        env,
        "SELECT r.run_id, t.trial_id, t.status, t.error, t.samples_count, t.samples_partial "
        "FROM gcbench.trials t JOIN gcbench.dag_runs r ON r.id = t.dag_run_id ORDER BY t.id",
    )


def _run_state(env: dict) -> list[list]:
    return _query(env, "SELECT run_id, interrupted_at, notes FROM gcbench.dag_runs ORDER BY id")


def test_ctrl_c_stops_stores_reports_and_leaves_no_process(gcbench_env):
    tmp = gcbench_env
    home = os.environ["GCBENCH_HOME"]
    plan = tmp / "ctrlc.yaml"
    plan.write_text(PLAN)
    # no GCBENCH_DATABASE_URL: the run starts (and must stop) the embedded PostgreSQL
    env = {k: v for k, v in os.environ.items() if k != "GCBENCH_DATABASE_URL"}
    env.update({"AIRFLOW_HOME": str(tmp / "airflow"), "COLUMNS": "200"})
    # its own session, as a shell's job: SIGINT goes to the whole foreground process group
    proc = subprocess.Popen(
        [sys.executable, "-m", "gcbench.cli", "run", str(plan)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    runs = Path(home) / "runs" / "ctrlc"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # one trial done, the next one measuring
            done = list(runs.glob("*/*/result.json"))
            measuring = [
                p
                for p in runs.glob("*/*/samples.csv")
                if not (p.parent / "result.json").exists() and p.stat().st_size > 200
            ]
            if done and measuring:
                break
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.2)
        else:
            pytest.fail("no trial was measuring within 300 s")
        interrupted_trial = measuring[0].parent.name
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, out
    # every process it started has ended: trials, samplers, the Airflow child, the embedded PostgreSQL
    assert _ours(home) == []
    last = out.strip().splitlines()[-1]
    m = re.fullmatch(r"interrupted after (\d+) of 4 trials; run again to do the (\d+) missing ones?", last)
    assert m, out
    done_n, missing_n = int(m.group(1)), int(m.group(2))
    assert done_n >= 1 and done_n + missing_n == 4

    trials = _trials(env)
    by_id = {t[1]: t for t in trials}
    stopped = by_id[interrupted_trial]
    assert stopped[2] == "failed" and stopped[3].startswith("interrupted: SIGINT (Ctrl-C)"), stopped
    assert stopped[4] > 0 and stopped[5] is True  # the samples it had, marked partial
    assert sum(1 for t in trials if t[2] == "ok") == done_n
    assert len(trials) == done_n + 1  # no trial started after the interrupted one
    ((run_id, interrupted_at, notes),) = _run_state(env)
    assert interrupted_at is not None
    assert notes == [
        f"Interrupted by SIGINT (Ctrl-C) after {done_n} of 4 trials; running it again does the "
        f"{missing_n} missing ones."
    ]
    status = json.loads(sorted((Path(home) / "logs").glob("run-ctrlc-*.json"))[-1].read_text())
    assert status["state"] == "failed" and status["tasks"]["check_trials"] == "failed"
    report = Path(status["report"])
    assert f"report: {report}" in out
    assert f"Interrupted by SIGINT (Ctrl-C) after {done_n} of 4 trials" in report.with_name("report.md").read_text()

    # the same command again resumes that run: only the missing trials run
    again = subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "run", str(plan)], capture_output=True, text=True, env=env, timeout=600
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"resuming the interrupted run {run_id}" in again.stdout
    after = _trials(env)
    assert {t[0] for t in after} == {run_id} and len(after) == 4 and all(t[2] == "ok" for t in after)
    assert [t for t in after if t[1] in by_id and by_id[t[1]][2] == "ok"] == [
        t for t in trials if t[2] == "ok"
    ]  # the trials done before were not run again
    assert _ours(home) == []
    ((_, interrupted_at, notes),) = _run_state(env)
    # the run's state follows the last attempt; its history stays, at the top of its report
    assert interrupted_at is None and len(notes) == 1
    assert re.fullmatch(
        rf"Interrupted by SIGINT \(Ctrl-C\) after {done_n} of 4 trials at [-\d]+ [:\d]+ UTC; "
        r"resumed at [-\d]+ [:\d]+ UTC\.",
        notes[0],
    ), notes
    assert notes[0] in report.with_name("report.md").read_text()
    assert not (Path(home) / "runs" / "ctrlc" / "interrupted.json").exists()
    assert _ours(home) == []
