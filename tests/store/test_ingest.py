"""Collecting trial folders into a real PostgreSQL server."""

from __future__ import annotations

import json

import pytest

from gcbench.energy.base import SAMPLE_COLUMNS
from gcbench.plan import expand, plan_from_text
from gcbench.store import db, ingest, queries

pytestmark = pytest.mark.integration

PLAN = plan_from_text("""\
name: store
workloads:
  - {name: copy, kind: h2d, matrix: {memory: [pinned, pageable]}}
""")


def write_trial(outdir, spec, status="ok", n_samples=50, plan=None, extra_lines=""):
    outdir.mkdir(parents=True, exist_ok=True)
    rows = [",".join(SAMPLE_COLUMNS)]
    for i in range(n_samples):
        t = i * 0.05
        rows.append(f"{t:.3f},gpu0,simulated,300.0,301.5,{1000 + 300 * t:.3f},40,1980,0")
    (outdir / "samples.csv").write_text("\n".join(rows) + "\n" + extra_lines)
    result = {
        "schema": 1, "trial_id": spec.trial_id, "plan": plan or spec.plan, "status": status, "exit_code": 0,
        "error": None if status == "ok" else "boom",
        "windows": {"main": {"start_s": 0.5, "end_s": 2.0}},
        "energy": {"main": {"window_start_s": 0.5, "window_end_s": 2.0, "duration_s": 1.5, "gpu_energy_j": 450.0,
                            "cpu_energy_j": None, "cpu_reason": "no RAPL", "simulated": True, "flags": [],
                            "gpu": [{"device": "gpu0", "energy_j": 450.0, "method": "simulated", "source": "simulated",
                                     "update_period_s": 0.1}], "cpu": [], "sample_hz": 20}},
        "metrics": {"duration_s": 1.5, "bytes": 3e9, "gb_per_s": 2.0, "gpu_energy_j": 450.0, "gpu_j_per_gb": 150.0,
                    "cpu_energy_j": None, "energy_kwh": 450.0 / 3.6e6, "device_kind": "cpu"},
        "measurement": {"backend": "simulated"},
    }
    (outdir / "result.json").write_text(json.dumps(result))
    return result


@pytest.fixture
def conn(pg_url):
    with db.connection(pg_url) as c:
        yield c


@pytest.fixture
def run_pk(conn):
    return ingest.register_run(conn, PLAN, PLAN.dag_id, "manual__1", "2026-11-01T00:00:00+00:00")


def test_migrations_apply_once(conn):
    assert db.migrate(conn) == []
    with conn.cursor() as cur:
        cur.execute("SELECT version FROM gcbench.schema_migrations")
        assert sorted(r[0] for r in cur.fetchall()) == [v for v, _, _ in db.migrations()]
    assert {1, 2, 5} <= {v for v, _, _ in db.migrations()}


def test_collect_stores_trial_samples_metrics_and_co2e(conn, run_pk, tmp_path):
    spec = expand(PLAN)[0]
    write_trial(tmp_path / spec.trial_id, spec)
    out = ingest.collect_trial(conn, run_pk, spec, tmp_path / spec.trial_id, carbon={"intensity_kg_per_kwh": 0.2, "band": [0.1, 0.3]})
    assert (out.action, out.status, out.samples, out.samples_dropped) == ("stored", "ok", 50, 0)
    df = queries.trials_frame(conn, run_pk)
    row = df.iloc[0]
    assert row.status == "ok" and bool(row.simulated) and row.gpu_method == "simulated"
    assert row.gb_per_s == 2.0 and row.gpu_j_per_gb == 150.0
    assert row.co2e_kg == pytest.approx(450.0 / 3.6e6 * 0.2)
    assert row.co2e_kg_high == pytest.approx(450.0 / 3.6e6 * 0.3)
    assert row.cpu_energy_j != row.cpu_energy_j  # NaN: unknown, never 0
    samples = queries.samples_frame(conn, run_pk, spec.trial_id)
    assert len(samples) == 50 and samples["energy_j"].iloc[-1] == pytest.approx(1000 + 300 * 2.45)
    with conn.cursor() as cur:
        cur.execute("SELECT unit FROM metrics WHERE name = 'gpu_j_per_gb'")
        assert cur.fetchone()[0] == "J/GB"


def test_collect_twice_stores_once(conn, run_pk, tmp_path):
    spec = expand(PLAN)[0]
    write_trial(tmp_path / spec.trial_id, spec)
    assert ingest.collect_trial(conn, run_pk, spec, tmp_path / spec.trial_id).action == "stored"
    assert ingest.collect_trial(conn, run_pk, spec, tmp_path / spec.trial_id).action == "unchanged"
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM samples")
        assert cur.fetchone()[0] == 50
        cur.execute("SELECT count(*) FROM trials")
        assert cur.fetchone()[0] == 1


