"""Report analysis rules: validity, baselines, sweeps, inconclusive groups, CO2e."""

from __future__ import annotations

import numpy as np
import pytest
from synthetic import make_report_data

from gcbench.report.analysis import ReportSettings, analyze, baseline_level
from gcbench.report.plots import pareto_front

FAST = ReportSettings(n_resamples=300)


def test_only_valid_ok_trials_enter_statistics():
    data = make_report_data(kinds=("tinylm",), n_rep=6)
    a = analyze(data, FAST)
    g = next(g for g in a.groups if g.variant == data.trials.loc[0, "variant"])
    # trials 0 invalid, 2 failed, 3 skipped, 4 unvalidated; 5 valid but energy unknown
    assert (g.n_trials, g.n_valid, g.n_invalid, g.n_failed, g.n_skipped, g.n_unvalidated) == (6, 2, 1, 1, 1, 1)
    assert g.summaries["gpu_energy_j"].n == 1 and g.summaries["gpu_energy_j"].n_excluded == 1
    assert a.measurement.counts == dict(total=36, ok=34, failed=1, skipped=1, valid=32,
                                        invalid=1, unvalidated=1)


def test_min_valid_repetitions_makes_groups_inconclusive_and_untested():
    data = make_report_data(kinds=("tinylm",), n_rep=6)
    data.plan["validation"]["min_valid_repetitions"] = 3
    a = analyze(data, ReportSettings.from_plan(data.plan, n_resamples=300))
    bad = [r for r in a.comparisons if r.inconclusive]
    assert bad and all(r.result.significant is None and r.result.p_mannwhitney_holm is None
                       for r in bad)
    assert all("inconclusive" in r.headline for r in bad)


def test_baseline_rules():
    s = ReportSettings(baseline={"path": "torch"})
    assert baseline_level("path", ["torch", "external-go"], s) == "torch"
    assert baseline_level("path", ["torch", "external-go"], ReportSettings()) == "external-go"
    assert baseline_level("power_cap_w", [250, 300, 200], ReportSettings()) == 300
    assert baseline_level("gpus", [2, 1], ReportSettings()) == 1


def test_plan_baseline_flips_the_comparison():
    data = make_report_data(kinds=("tinylm",), n_rep=6, failures=False)
    data.plan["report"] = {"baseline": {"path": "torch"}}
    a = analyze(data, ReportSettings.from_plan(data.plan, n_resamples=300))
    assert {r.baseline_level for r in a.comparisons} == {"torch"}
    assert any("path=external-go raised GPU J/token" in h for h in a.headlines)


def test_co2e_is_energy_times_intensity_with_band():
    data = make_report_data(kinds=("resnet_cifar",), n_rep=3, failures=False)
    a = analyze(data, FAST)
    t = a.trials
    assert np.allclose(t["co2e_kg"], t["energy_kwh"] * 0.2)
    assert np.allclose(t["co2e_kg_low"], t["energy_kwh"] * 0.1)
    assert a.co2e_total["co2e_kg"] == pytest.approx(t["energy_kwh"].sum() * 0.2)
    assert a.measurement.energy_basis.startswith("GPU + CPU")


def test_unknown_energy_stays_unknown_in_co2e():
    data = make_report_data(kinds=("tinylm",), n_rep=3, failures=False)
    data.trials.loc[0, "gpu_energy_j"] = np.nan
    a = analyze(data, FAST)
    assert np.isnan(a.trials.loc[0, "co2e_kg"]) and a.co2e_total["n_unknown"] == 1


def test_trials_frame_with_missing_optional_columns_and_json_strings():
    data = make_report_data(kinds=("noop",), n_rep=3, failures=False)
    t = data.trials[["trial_id", "variant", "workload", "kind", "repetition", "duration_s"]].copy()
    t["valid"] = True
    t["reasons"] = '["a", "b"]'
    data.trials = t
    a = analyze(data, FAST)
    assert a.groups[0].summaries["duration_s"].n == 3
    assert a.trials.loc[0, "reasons"] == ["a", "b"] and a.co2e_total["energy_kwh"] is None


def test_pareto_front():
    pts = [(1.0, 5.0), (2.0, 3.0), (3.0, 4.0), (4.0, 1.0), (float("nan"), 0.0)]
    assert pareto_front(pts) == [0, 1, 3]
