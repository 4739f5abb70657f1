"""A plan with a precision target runs in two rounds and stops early on a steady group
and late on a noisy one (issue 21, item 3).

``repetitions: {min: 6, max: 8, until_ci_rel: 0.2}`` over two noop variants: one with a
steady 1.2 s window (the simulated sensor needs 10 updates of 0.1 s), one with a planted
noise level (``jitter_s_sd``: each trial's window lasts 1.2 s + |N(0, 0.6)| s, seeded per trial, so the noise is the same on every
machine). Stein's rule on the first round's ``duration_s`` asks 6 trials of the steady
group (its first round) and more than 6, capped at 8, of the noisy one; the report says
which reached the target. Run as a user runs it (``gcbench run PLAN``: the DAG through
``dag.test()``). Real PostgreSQL, real trial processes, simulated device. (How a re-run
finds both rounds stored: tests/factory/test_precision_target.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAN = """
name: precision-test
devices: [0]
repetitions: {min: 6, max: 8, until_ci_rel: 0.2}
order: sequential
seed: 3
window: {seconds: 1.2}
workloads:
  - name: noop
    kind: noop
    matrix: {jitter_s_sd: [0.0, 0.6]}
"""
STEADY, NOISY = "noop[jitter_s_sd=0.0]", "noop[jitter_s_sd=0.6]"


def _trials(url: str) -> list[tuple]:
    import psycopg2

    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT t.trial_id, t.variant, t.repetition, t.status, t.valid, t.reasons FROM gcbench.trials t"
            )
            return cur.fetchall()
    finally:
        conn.close()


def test_a_precision_target_runs_two_rounds_and_stops_by_the_groups_noise(gcbench_env, pg_url):
    plan = gcbench_env / "precision.yaml"
    plan.write_text(PLAN)
    env = {**os.environ, "AIRFLOW_HOME": str(gcbench_env / "airflow")}
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "run", str(plan)], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    trials = _trials(pg_url)
    assert all(t[3] == "ok" and t[4] for t in trials), trials
    per_variant = Counter(t[1] for t in trials)
    assert per_variant[STEADY] == 6  # stopped after the first round
    assert per_variant[NOISY] == 8  # the second round ran up to max
    # the second round's trials are repetitions 6 and 7, with the ids `repetitions: 8` gives
    from gcbench.plan import expand, load_plan

    fixed = load_plan(plan).model_copy(update={"repetitions": 8})
    ids = {(s.variant, s.repetition): s.trial_id for s in expand(fixed)}
    assert {(v, r): t for t, v, r, *_ in trials} == {k: t for k, t in ids.items() if k[0] == NOISY or k[1] < 6}

    report = next((gcbench_env / "reports").rglob("report.md")).read_text()
    assert f"{STEADY}: precision target ±20 %: reached (n=6)" in report
    assert f"{NOISY}: precision target ±20 %: not reached at max 8 (±" in report
