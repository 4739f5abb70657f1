"""Report analysis rules: validity, baselines, sweeps, inconclusive groups, CO2e."""

from __future__ import annotations

import re

import numpy as np
import pytest
from synthetic import make_report_data

from gcbench.report.analysis import ReportSettings, analyze, baseline_level
from gcbench.report.analysis.tradeoff import pareto_front

FAST = ReportSettings(n_resamples=300)


def test_only_valid_ok_trials_enter_statistics():
    data = make_report_data(kinds=("tinylm",), n_rep=6)
    a = analyze(data, FAST)
    g = next(g for g in a.groups if g.variant == data.trials.loc[0, "variant"])
    # trials 0 invalid, 2 failed, 3 skipped, 4 unvalidated; 5 valid but energy unknown
    assert (g.n_trials, g.n_valid, g.n_invalid, g.n_failed, g.n_skipped, g.n_unvalidated) == (6, 2, 1, 1, 1, 1)
    assert g.summaries["gpu_energy_j"].n == 1 and g.summaries["gpu_energy_j"].n_excluded == 1
    assert a.measurement.counts == dict(total=36, ok=34, failed=1, skipped=1, valid=32, invalid=1, unvalidated=1)


def test_min_valid_repetitions_makes_groups_inconclusive_and_untested():
    data = make_report_data(kinds=("tinylm",), n_rep=6)
    data.plan["validation"]["min_valid_repetitions"] = 3
    a = analyze(data, ReportSettings.from_plan(data.plan, n_resamples=300))
    bad = [r for r in a.comparisons if r.inconclusive]
    assert bad and all(r.result.significant is None and r.result.p_mannwhitney_holm is None for r in bad)
    assert all("inconclusive" in r.headline for r in bad)


def test_twins_that_disagree_make_their_group_inconclusive_and_untested():
    data = make_report_data(kinds=("tinylm",), n_rep=2, failures=False)
    variant = "tinylm-infer[mode=infer,path=torch]"
    flag = (
        "twins disagree: the two valid repetitions ran at 70 and 1 steps/s (70.0x apart, limit 2x); "
        "the group is inconclusive"
    )
    rows = data.trials["variant"] == variant
    data.trials.loc[rows, "flags"] = data.trials.loc[rows, "flags"].map(lambda f: list(f) + [flag])
    a = analyze(data, FAST)
    g = next(g for g in a.groups if g.variant == variant)
    assert g.inconclusive and g.n_valid == 2 and g.inconclusive_reason.startswith("the two valid repetitions ran at 70")
    others = [g for g in a.groups if g.variant != variant]
    assert others and not any(g.inconclusive for g in others)
    rows = [r for r in a.comparisons if variant in (r.result.treatment, r.result.baseline)]
    assert rows and all(r.inconclusive and r.result.p_mannwhitney_holm is None for r in rows)
    assert all(f"the two repetitions of {variant} ran too far apart in throughput" in r.headline for r in rows)
    assert all("disagree; not tested" in r.result.note for r in rows)


def test_default_baselines_follow_the_studies():
    d = ReportSettings()
    # the regime study compares against pure PyTorch and pageable memory, whatever sorts first
    assert baseline_level("path", ["external-go", "external-rust", "torch"], d) == "torch"
    assert baseline_level("memory", ["pinned", "pageable"], d) == "pageable"
    # the multi-GPU study: uncapped FP32 on the fewest GPUs
    assert baseline_level("precision", ["amp", "fp32"], d) == "fp32"
    assert baseline_level("power_cap_w", [250, 300, 200], d) == 300
    assert baseline_level("power_cap_w", [250, None, 200], d) is None  # no cap at all
    assert baseline_level("gpus", [2, 1, 4], d) == 1
    # a factor the studies do not name: the first level in sorted order
    assert baseline_level("batch_size", [32, 16], d) == 16


def test_plan_baseline_overrides_the_study_default():
    s = ReportSettings(baseline={"path": "external-go", "memory": "pinned"})
    assert baseline_level("path", ["torch", "external-go"], s) == "external-go"
    assert baseline_level("memory", ["pinned", "pageable"], s) == "pinned"


def test_path_comparisons_are_against_pure_pytorch_by_default():
    data = make_report_data(kinds=("tinylm",), n_rep=6, failures=False)
    a = analyze(data, ReportSettings.from_plan(data.plan, n_resamples=300))
    assert {r.baseline_level for r in a.comparisons} == {"torch"}
    assert any("path=external-go raised GPU J/token" in h for h in a.headlines)
    assert a.baseline_for("tinylm-infer", "path") == "torch"


def test_plan_baseline_flips_the_comparison():
    data = make_report_data(kinds=("tinylm",), n_rep=6, failures=False)
    data.plan["report"] = {"baseline": {"path": "external-go"}}
    a = analyze(data, ReportSettings.from_plan(data.plan, n_resamples=300))
    assert {r.baseline_level for r in a.comparisons} == {"external-go"}
    assert any("path=torch cut GPU J/token" in h for h in a.headlines)


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


