"""Building a run's report from the results database (the ``report`` task's body)."""

from __future__ import annotations

from pathlib import Path

from gcbench.errors import StoreError


def report_data(conn, plan, dag_run_pk: int, run_id: str, logical_date: str | None):
    """A :class:`gcbench.report.data.ReportData` for one stored DAG run."""
    from gcbench.report.data import ReportData
    from gcbench.store import queries

    trials = queries.trials_frame(conn, dag_run_pk)
    notes, _ = queries.run_outcome(conn, dag_run_pk)
    history = None
    if plan.schedule:
        history = queries.history_frame(conn, plan.dag_id, limit_runs=30)
    return ReportData(
        plan_name=plan.name,
        run_id=run_id,
        logical_date=logical_date,
        plan=plan.model_dump(mode="json"),
        trials=trials,
        samples=lambda trial_id: queries.samples_frame(conn, dag_run_pk, trial_id),
        windows=lambda trial_id: queries.windows_of(conn, dag_run_pk, trial_id),
        history=history,
        notes=notes,
    )


def report_run(plan, run_id: str, *, paper: bool = False) -> Path:
    """Write the report of DAG run ``run_id`` under ``reports/<plan>/<run key>/``; with
    ``paper``, also the study's headline tables ``paper.md`` and ``paper.tex`` beside it.

    Returns:
        The path of the HTML report.

    Raises:
        StoreError: the run is not stored.
    """
    from gcbench import config
    from gcbench.report import write_report
    from gcbench.store import db, queries

    with db.connection() as conn:
        pk = queries.dag_run_pk(conn, plan.dag_id, run_id)
        if pk is None:
            raise StoreError(f"no stored run {run_id!r} of {plan.dag_id}")
        data = report_data(conn, plan, pk, run_id, queries.run_logical_date(conn, pk))
        out_dir = config.reports_dir() / plan.name / config.run_key(run_id)
        paths = write_report(data, out_dir, paper=paper)
        queries.record_report(conn, pk, str(paths.html), str(paths.markdown))
    return Path(paths.html)
