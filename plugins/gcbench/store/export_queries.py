"""What exporters read of one stored DAG run (``gcbench.export``): the run, its report
paths, and per trial its spec, status, validity, reasons, stored result.json and numeric
metrics."""

from __future__ import annotations

from typing import Any

from gcbench.errors import StoreError


def run_for_export(conn, dag_id: str, run_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(run, trials)`` of a stored DAG run.

    ``run``: ``created_at``, ``logical_date``, ``html_path``, ``md_path`` (None without a report).
    ``trials``: one dict per trial (stored order): ``trial_id``, ``variant``, ``repetition``,
    ``spec``, ``status``, ``valid``, ``reasons`` (list), ``simulated``, ``started_at``,
    ``finished_at``, ``result`` (dict or None), ``windows_withheld`` (``{window key:
    reason}``: named windows whose energy figures validation left out of the statistics;
    their metrics are still here, as stored), ``metrics`` ({name: value} of the known
    numeric ones, units in the names).

    Raises:
        StoreError: no such run.
    """
    with conn.cursor() as cur:
        cur.execute(
            "SELECT r.id, r.created_at, r.logical_date, rep.html_path, rep.md_path FROM dag_runs r "
            "LEFT JOIN reports rep ON rep.dag_run_id = r.id WHERE r.dag_id = %s AND r.run_id = %s",
            (dag_id, run_id),
        )
        row = cur.fetchone()
        if row is None:
            conn.commit()
            raise StoreError(f"no stored run {run_id!r} of {dag_id}")
        pk, created, logical, html, md = row
        cur.execute(
            "SELECT id, trial_id, variant, repetition, spec, status, valid, reasons, simulated, started_at, "
            "finished_at, result, windows_withheld FROM trials WHERE dag_run_id = %s ORDER BY id",
            (pk,),
        )
        trials = [
            dict(
                zip(
                    (
                        "pk",
                        "trial_id",
                        "variant",
                        "repetition",
                        "spec",
                        "status",
                        "valid",
                        "reasons",
                        "simulated",
                        "started_at",
                        "finished_at",
                        "result",
                        "windows_withheld",
                    ),
                    r,
                    strict=True,
                ),
                metrics={},
            )
            for r in cur.fetchall()
        ]
        cur.execute(
            "SELECT m.trial_pk, m.name, m.value FROM metrics m JOIN trials t ON t.id = m.trial_pk "
            "WHERE t.dag_run_id = %s AND m.value IS NOT NULL",
            (pk,),
        )
        by_pk = {t["pk"]: t for t in trials}
        for trial_pk, name, value in cur.fetchall():
            by_pk[trial_pk]["metrics"][name] = float(value)
    conn.commit()
    run = {"created_at": created, "logical_date": logical, "html_path": html, "md_path": md}
    return run, trials
