"""Collecting trial folders into a real PostgreSQL server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from gcbench.energy.base import SAMPLE_COLUMNS
from gcbench.plan import expand, plan_from_text
from gcbench.store import db, ingest, queries, runs

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
        "schema": 1,
        "trial_id": spec.trial_id,
        "plan": plan or spec.plan,
        "status": status,
        "exit_code": 0,
        "error": None if status == "ok" else "boom",
        "windows": {"main": {"start_s": 0.5, "end_s": 2.0}},
        "energy": {
            "main": {
                "window_start_s": 0.5,
                "window_end_s": 2.0,
                "duration_s": 1.5,
                "gpu_energy_j": 450.0,
                "cpu_energy_j": None,
                "cpu_reason": "no RAPL",
                "simulated": True,
                "flags": [],
                "gpu": [
                    {
                        "device": "gpu0",
                        "energy_j": 450.0,
                        "method": "simulated",
                        "source": "simulated",
                        "update_period_s": 0.1,
                    }
                ],
                "cpu": [],
                "sample_hz": 20,
            }
        },
        "metrics": {
            "duration_s": 1.5,
            "bytes": 3e9,
            "gb_per_s": 2.0,
            "gpu_energy_j": 450.0,
            "gpu_j_per_gb": 150.0,
            "cpu_energy_j": None,
            "energy_kwh": 450.0 / 3.6e6,
            "device_kind": "cpu",
        },
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
    return runs.register_run(conn, PLAN, PLAN.dag_id, "manual__1", "2026-11-01T00:00:00+00:00")


def test_a_text_metric_one_trial_left_unknown_stays_text_for_the_others(conn, run_pk, tmp_path):
    """A noop trial stores ``gpu_busy_method`` as NULL (no busy share), the copies store it
    as text: the trials frame keeps the text where it is known (before, the NULL made the
    column numeric and every method vanished, and the report's busy-share note had none)."""
    specs = expand(PLAN)[:2]
    for spec, method in zip(specs, ["simulated-trial-busy-time", None], strict=True):
        result = write_trial(tmp_path / spec.trial_id, spec)
        result["metrics"] |= {"gpu_busy_method": method, "device_kind": "cpu" if method else None}
        (tmp_path / spec.trial_id / "result.json").write_text(json.dumps(result))
        ingest.collect_trial(conn, run_pk, spec, tmp_path / spec.trial_id)
    df = queries.trials_frame(conn, run_pk).set_index("trial_id")
    assert df.loc[specs[0].trial_id, "gpu_busy_method"] == "simulated-trial-busy-time"
    assert pd.isna(df.loc[specs[1].trial_id, "gpu_busy_method"])
    assert df.loc[specs[0].trial_id, "device_kind"] == "cpu" and pd.isna(df.loc[specs[1].trial_id, "device_kind"])
    assert df["gpu_j_per_gb"].dtype == float and (df["gpu_j_per_gb"] == 150.0).all()


def test_migrations_apply_once(conn):
    assert db.migrate(conn) == []
    with conn.cursor() as cur:
        cur.execute("SELECT version FROM gcbench.schema_migrations")
        assert sorted(r[0] for r in cur.fetchall()) == [v for v, _, _ in db.migrations()]
    assert [v for v, _, _ in db.migrations()][:3] == [1, 2, 3]
    assert {1, 2, 5} <= {v for v, _, _ in db.migrations()}


def test_collect_stores_trial_samples_metrics_and_co2e(conn, run_pk, tmp_path):
    spec = expand(PLAN)[0]
    write_trial(tmp_path / spec.trial_id, spec)
    out = ingest.collect_trial(
        conn, run_pk, spec, tmp_path / spec.trial_id, carbon={"intensity_kg_per_kwh": 0.2, "band": [0.1, 0.3]}
    )
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


@pytest.mark.parametrize(
    "content,reason",
    [
        ('{"schema": 1, "trial_id": "x", "pl', "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
    ],
)
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
    assert runs.stored_trials(conn, PLAN.name, PLAN.dag_id, "backfill__x", "2026-11-01T00:00:00+00:00") == {
        spec.trial_id: "ok"
    }
    assert runs.stored_trials(conn, PLAN.name, PLAN.dag_id, "backfill__y", "2026-11-02T00:00:00+00:00") == {}


def test_deleting_a_run_deletes_its_samples(conn, run_pk, tmp_path):
    spec = expand(PLAN)[0]
    write_trial(tmp_path / spec.trial_id, spec)
    ingest.collect_trial(conn, run_pk, spec, tmp_path / spec.trial_id)
    with conn.cursor() as cur:
        cur.execute("DELETE FROM dag_runs WHERE id = %s", (run_pk,))
        cur.execute("SELECT (SELECT count(*) FROM trials), (SELECT count(*) FROM samples)")
        assert cur.fetchone() == (0, 0)
    conn.commit()


# ----------------------------------------------------------------------------- nothing lost at ingestion (C06, C07)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "store"


def test_log_with_nul_bytes_is_stored_replaced_and_a_retry_stores_it_again_c06(conn, run_pk, tmp_path):
    """C06: a CUDA crash left NUL bytes at the end of trial.log; collect used to raise on every retry."""
    spec = expand(PLAN)[0]
    outdir = tmp_path / spec.trial_id
    write_trial(outdir, spec, n_samples=30)
    (outdir / "result.json").unlink()  # the process died
    log = (FIXTURES / "trial_log_with_nul.log").read_bytes()
    n_nul = log.count(b"\x00")
    assert n_nul == 64 and log.endswith(b"\x00")
    (outdir / "trial.log").write_bytes(log)
    for attempt in range(2):
        out = ingest.collect_trial(conn, run_pk, spec, outdir, exit_code=-6)
        assert (out.action, out.status, out.samples, out.text_repaired) == ("stored", "failed", 30, 1), attempt
        assert out.notes == [f"log tail (trial.log): {n_nul} NUL characters replaced with U+FFFD"]
    with conn.cursor() as cur:
        cur.execute("SELECT log_tail, error, ingest_notes, samples_count FROM trials")
        tail, error, notes, n = cur.fetchone()
    assert "CUDA error: an illegal memory access was encountered\n" + "\ufffd" * n_nul in tail
    assert tail.startswith("--- trial.log ---\n") and "\x00" not in tail
    assert "exit status -6" in error and notes == out.notes and n == 30


def test_log_cut_inside_a_character_and_with_invalid_utf8_is_stored_readable(conn, run_pk, tmp_path):
    spec = expand(PLAN)[0]
    outdir = tmp_path / spec.trial_id
    write_trial(outdir, spec, status="failed")
    # 1,999 two-byte characters after one ASCII byte: the last 4000 bytes start mid-character
    (outdir / "trial.log").write_bytes(
        b"x" + "é".encode() * 1999 + b"\n\xff\xfe bad bytes, then \xe2\x82 a split euro\n"
    )
    out = ingest.collect_trial(conn, run_pk, spec, outdir)
    with conn.cursor() as cur:
        cur.execute("SELECT log_tail FROM trials")
        (tail,) = cur.fetchone()
    body = tail.split("\n", 1)[1]
    assert body.startswith("é") and body.count("\ufffd") == 3
    assert body.endswith("é\n\ufffd\ufffd bad bytes, then \ufffd a split euro\n")
    assert out.notes == ["log tail (trial.log): 3 invalid UTF-8 sequences replaced with U+FFFD"]


def test_unsigned_64_bit_clocks_bitmask_keeps_all_40_samples_exactly_c07(conn, run_pk, tmp_path):
    """C07: 0x8000000000000001 (bit 63 set) made COPY drop all 40 samples, power and energy with them."""
    spec = expand(PLAN)[0]
    outdir = tmp_path / spec.trial_id
    write_trial(outdir, spec)
    (outdir / "samples.csv").write_bytes((FIXTURES / "samples_clocks_reasons_bit63.csv").read_bytes())
    out = ingest.collect_trial(conn, run_pk, spec, outdir)
    assert (out.status, out.samples, out.samples_dropped, out.fields_nulled, out.notes) == ("ok", 40, 0, 0, [])
    with conn.cursor() as cur:
        cur.execute(
            "SELECT count(*), count(power_w), count(energy_j), min(clocks_event_reasons::text), "
            "max(clocks_event_reasons::text) FROM samples"
        )
        assert cur.fetchone() == (40, 40, 40, "9223372036854775809", "9223372036854775809")
    conn.commit()
    samples = queries.samples_frame(conn, run_pk, spec.trial_id)
    assert str(samples["clocks_event_reasons"].dtype) == "UInt64"
    assert int(samples["clocks_event_reasons"].iloc[0]) == 0x8000000000000001
    assert samples["power_w"].tolist() == [300.0] * 40


def test_the_bitmask_is_read_back_exactly_and_validation_still_names_throttle_bits(conn, run_pk, tmp_path):
    from gcbench.plan.schema import ValidationSettings
    from gcbench.validate import validate_run

    spec = expand(PLAN)[0]
    outdir = tmp_path / spec.trial_id
    write_trial(outdir, spec)
    text = (FIXTURES / "samples_clocks_reasons_bit63.csv").read_text()
    lines = text.splitlines(keepends=True)
    # bit 63 | power cap (0x4) in one row, the top value 2^64 - 1 in another, unknown in a third
    lines[20] = lines[20].replace("9223372036854775809", str((1 << 63) | 0x4))
    lines[21] = lines[21].replace("9223372036854775809", str((1 << 64) - 1))
    lines[22] = lines[22].replace("9223372036854775809", "")
    (outdir / "samples.csv").write_text("".join(lines))
    assert ingest.collect_trial(conn, run_pk, spec, outdir).samples == 40
    samples = queries.samples_frame(conn, run_pk, spec.trial_id)
    reasons = samples["clocks_event_reasons"]
    assert int(reasons.iloc[19]) == (1 << 63) | 0x4 and int(reasons.iloc[20]) == (1 << 64) - 1
    assert reasons.isna().sum() == 1
    validate_run(conn, run_pk, ValidationSettings())
    with conn.cursor() as cur:
        cur.execute("SELECT flags FROM trials")
        (flags,) = cur.fetchone()
    conn.commit()
    assert any("throttled during the window" in f and "power cap (SW)" in f and "thermal (HW)" in f for f in flags)


def test_a_withheld_window_keeps_its_stored_figures_but_they_leave_the_trials_frame(conn, run_pk, tmp_path):
    """Validation withholds the sensor figures of a named window too short for the
    sensor (``eval``: 0.4 s here); the trial stays valid, its main figures and the
    window's duration are read, its GPU energy and J/sample are NaN, and the store keeps
    them. Collecting the trial again clears what the last validation withheld."""
    from gcbench.plan.schema import ValidationSettings
    from gcbench.validate import validate_run

    spec = expand(PLAN)[0]
    outdir = tmp_path / spec.trial_id
    result = write_trial(outdir, spec)
    result["windows"]["eval"] = {"start_s": 2.0, "end_s": 2.4}
    result["energy"]["eval"] = {"gpu_energy_j": 12.0, "gpu": [{"device": "gpu0", "energy_j": 12.0}]}
    result["metrics"] |= {"eval_duration_s": 0.4, "eval_gpu_energy_j": 12.0, "eval_gpu_j_per_gb": 6.0}
    (outdir / "result.json").write_text(json.dumps(result))
    ingest.collect_trial(conn, run_pk, spec, outdir)
    summary = validate_run(conn, run_pk, ValidationSettings())
    assert summary["valid"] == 1
    row = queries.trials_frame(conn, run_pk).iloc[0]
    assert bool(row.valid) and row.gpu_energy_j == 450.0 and row.eval_duration_s == 0.4
    assert pd.isna(row.eval_gpu_energy_j) and pd.isna(row.eval_gpu_j_per_gb)
    assert list(row.windows_withheld) == ["eval"] and row.windows_withheld["eval"].startswith(
        "window eval too short for the sensor: 0.400 s"
    )
    assert any(f.endswith("its energy figures are left out, the main window stands") for f in row["flags"])
    with conn.cursor() as cur:
        cur.execute("SELECT value FROM metrics WHERE name = 'eval_gpu_energy_j'")
        assert cur.fetchone()[0] == 12.0  # still stored
    conn.commit()
    result["windows"]["eval"]["end_s"] = 3.6  # a retry's longer pass replaces the row
    (outdir / "result.json").write_text(json.dumps(result))
    assert ingest.collect_trial(conn, run_pk, spec, outdir).action != "unchanged"
    row = queries.trials_frame(conn, run_pk).iloc[0]
    assert row.windows_withheld == {} and row.eval_gpu_energy_j == 12.0


def test_a_trial_with_every_kind_of_bad_value_keeps_its_energy_and_says_what_changed(conn, run_pk, tmp_path):
    spec = expand(PLAN)[0]
    outdir = tmp_path / spec.trial_id
    result = write_trial(
        outdir,
        spec,
        n_samples=10,
        extra_lines=(
            "0.600,gpu0,nvml,abc,301.5,1180.0,40,1980,0\n"  # power not a number
            "0.650,gpu\x00,nvml,300.0,301.5,1195.0,40,1980,99999999999999999999\n"
        ),
    )  # NUL label, 20-digit mask
    result["metrics"]["note"] = "line\x00two"
    result["metrics"]["labels"] = {"k\x00": ["v\ud800", 1e400]}
    result["metrics"]["neg_zero_j"] = -0.0
    (outdir / "result.json").write_text(json.dumps(result))
    out = ingest.collect_trial(conn, run_pk, spec, outdir)
    assert (out.status, out.samples, out.samples_dropped) == ("ok", 12, 0)
    assert out.fields_nulled == 3 and out.text_repaired == 4
    with conn.cursor() as cur:
        cur.execute(
            "SELECT name, value, text_value FROM metrics WHERE name IN ('note', 'labels', 'neg_zero_j', "
            "'gpu_energy_j') ORDER BY name"
        )
        assert cur.fetchall() == [
            ("gpu_energy_j", 450.0, None),
            ("labels", None, '{"k\ufffd": ["v\ufffd", null]}'),
            ("neg_zero_j", 0.0, None),
            ("note", None, "line\ufffdtwo"),
        ]
        cur.execute("SELECT device, power_w, energy_j, clocks_event_reasons FROM samples WHERE t_s >= 0.6 ORDER BY t_s")
        assert cur.fetchall() == [("gpu0", None, 1180.0, 0), ("gpu\ufffd", 300.0, 1195.0, None)]
        cur.execute("SELECT ingest_notes, samples_dropped FROM trials")
        notes, dropped = cur.fetchone()
    conn.commit()
    assert dropped == 0 and notes == out.notes
    assert any(n.startswith("samples.csv: power_w stored as NULL in 1 row(s)") for n in notes)
    assert any(n.startswith("samples.csv: clocks_event_reasons stored as NULL in 1 row(s)") for n in notes)
    assert "result.json metrics.note: 1 NUL character replaced with U+FFFD" in notes
    df = queries.trials_frame(conn, run_pk)
    assert df["ingest_notes"].iloc[0] == notes and df["samples_dropped"].iloc[0] == 0


def test_a_plan_with_a_nul_in_a_setting_is_registered_with_it_replaced(conn, tmp_path):
    """The plan loader refuses NUL (file, line, field); a plan built another way (the
    Python API) and run parameters with NUL are still stored, NUL replaced."""
    from datetime import datetime

    from gcbench.errors import PlanError
    from gcbench.plan.schema import Plan

    with pytest.raises(PlanError, match=r"<string>:3: workloads\[0\]\.settings\.note: text holding a NUL"):
        plan_from_text('name: nul\nworkloads:\n  - {name: w, kind: noop, settings: {note: "a\\0b"}}\n')
    plan = Plan.model_validate(
        {"name": "nul", "workloads": [{"name": "w", "kind": "noop", "settings": {"note": "a\x00b"}}]}
    )
    assert plan.workloads[0].settings["note"] == "a\x00b"
    pk = runs.register_run(
        conn, plan, plan.dag_id, "manual__nul", None, {"note": "c\x00d", "when": datetime(2026, 1, 1)}
    )
    spec = expand(plan)[0]
    write_trial(tmp_path / spec.trial_id, spec)
    assert ingest.collect_trial(conn, pk, spec, tmp_path / spec.trial_id).status == "ok"
    with conn.cursor() as cur:
        cur.execute(
            "SELECT p.plan->'workloads'->0->'settings'->>'note', r.params, t.spec->'settings'->>'note' "
            "FROM plans p JOIN dag_runs r USING (plan_name) JOIN trials t ON t.dag_run_id = r.id"
        )
        assert cur.fetchone() == ("a\ufffdb", {"note": "c\ufffdd", "when": "2026-01-01 00:00:00"}, "a\ufffdb")
    conn.commit()


def test_collect_twice_is_unchanged_when_numbers_read_back_differently_from_jsonb(conn, run_pk, tmp_path):
    """jsonb keeps numbers as numeric: 1.0605852582168403e+17 reads back as 106058525821684030,
    which Python does not find equal to the float; the comparison is the server's."""
    spec = expand(PLAN)[0]
    result = write_trial(tmp_path / spec.trial_id, spec)
    result["notes"] = [1.0605852582168403e17, 5e-324, -0.0, 2**70]
    (tmp_path / spec.trial_id / "result.json").write_text(json.dumps(result))
    assert ingest.collect_trial(conn, run_pk, spec, tmp_path / spec.trial_id).action == "stored"
    assert ingest.collect_trial(conn, run_pk, spec, tmp_path / spec.trial_id).action == "unchanged"


def _run_state(conn, pk):
    with conn.cursor() as cur:
        cur.execute("SELECT notes, interrupted_at FROM gcbench.dag_runs WHERE id = %s", (pk,))
        row = cur.fetchone()
    conn.commit()
    return row


def test_a_resumed_run_keeps_its_interruption_as_history(conn, run_pk):
    """After Ctrl-C and a resume the run's state follows the last attempt (not interrupted),
    and its report still says it was interrupted, when, and when it resumed."""
    note = "Interrupted by SIGINT (Ctrl-C) after 13 of 21 trials; running it again does the 8 missing ones."
    assert runs.add_run_note(conn, run_pk, note, interrupted=True)
    with conn.cursor() as cur:
        cur.execute("UPDATE gcbench.dag_runs SET interrupted_at = '2026-12-01 05:34:40+00' WHERE id = %s", (run_pk,))
    conn.commit()
    runs.reset_run_outcome(conn, run_pk)  # the resumed attempt starts
    notes, interrupted_at = _run_state(conn, run_pk)
    assert interrupted_at is None and len(notes) == 1
    assert re.fullmatch(
        r"Interrupted by SIGINT \(Ctrl-C\) after 13 of 21 trials at 2026-12-01 05:34:40 UTC; "
        r"resumed at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\.",
        notes[0],
    ), notes
    first = notes[0]
    # interrupted again and resumed again: both stay, in order; a later attempt's reset keeps them
    again = "Interrupted by SIGTERM after 20 of 21 trials; running it again does the 1 missing one."
    assert runs.add_run_note(conn, run_pk, again, interrupted=True)
    runs.reset_run_outcome(conn, run_pk)
    runs.reset_run_outcome(conn, run_pk)
    notes, interrupted_at = _run_state(conn, run_pk)
    assert interrupted_at is None and notes[0] == first
    assert notes[1].startswith("Interrupted by SIGTERM after 20 of 21 trials at ") and "; resumed at " in notes[1]
    assert len(notes) == 2


def test_a_rerun_drops_the_last_attempts_outcome_notes(conn, run_pk):
    runs.add_run_note(conn, run_pk, "Nothing to run: all 4 trials of this run were already stored.")
    runs.reset_run_outcome(conn, run_pk)
    assert _run_state(conn, run_pk) == ([], None)


def test_the_report_reads_what_each_trial_said_was_not_in_effect(conn, run_pk, tmp_path):
    specs = {s.settings["memory"]: s for s in expand(PLAN)}
    pinned, pageable = specs["pinned"], specs["pageable"]
    reason = "no CUDA device: pinned memory unavailable, host-to-host copy of pageable memory"
    for spec, extra in ((pinned, {"settings_not_in_effect": {"memory": reason}}), (pageable, {})):
        result = write_trial(tmp_path / spec.trial_id, spec)
        result.update(extra)
        (tmp_path / spec.trial_id / "result.json").write_text(json.dumps(result))
        ingest.collect_trial(conn, run_pk, spec, tmp_path / spec.trial_id)
    df = queries.trials_frame(conn, run_pk).set_index("trial_id")
    assert df.loc[pinned.trial_id, "settings_not_in_effect"] == {"memory": reason}
    assert df.loc[pageable.trial_id, "settings_not_in_effect"] is None  # not recorded (a trial of before)
    assert df.loc[pinned.trial_id, "settings"]["memory"] == "pinned"
