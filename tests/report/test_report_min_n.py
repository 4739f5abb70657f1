"""No interval or headline at an n where its method fails (issue 21, case C22), with the
minimum n from gcbench.stats.MIN_N_INTERVAL: the median's interval from 6 trials, a % change's
from 5 per side; below, the point value and the reason."""

from __future__ import annotations

import json

import pandas as pd
from synthetic import make_report_data

from gcbench import stats
from gcbench.report.analysis import ReportSettings, analyze


def test_five_trial_groups_have_no_median_interval_but_changes_with_one(simulated_report):
    _data, paths = simulated_report  # tinylm and noop, 5 repetitions each
    groups = pd.read_csv(paths.csv["groups"])
    full = groups[(groups["metric"] == "j_per_token") & (groups["n"] == 5)]
    assert len(full) and full["median"].notna().all() and full["ci_low"].isna().all()
    assert full["ci_reason"].str.startswith("n too small for a 95 % interval of the median: 6 trials needed").all()
    comparisons = pd.read_csv(paths.csv["comparisons"])
    five = comparisons[(comparisons["n_treatment"] >= 5) & (comparisons["n_baseline"] >= 5)]
    assert len(five) and five["pct_ci_low"].notna().all()
    fewer = comparisons[comparisons[["n_treatment", "n_baseline"]].min(axis=1) < 5]
    assert fewer["pct_ci_low"].isna().all()
    md = paths.markdown.read_text(encoding="utf-8")
    assert "No CI (n too small for a 95 % interval of the median: 6 trials needed)" in md
    assert stats.min_n_text() in md and "docs/statistics.md" in md


def test_four_trial_groups_give_no_change_interval_and_no_headline():
    data = make_report_data(kinds=("tinylm",), n_rep=4, failures=False)
    a = analyze(data, ReportSettings.from_plan(data.plan, n_resamples=300))
    assert a.comparisons and all(r.result.pct_ci_low is None for r in a.comparisons)
    assert all(r.result.pct_change is not None for r in a.comparisons)  # the point estimate stays
    assert a.headlines == []


def test_six_trial_groups_have_order_statistic_intervals_and_headlines(measured_report):
    _data, paths = measured_report  # 6 repetitions
    groups = pd.read_csv(paths.csv["groups"])
    shown = groups[groups["ci_low"].notna() & (groups["metric"] == "gpu_energy_j")]
    assert len(shown) and (shown["ci_method"] == "order statistics").all() and (shown["n"] >= 6).all()
    assert (shown["ci_coverage"] >= 0.95).all()
    assert json.loads(paths.summary_json.read_text())["headlines"]
