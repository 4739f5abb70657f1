"""Fixtures of the report tests: reports written once per session from SYNTHETIC data
(tests/report/synthetic.py), with fewer bootstrap resamples to stay fast."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from synthetic import make_report_data  # noqa: E402

from gcbench.report.analysis import ReportSettings  # noqa: E402

FAST = dict(n_resamples=500)


def _write(tmp_path_factory, name, **kw):
    from gcbench.report import write_report

    data = make_report_data(**kw)
    settings = ReportSettings.from_plan(data.plan, **FAST)
    out = tmp_path_factory.mktemp(name) / data.plan_name / data.run_id
    return data, write_report(data, out, settings=settings)


@pytest.fixture(scope="session")
def measured_report(tmp_path_factory):
    """(data, paths) of a non-simulated report: tinylm, h2d and resnet with power caps,
    a history for the trend plot, and invalid/failed/skipped/unvalidated trials."""
    return _write(tmp_path_factory, "measured", kinds=("tinylm", "h2d", "resnet_cifar"), n_rep=6, history=True)


@pytest.fixture(scope="session")
def simulated_report(tmp_path_factory):
    """(data, paths) of a report whose trials all come from the simulated device."""
    return _write(tmp_path_factory, "simulated", kinds=("tinylm", "noop"), n_rep=5, simulated=True)