def test_headlines_significant_first_and_non_significant_phrased_as_no_difference():
    data = make_report_data(kinds=("tinylm", "h2d"), n_rep=10, failures=False)
    a = analyze(data, FAST)
    heads = a.headlines
    sig = [i for i, r in enumerate(a.headline_rows()) if r.result.significant]
    nsig = [i for i, r in enumerate(a.headline_rows()) if r.result.significant is False]
    assert sig and nsig and max(sig) < min(nsig)
    assert any(
        re.search(
            r"memory=pinned raised bandwidth by [\d.]+ % \([\d.]+x\) \(95 % CI "
            r"[-+][\d.]+ % to [-+][\d.]+ %; p [=<] [\d.]+, significant\)",
            h,
        )
        for h in heads
    )
    pattern = (
        r"^tinylm-infer: no significant difference in throughput between "
        r"path=external-rust and path=torch \(change [-+]\d+\.\d\d %, 95 % CI "
        r"[-+]\d+\.\d\d % to [-+]\d+\.\d\d %; p = [\d.]+\)\.$"
    )
    assert any(re.search(pattern, h) for h in heads)
    assert not any("not significant" in h for h in heads)


def test_simulated_label_only_on_energy_derived_comparisons():
    data = make_report_data(kinds=("tinylm",), n_rep=4, failures=False, simulated=True)
    a = analyze(data, FAST)
    by_metric = {}
    for r in a.comparisons:
        by_metric.setdefault(r.result.metric, set()).add(r.simulated)
    assert by_metric["j_per_token"] == {True} and by_metric["tokens_per_s"] == {False}
    for r in a.comparisons:
        assert r.headline.startswith("SIMULATED:") == (r.result.metric != "tokens_per_s")


def test_observed_rate_ignores_edge_bursts_and_sim_power_update_is_not_reported():
    from gcbench.report.analysis import observed_rate_hz, probe_samples

    regular = np.arange(0.0, 3.0, 0.05)  # 20 Hz
    bursts = np.concatenate([e + np.arange(0.001, 0.3, 0.002) for e in (0.5, 1.7, 2.5)])
    t = np.sort(np.concatenate([regular, bursts]))
    assert 1 / np.median(np.diff(t)) > 300  # what a plain median reported
    hz, n_burst = observed_rate_hz(t, 20.0)
    assert hz == pytest.approx(20.0, rel=0.02) and n_burst > 300
    assert observed_rate_hz(t, None)[0] == pytest.approx(20.0, rel=0.02)
    import pandas as pd

    s = pd.DataFrame(
        dict(
            t_s=t,
            device="gpu0",
            source="simulated",
            power_instant_w=np.where((t > 0.5) & (t < 1.7), 300.0, 60.0),
            energy_j=np.floor(t / 0.1) * 10.0,
        )
    )
    (p,) = probe_samples("x", "simulated", s, 20.0)
    assert p.simulated and p.power_update_s is None and p.configured_hz == 20.0
    assert p.sample_hz == pytest.approx(20.0, rel=0.02)


def test_edge_correction_statement_follows_the_methods():
    from gcbench.report.analysis import edge_correction_statement

    sim = edge_correction_statement(["simulated"] * 3)
    assert "did not apply" in sim and "3 trials used the simulated device" in sim
    smi = edge_correction_statement(["nvidia-smi-power-integration"] * 2)
    assert "did not apply" in smi and "nvidia-smi" in smi
    nv = edge_correction_statement(["nvml-counter-edge-corrected"] * 4 + ["simulated"])
    assert nv.startswith("Edge correction applied to 4 of 5 trials")


def test_simulated_model_from_constants_when_the_frame_lacks_it():
    from gcbench.report.analysis import simulated_model

    data = make_report_data(kinds=("noop",), n_rep=2, failures=False, simulated=True)
    a = analyze(data, FAST)
    m = a.measurement.simulated_model
    assert (m["idle_w"], m["busy_w"], m["recorded"]) == (60.0, 300.0, False)
    t = a.trials.copy()
    t["simulated_idle_w"], t["simulated_busy_w"] = 50.0, 250.0
    assert simulated_model(t)["busy_w"] == 250.0 and simulated_model(t)["recorded"]


def test_measurement_states_the_contention_rule_with_the_plans_thresholds_and_the_runs_shares():
    import pandas as pd

    from gcbench.report.analysis.measurement import contention_statement

    df = pd.DataFrame(
        {
            "cpu_contention_share": [0.01, 0.03, 0.4],
            "flags": [[], ["CPU contention: other processes used 3.0 % ..."], []],
            "reasons": [[], [], ["CPU contention: other processes used 40.0 % ..."]],
        }
    )
    text = contention_statement(
        df, {"validation": {"cpu_contention_flag_share": 0.02, "cpu_contention_invalid_share": 0.2}}
    )
    assert "Above 2 % of the trial's core-seconds the trial is flagged, above 20 % invalid" in text
    assert "3.0 % in the median trial and 40.0 % at most, over 3 trials measured" in text
    assert "1 trials flagged and 1 invalid by this rule" in text
    default = contention_statement(df, {"validation": {}})  # the default: contention only flags
    assert (
        "Above 5 % of the trial's core-seconds the trial is flagged (validation.cpu_contention_flag_share)" in default
    )
    assert "so contention never invalidates a trial here" in default
