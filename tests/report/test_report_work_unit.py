"""A user's program that counts its own unit of work (``unit: requests``) is reported in
that unit: "GPU J/request (mJ/request)" and "throughput (requests/s)" in its groups
table, not "J/unit"."""

from __future__ import annotations

import pytest
from synthetic import make_report_data

from gcbench.report.analysis import ReportSettings, analyze
from gcbench.report.metrics import in_work_unit, singular
from gcbench.report.render.tables import workload_table


@pytest.mark.parametrize(
    ("plural", "one"),
    [
        ("requests", "request"),
        ("queries", "query"),
        ("images", "image"),
        ("batches", "batch"),
        ("boxes", "box"),
        ("series", "series"),
        ("corpus", "corpus"),
        ("kWh", "kWh"),
        ("frame", "frame"),
    ],
)
def test_singular_of_a_unit_name(plural, one):
    assert singular(plural) == one


def test_labels_in_the_work_unit():
    assert in_work_unit("GPU J/unit", "requests") == "GPU J/request"
    assert in_work_unit("mJ/unit", "queries") == "mJ/query"
    assert in_work_unit("units/s", "requests") == "requests/s"
    assert in_work_unit("units of work", "images") == "images"
    assert in_work_unit("units", "images") == "images"
    assert in_work_unit("Σ GPU energy / Σ units", "requests") == "Σ GPU energy / Σ requests"
    assert in_work_unit("GPU J/unit", None) == "GPU J/unit"


def test_a_programs_groups_table_speaks_its_unit():
    data = make_report_data(kinds=("command",), n_rep=3, failures=False)
    a = analyze(data, ReportSettings.from_plan(data.plan, n_resamples=200))
    ((workload, kind, groups),) = list(a.workloads())
    heads = [c.head for c in workload_table(a, workload, kind, groups).columns]
    assert any(h.startswith("GPU J/request (") and h.endswith("J/request)") for h in heads), heads
    assert "throughput (requests/s)" in heads, heads
    assert not any("unit" in h for h in heads), heads
    subs = [c.sub for c in workload_table(a, workload, kind, groups).columns]
    assert "pooled Σ GPU energy / Σ requests [95 % CI]" in subs, subs


def test_the_whole_report_speaks_the_programs_unit(tmp_path):
    """Groups table, comparisons, headline sentences, plot captions and the trial list."""
    from gcbench.report import write_report

    data = make_report_data(kinds=("command",), n_rep=3, failures=False)
    paths = write_report(data, tmp_path / "r", settings=ReportSettings.from_plan(data.plan, n_resamples=200))
    md = paths.markdown.read_text()
    assert "J/unit" not in md and "units/s" not in md and "Σ units" not in md
    assert "| serve | batch=8 vs batch=1 | GPU J/request | 3 vs 3 |" in md
    assert "GPU J/request and throughput of the 2 groups of serve" in md
