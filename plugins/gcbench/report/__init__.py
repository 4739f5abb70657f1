"""GC-Bench reports: HTML, Markdown, CSV and PNG from a run's trials. The numbers are in
:mod:`gcbench.report.analysis`, their rendering in :mod:`gcbench.report.render`, the
formatting helpers both use in :mod:`gcbench.report.fmt` and :mod:`gcbench.report.scale`;
the web app that lists reports is :mod:`gcbench.web`.

    from gcbench.report import ReportData, write_report
    paths = write_report(data, Path("reports") / plan / run_id)

This package's ``__init__`` imports nothing heavy: the Airflow plugin
(:mod:`gcbench.web.airflow_plugin`) is imported by every Airflow component, so
pandas, SciPy and matplotlib are loaded only when a report is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gcbench.report.data import ReportData, ReportPaths

if TYPE_CHECKING:
    from gcbench.report.render.writer import write_report

__all__ = ["ReportData", "ReportPaths", "write_report"]


def __getattr__(name: str):
    if name == "write_report":
        from gcbench.report.render.writer import write_report

        return write_report
    raise AttributeError(f"module 'gcbench.report' has no attribute {name!r}")
