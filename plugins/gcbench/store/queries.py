"""Reading stored runs back as pandas DataFrames (validation, report, regression check)."""

from __future__ import annotations

import json
from typing import Any

from gcbench import metrics

METRIC_COLUMNS = metrics.METRIC_COLUMNS + metrics.CO2E_BAND_COLUMNS
"""Metric columns every trials frame has (NaN when a trial lacks one)."""


def dag_run_pk(conn, dag_id: str, run_id: str) -> int | None:
    """``dag_runs.id`` of a run, or None."""
    with conn.cursor() as cur:
        cur.execute("SELECT id FROM dag_runs WHERE dag_id = %s AND run_id = %s", (dag_id, run_id))
        row = cur.fetchone()
    conn.commit()
    return row[0] if row else None


def run_outcome(conn, dag_run_pk: int) -> tuple[list[str], Any]:
    """``(notes, interrupted_at)`` of a stored run (see migration 0005)."""
    with conn.cursor() as cur:
        cur.execute("SELECT notes, interrupted_at FROM dag_runs WHERE id = %s", (dag_run_pk,))
        row = cur.fetchone()
    conn.commit()
    if row is None:
        return [], None
    notes = row[0] if isinstance(row[0], list) else json.loads(row[0] or "[]")
    return [str(n) for n in notes], row[1]


def run_logical_date(conn, dag_run_pk: int) -> str | None:
    """The logical date of stored DAG run ``dag_run_pk`` as ISO 8601 text, or None when the
    run has none (a ``gcbench run`` without one). Commits the read."""
    with conn.cursor() as cur:
        cur.execute("SELECT logical_date FROM dag_runs WHERE id = %s", (dag_run_pk,))
        logical = cur.fetchone()[0]
    conn.commit()
    return logical.isoformat() if logical else None


def record_report(conn, dag_run_pk: int, html_path: str, md_path: str) -> None:
    """Record (or replace) where the report of DAG run ``dag_run_pk`` was written; commits."""
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO reports (dag_run_id, html_path, md_path) VALUES (%s, %s, %s) "
            "ON CONFLICT (dag_run_id) DO UPDATE SET html_path = EXCLUDED.html_path, md_path = EXCLUDED.md_path, "
            "created_at = now()",
            (dag_run_pk, html_path, md_path),
        )
    conn.commit()


def trials_frame(conn, dag_run_pk: int):
    """One row per trial of a DAG run, with metrics as columns (NaN = unknown).

    Columns: trial_pk, trial_id, variant, workload, kind, repetition, status, error,
    valid, reasons, flags, factors, gpu_method, cpu_method, simulated, samples_count,
    samples_partial, samples_dropped, ingest_notes (list of what collect changed to
    store the trial), settings (the requested workload settings), settings_not_in_effect
    (``{setting: reason}`` from result.json; None where the trial did not record it),
    windows_withheld (``{window key: reason}``: that window's sensor figures,
    :data:`gcbench.metrics.WINDOW_SENSOR_FIGURES`, are NaN here though stored),
    preprocessor (the spec's declared preprocessor version, or None), preprocessor_build
    (result.json's build record of it, or None),
    window_start_s, window_end_s, idle_power_w, the metrics of
    :data:`METRIC_COLUMNS` and any other stored metric; text metrics are columns too.
    """
    import pandas as pd

    with conn.cursor() as cur:
        cur.execute(
            "SELECT id, trial_id, variant, workload, kind, repetition, status, error, valid, reasons, flags, "
            "spec->'factors', gpu_method, cpu_method, simulated, samples_count, samples_partial, "
            "result->'windows', result->'energy'->'main'->'gpu', samples_dropped, ingest_notes, "
            "spec->'settings', result->'settings_not_in_effect', spec->'preprocessor', result->'preprocessor', "
            "windows_withheld FROM trials WHERE dag_run_id = %s ORDER BY (spec->>'order')::int, trial_id",
            (dag_run_pk,),
        )
        rows = cur.fetchall()
        cur.execute(
            "SELECT m.trial_pk, m.name, m.value, m.text_value FROM metrics m JOIN trials t ON t.id = m.trial_pk "
            "WHERE t.dag_run_id = %s",
            (dag_run_pk,),
        )
        metric_rows = cur.fetchall()
    conn.commit()
    cols = [
        "trial_pk",
        "trial_id",
        "variant",
        "workload",
        "kind",
        "repetition",
        "status",
        "error",
        "valid",
        "reasons",
        "flags",
        "factors",
        "gpu_method",
        "cpu_method",
        "simulated",
        "samples_count",
        "samples_partial",
        "windows",
        "gpu_devices",
        "samples_dropped",
        "ingest_notes",
        "settings",
        "settings_not_in_effect",
        "preprocessor",
        "preprocessor_build",
        "windows_withheld",
    ]
    df = pd.DataFrame(rows, columns=cols)
    df["windows_withheld"] = [w if isinstance(w, dict) else {} for w in df["windows_withheld"]]
    df["window_start_s"] = [((w or {}).get("main") or {}).get("start_s") for w in df["windows"]]
    df["window_end_s"] = [((w or {}).get("main") or {}).get("end_s") for w in df["windows"]]
    df["idle_power_w"] = [
        sum(d.get("idle_power_w") or 0 for d in g) if g and all(d.get("idle_power_w") is not None for d in g) else None
        for g in df["gpu_devices"]
    ]
    df["gpu_source"] = [
        ",".join(sorted({str(d.get("source") or "?") for d in g})) if g else None for g in df["gpu_devices"]
    ]
    df = df.drop(columns=["gpu_devices"])
    for col in ("reasons", "flags", "ingest_notes"):
        df[col] = [list(v) if isinstance(v, list) else json.loads(v) if isinstance(v, str) else [] for v in df[col]]
    df["factors"] = [f if isinstance(f, dict) else {} for f in df["factors"]]
    df["settings"] = [f if isinstance(f, dict) else {} for f in df["settings"]]
    # None (not {}) for a trial stored before workloads recorded it: the report then
    # falls back on the <setting>_effective values the trial reported
    df["settings_not_in_effect"] = [f if isinstance(f, dict) else None for f in df["settings_not_in_effect"]]
    numeric: dict[str, dict[int, Any]] = {}
    text: dict[str, dict[int, Any]] = {}
    withheld = {
        pk: metrics.withheld_metrics(w) for pk, w in zip(df["trial_pk"], df["windows_withheld"], strict=True) if w
    }
    for pk, name, value, text_value in metric_rows:
        if name in withheld.get(pk, ()):
            numeric.setdefault(name, {})  # the column stays, NaN: validation left it out (still stored)
            continue
        if text_value is not None:
            text.setdefault(name, {})[pk] = text_value
        else:
            numeric.setdefault(name, {})[pk] = value
    for name in METRIC_COLUMNS:
        numeric.setdefault(name, {})
    for name, values in numeric.items():
        # a metric some trial stored as text is a text column; the other trials' NULLs are unknown
        if name not in text or name in METRIC_COLUMNS:
            df[name] = pd.to_numeric(df["trial_pk"].map(values), errors="coerce").astype(float)
    for name, values in text.items():
        if name not in df.columns:
            df[name] = df["trial_pk"].map(values)
    return df