def test_killed_trial_is_failed_with_log_tail_and_partial_samples(conn, run_pk, tmp_path):
    spec = expand(PLAN)[0]
    outdir = tmp_path / spec.trial_id
    write_trial(outdir, spec, extra_lines="2.600,gpu0,simu")  # the kill cut the last row short
    (outdir / "result.json").unlink()
    (outdir / "trial.log").write_text("window main begins\n" * 10 + "the last words\n")
    out = ingest.collect_trial(conn, run_pk, spec, outdir, exit_code=-9)
    assert (out.action, out.status, out.samples, out.samples_dropped, out.partial) == ("stored", "failed", 50, 1, True)
    with conn.cursor() as cur:
        cur.execute("SELECT error, log_tail, samples_partial, (SELECT count(*) FROM metrics) FROM trials")
        error, tail, partial, n_metrics = cur.fetchone()
    assert "exit status -9" in error and tail.rstrip().endswith("the last words") and partial and n_metrics == 0


def test_retry_after_failure_replaces_the_failed_row(conn, run_pk, tmp_path):
    spec = expand(PLAN)[0]
    outdir = tmp_path / spec.trial_id
    write_trial(outdir, spec, status="failed", n_samples=5)
    assert ingest.collect_trial(conn, run_pk, spec, outdir).status == "failed"
    write_trial(outdir, spec, status="ok", n_samples=7)
    assert ingest.collect_trial(conn, run_pk, spec, outdir).status == "ok"
    with conn.cursor() as cur:
        cur.execute("SELECT count(*), min(status) FROM trials")
        assert cur.fetchone() == (1, "ok")
        cur.execute("SELECT count(*) FROM samples")
        assert cur.fetchone()[0] == 7


@pytest.mark.parametrize("content,reason", [
    ('{"schema": 1, "trial_id": "x", "pl', "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
])
def test_unreadable_result_is_refused_with_reason(conn, run_pk, tmp_path, content, reason):
    spec = expand(PLAN)[0]
    outdir = tmp_path / spec.trial_id
    write_trial(outdir, spec)
    (outdir / "result.json").write_text(content)
    out = ingest.collect_trial(conn, run_pk, spec, outdir)
    assert out.status == "failed" and reason in out.reason


def test_result_of_another_plan_is_refused(conn, run_pk, tmp_path):
    spec = expand(PLAN)[0]
    outdir = tmp_path / spec.trial_id
    write_trial(outdir, spec, plan="other-plan")
    out = ingest.collect_trial(conn, run_pk, spec, outdir)
    assert out.status == "failed" and "belongs to plan 'other-plan'" in out.reason


def test_truncated_result_is_refused(conn, run_pk, tmp_path):
    spec = expand(PLAN)[0]
    outdir = tmp_path / spec.trial_id
    result = write_trial(outdir, spec)
    del result["metrics"]
    (outdir / "result.json").write_text(json.dumps(result))
    out = ingest.collect_trial(conn, run_pk, spec, outdir)
    assert out.status == "failed" and "missing metrics" in out.reason


def test_stored_trials_found_by_logical_date(conn, run_pk, tmp_path):
    spec = expand(PLAN)[0]
    write_trial(tmp_path / spec.trial_id, spec)
    ingest.collect_trial(conn, run_pk, spec, tmp_path / spec.trial_id)
    # a backfill run of the same logical date sees the trial; another date does not
    assert ingest.stored_trials(conn, PLAN.name, PLAN.dag_id, "backfill__x", "2026-11-01T00:00:00+00:00") == {spec.trial_id: "ok"}
    assert ingest.stored_trials(conn, PLAN.name, PLAN.dag_id, "backfill__y", "2026-11-02T00:00:00+00:00") == {}


def test_deleting_a_run_deletes_its_samples(conn, run_pk, tmp_path):
    spec = expand(PLAN)[0]
    write_trial(tmp_path / spec.trial_id, spec)
    ingest.collect_trial(conn, run_pk, spec, tmp_path / spec.trial_id)
    with conn.cursor() as cur:
        cur.execute("DELETE FROM dag_runs WHERE id = %s", (run_pk,))
        cur.execute("SELECT (SELECT count(*) FROM trials), (SELECT count(*) FROM samples)")
        assert cur.fetchone() == (0, 0)
    conn.commit()
