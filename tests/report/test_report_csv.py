"""CSV exports: columns, one row per trial / group-metric / comparison-metric."""

from __future__ import annotations

import json

import pandas as pd

from gcbench.metrics import METRIC_COLUMNS
from gcbench.report.data import TRIAL_COLUMNS
from gcbench.report.render.exports import COMPARISON_CSV_COLUMNS, GROUP_CSV_COLUMNS


def test_trials_csv_has_every_trial_and_contract_column(measured_report):
    data, paths = measured_report
    df = pd.read_csv(paths.csv["trials"])
    assert list(df.columns[: 2 + len(TRIAL_COLUMNS)]) == ["gpu_energy_source", "simulated_columns", *TRIAL_COLUMNS]
    assert {"used_in_statistics", *METRIC_COLUMNS, "co2e_kg_low", "co2e_kg_high"} <= set(df.columns)
    assert len(df) == len(data.trials)
    assert df.loc[0, "reasons"] == "window_too_short; counter_decreased"
    assert json.loads(df.loc[0, "factors"]) == data.trials.loc[0, "factors"]
    assert not df.loc[0, "used_in_statistics"] and df.loc[6, "used_in_statistics"]


def test_groups_csv_columns_and_rows(measured_report):
    data, paths = measured_report
    df = pd.read_csv(paths.csv["groups"])
    assert list(df.columns) == list(GROUP_CSV_COLUMNS)
    assert df.groupby(["workload", "variant"]).ngroups == data.trials["variant"].nunique()
    j = df[(df["metric"] == "j_per_token") & df["ci_low"].notna()]
    assert len(j) == 5  # the sixth group has 2 valid trials: no CI, with a reason
    assert (
        df.loc[(df["metric"] == "j_per_token") & df["ci_low"].isna(), "ci_reason"]
        .str.startswith("n too small for a 95 % interval of the median: 6 trials needed")
        .all()
    )
    assert j["ci_low"].le(j["median"]).all() and j["median"].le(j["ci_high"]).all()
    co2 = df[df["metric"] == "co2e_kg"]
    assert len(co2) and (co2["co2e_band_low"] < co2["median"]).all()
    assert (co2["co2e_band_high"] > co2["median"]).all()


def test_comparisons_csv_columns_and_holm(measured_report):
    _, paths = measured_report
    df = pd.read_csv(paths.csv["comparisons"])
    assert list(df.columns) == list(COMPARISON_CSV_COLUMNS)
    tested = df[~df["inconclusive"] & df["p_mannwhitney"].notna()]
    assert (tested["p_mannwhitney_holm"] >= tested["p_mannwhitney"] - 1e-12).all()
    assert set(df["factor"]) == {"path", "memory", "gpus", "precision", "power_cap_w"}
    assert "size_mib" not in set(df["factor"])  # a numeric sweep: plotted, not tested


def test_simulated_csvs_label_per_metric(simulated_report):
    """Only columns/rows derived from simulated GPU energy are labelled simulated;
    durations, tokens and throughput stay measured."""
    _, paths = simulated_report
    t = pd.read_csv(paths.csv["trials"], keep_default_na=False)
    assert (t["gpu_energy_source"] == "simulated").all()
    cols = t.loc[t["gpu_energy_j"] != "", "simulated_columns"].str.split("; ")
    assert all({"gpu_energy_j", "j_per_token", "co2e_kg"} <= set(c) for c in cols)
    assert not any({"duration_s", "tokens", "tokens_per_s"} & set(c) for c in cols)
    g = pd.read_csv(paths.csv["groups"])
    src = dict(zip(g["metric"], g["data_source"], strict=True))
    assert src["tokens_per_s"] == "measured" and src["duration_s"] == "measured"
    assert src["j_per_token"] == "SIMULATED" and src["co2e_kg"] == "SIMULATED"
    c = pd.read_csv(paths.csv["comparisons"])
    assert set(c.loc[c["metric"] == "tokens_per_s", "data_source"]) == {"measured"}
    assert set(c.loc[c["metric"] == "j_per_token", "data_source"]) == {"SIMULATED"}


def test_measured_csvs_name_the_sensor(measured_report):
    _, paths = measured_report
    t = pd.read_csv(paths.csv["trials"], keep_default_na=False)
    assert set(t["gpu_energy_source"]) <= {"nvml", "nvidia-smi", "unavailable"}
    assert (t["simulated_columns"] == "").all()
    assert (pd.read_csv(paths.csv["groups"])["data_source"] == "measured").all()


def test_tradeoff_csv_has_every_configuration_with_its_changes(measured_report):
    from gcbench.report.render.exports import TRADEOFF_CSV_COLUMNS

    _, paths = measured_report
    df = pd.read_csv(paths.csv["tradeoff"])
    assert list(df.columns) == list(TRADEOFF_CSV_COLUMNS)
    assert len(df) == 12 and set(df["workload"]) == {"resnet50-cifar10"}  # the only trade-off
    base = df[df["baseline"]]
    assert len(base) == 1 and json.loads(base["factors"].iloc[0]) == {
        "gpus": 1,
        "power_cap_w": 300,
        "precision": "fp32",
    }
    assert base["energy_pct_change"].isna().all()
    rest = df[~df["baseline"]]
    want = 100 * (rest["energy_median"] / base["energy_median"].iloc[0] - 1)
    assert (rest["energy_pct_change"] - want).abs().max() < 1e-9
    assert (df["data_source"] == "measured").all() and df["on_front"].any()


def test_simulated_tradeoff_csv_is_labelled():
    from synthetic import make_report_data

    from gcbench.report.analysis import ReportSettings, analyze
    from gcbench.report.render.exports import tradeoff_frame

    data = make_report_data(kinds=("resnet_cifar",), n_rep=3, simulated=True, failures=False)
    df = tradeoff_frame(analyze(data, ReportSettings(n_resamples=200)))
    assert len(df) == 12 and (df["data_source"] == "SIMULATED").all()