def samples_frame(conn, dag_run_pk: int, trial_id: str):
    """Samples of one trial of a run, ordered by time (columns of SAMPLE_COLUMNS).

    ``clocks_event_reasons`` is the unsigned 64-bit NVML bitmask, exact, as pandas'
    nullable ``UInt64`` (<NA> when unknown); the other numbers are float.
    """
    import pandas as pd

    from gcbench.energy.base import SAMPLE_COLUMNS

    with conn.cursor() as cur:
        cur.execute(
            f"SELECT {', '.join('s.' + c for c in SAMPLE_COLUMNS)} FROM samples s JOIN trials t ON t.id = s.trial_pk "
            "WHERE t.dag_run_id = %s AND t.trial_id = %s ORDER BY s.t_s",
            (dag_run_pk, trial_id),
        )
        rows = cur.fetchall()
    conn.commit()
    df = pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS))
    df["clocks_event_reasons"] = pd.array(
        [None if v is None else int(v) for v in df["clocks_event_reasons"]], dtype="UInt64"
    )
    return df


def progress_frame(conn, dag_run_pk: int, trial_id: str):
    """Progress points of one trial of a run: columns window_key, t_s, steps (ordered)."""
    import pandas as pd

    with conn.cursor() as cur:
        cur.execute(
            "SELECT p.window_key, p.t_s, p.steps FROM progress p JOIN trials t ON t.id = p.trial_pk "
            "WHERE t.dag_run_id = %s AND t.trial_id = %s ORDER BY p.window_key, p.steps",
            (dag_run_pk, trial_id),
        )
        rows = cur.fetchall()
    conn.commit()
    return pd.DataFrame(rows, columns=["window_key", "t_s", "steps"])


def windows_of(conn, dag_run_pk: int, trial_id: str) -> dict:
    """``{window key: {start_s, end_s}}`` of one trial."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT result->'windows' FROM trials WHERE dag_run_id = %s AND trial_id = %s", (dag_run_pk, trial_id)
        )
        row = cur.fetchone()
    conn.commit()
    return (row[0] if row else None) or {}


def set_validity(
    conn, trial_pk: int, valid: bool, reasons: list[str], flags: list[str], withheld: dict[str, str] | None = None
) -> None:
    """Store a trial's validity, reasons, flags and the named windows whose energy figures
    validation withheld (``{window key: reason}``, :class:`gcbench.validate.Verdict`); no commit."""
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE trials SET valid = %s, reasons = %s::jsonb, flags = %s::jsonb, windows_withheld = %s::jsonb "
            "WHERE id = %s",
            (valid, json.dumps(reasons), json.dumps(flags), json.dumps(withheld or {}), trial_pk),
        )


def history_frame(conn, dag_id: str, limit_runs: int = 30):
    """Per-run medians of valid trials' judged metric (each trial's first stored candidate
    of its kind, :data:`gcbench.metrics.JUDGED_METRIC_JOIN`, as the regression check
    judges it) for the last ``limit_runs`` runs of a DAG.

    Columns: run_id, logical_date, variant, metric, value (median), n (valid trials).
    """
    import pandas as pd

    from gcbench.metrics import JUDGED_METRIC_JOIN, primary_metrics

    with conn.cursor() as cur:
        cur.execute(
            "WITH runs AS (SELECT id, run_id, logical_date FROM dag_runs WHERE dag_id = %s "
            "  ORDER BY coalesce(logical_date, created_at) DESC, id DESC LIMIT %s) "
            "SELECT r.run_id, r.logical_date, t.variant, m.name, "
            "  percentile_cont(0.5) WITHIN GROUP (ORDER BY m.value), count(*) "
            f"FROM runs r JOIN trials t ON t.dag_run_id = r.id {JUDGED_METRIC_JOIN} "
            "WHERE t.valid IS TRUE AND t.status = 'ok' "
            "GROUP BY r.run_id, r.logical_date, t.variant, m.name ORDER BY r.logical_date",
            (dag_id, limit_runs, json.dumps(primary_metrics())),
        )
        rows = cur.fetchall()
    conn.commit()
    return pd.DataFrame(rows, columns=["run_id", "logical_date", "variant", "metric", "value", "n"])
