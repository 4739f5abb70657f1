"""The groups tables: small groups show their trials, ratios are pooled over the same
trials as the medians, units are scaled and named in the heads, and every workload has
the same core columns. Data: SYNTHETIC (tests/report/synthetic.py)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from synthetic import make_report_data

from gcbench import stats
from gcbench.report.analysis import ReportSettings, analyze
from gcbench.report.fmt import fmt_num
from gcbench.report.render import tables
from gcbench.report.scale import choose_unit

FAST = ReportSettings(n_resamples=300)


def _table(a, workload):
    for w, kind, groups in a.workloads():
        if w == workload:
            return tables.workload_table(a, w, kind, groups), groups
    raise KeyError(workload)


def _col(t, head_part, pooled=False):
    return next(i for i, c in enumerate(t.columns) if head_part in c.head and c.pooled == pooled)


# --------------------------------------------------------------------------- point 1


def test_groups_under_three_trials_list_their_trials_and_say_why_once():
    data = make_report_data(kinds=("tinylm",), n_rep=2, failures=False)
    a = analyze(data, FAST)
    t, groups = _table(a, "tinylm-infer")
    j = _col(t, "GPU J/token")
    for row, g in zip(t.rows, groups, strict=True):
        cell = row["cells"][j]
        v = a.trials.loc[(a.trials["variant"] == g.variant), "j_per_token"].to_numpy() * 1e3
        assert cell.trials and cell.ci == ""
        assert cell.main == "trials: " + ", ".join(fmt_num(x) for x in v)  # mJ/token
        assert fmt_num(np.median(v)) not in cell.main  # never the mean of two as a median
    reason = [n for n in t.notes if "fewer than 3 valid trials" in n]
    assert len(reason) == 1 and 'list each trial\'s value ("trials: ...")' in reason[0]
    assert all("at least 3" not in c.text() for r in t.rows for c in r["cells"])


def test_three_trials_show_the_median_and_say_why_there_is_no_ci():
    """C22: 3-5 trials give a median but no 95 % interval (none can keep the level)."""
    data = make_report_data(kinds=("tinylm",), n_rep=3, failures=False)
    a = analyze(data, FAST)
    t, groups = _table(a, "tinylm-infer")
    j = _col(t, "GPU J/token")
    s = groups[0].summaries["j_per_token"]
    cell = t.rows[0]["cells"][j]
    assert not cell.trials and cell.main == fmt_num(s.median * 1e3) and cell.ci == ""
    (note,) = [n for n in t.notes if n.startswith("No CI (n too small for a 95 % interval of the median")]
    assert "6 trials needed" in note and "docs/statistics.md" in note


def test_six_trials_show_median_and_ci():
    data = make_report_data(kinds=("tinylm",), n_rep=6, failures=False)
    a = analyze(data, FAST)
    t, groups = _table(a, "tinylm-infer")
    j = _col(t, "GPU J/token")
    s = groups[0].summaries["j_per_token"]
    cell = t.rows[0]["cells"][j]
    assert not cell.trials and cell.main == fmt_num(s.median * 1e3)
    assert cell.ci == f"[{fmt_num(s.ci_low * 1e3)}, {fmt_num(s.ci_high * 1e3)}]"
    assert not any("fewer than 3" in n or n.startswith("No CI") for n in t.notes)


def test_headlines_only_for_comparisons_with_a_ci():
    data = make_report_data(kinds=("tinylm",), n_rep=5, failures=False)
    small = data.trials["workload"].eq("tinylm-infer") & data.trials["repetition"].ge(2)
    data.trials.loc[small, "valid"] = False  # tinylm-infer keeps 2 valid trials per group
    a = analyze(data, FAST)
    no_ci = [r for r in a.comparisons if r.workload == "tinylm-infer"]
    assert no_ci and all(r.result.pct_ci_low is None for r in no_ci)
    assert a.headlines and not any(h.startswith(("tinylm-infer", "SIMULATED: tinylm-infer")) for h in a.headlines)
    assert all("no CI" not in h for h in a.headlines)
    assert {id(r) for r in a.untested_for_ci()} == {id(r) for r in no_ci}
    assert len(a.headlines) == sum(1 for r in a.comparisons if r.workload == "tinylm-train")


def test_comparisons_table_states_the_missing_ci_once(simulated_report):
    _, paths = simulated_report
    md = paths.markdown.read_text(encoding="utf-8")
    comparisons = md.split("## Comparisons")[1].split("\n## ")[0]
    need = stats.MIN_N_INTERVAL["pct_change_of_medians"]
    assert comparisons.count(f'No CI ("–") where a group has fewer than {need} valid trials') == 1
    assert "values per group needed" not in comparisons


def test_smoke_plan_runs_enough_repetitions_for_a_ci_wherever_the_report_compares():
    from pathlib import Path

    from gcbench.plan import expand, load_plan
    from gcbench.report.analysis import Group, plan_comparisons

    plan = load_plan(Path(__file__).resolve().parents[2] / "plans" / "smoke.yaml")
    specs = expand(plan)
    groups, reps = {}, {}
    for s in specs:
        groups.setdefault(
            s.variant,
            Group(
                workload=s.workload,
                kind=s.kind,
                variant=s.variant,
                factors=dict(s.factors),
                n_trials=0,
                n_ok=0,
                n_failed=0,
                n_skipped=0,
                n_valid=0,
                n_invalid=0,
                n_unvalidated=0,
                inconclusive=False,
                simulated=False,
            ),
        )
        reps[s.variant] = reps.get(s.variant, 0) + 1
    pairs = plan_comparisons(list(groups.values()), ReportSettings.from_plan(plan.model_dump()))
    compared = {g.variant for pair in pairs for g in pair[:2]}
    assert {groups[v].workload for v in compared} == {"h2d", "tinylm-infer"}
    assert all(reps[v] >= stats.MIN_N_INTERVAL["pct_change_of_medians"] for v in compared), reps


# --------------------------------------------------------------------------- point 2


def test_pooled_ratios_are_sums_over_the_same_trials_as_the_medians():
    data = make_report_data(kinds=("tinylm",), n_rep=9, failures=False)
    t = data.trials
    first = t.index[t["variant"] == t.loc[0, "variant"]]
    t.loc[first[1], "tokens_per_s"] = np.nan  # throughput unknown in one trial
    a = analyze(data, FAST)
    g = next(g for g in a.groups if g.variant == t.loc[0, "variant"])
    keep = t.loc[first].drop(index=first[1])
    assert g.summaries["j_per_token"].n == g.summaries["tokens_per_s"].n == 8
    assert g.summaries["j_per_token"].n_excluded == 1  # left out of J/token too
    assert g.summaries["j_per_token"].median == pytest.approx(keep["j_per_token"].median())
    energy = (keep["j_per_token"] * keep["tokens"]).sum()
    assert g.pooled["j_per_token"].pooled == pytest.approx(energy / keep["tokens"].sum())
    assert g.pooled["tokens_per_s"].pooled == pytest.approx(keep["tokens"].sum() / keep["duration_s"].sum())
    assert g.pooled["j_per_token"].pooled * g.pooled["tokens_per_s"].pooled == pytest.approx(
        energy / keep["duration_s"].sum()
    )
    p = g.pooled["j_per_token"]
    assert p.n == 8 and p.ci_low < p.pooled < p.ci_high


def test_tables_and_groups_csv_say_how_ratios_are_summarised(measured_report):
    data, paths = measured_report
    md = paths.markdown.read_text(encoding="utf-8")
    assert "GPU J/token (mJ/token), median [95 % CI]" in md
    assert "GPU J/token (mJ/token), pooled Σ GPU energy / Σ tokens [95 % CI]" in md
    assert "throughput (tokens/s), pooled Σ tokens / Σ time [95 % CI]" in md
    assert "bandwidth (GB/s), pooled Σ GB / Σ time [95 % CI]" in md
    assert "come from the same valid trials" in md
    g = pd.read_csv(paths.csv["groups"])
    row = g[(g["metric"] == "j_per_token") & (g["n"] >= 3)].iloc[0]
    trials = data.trials
    used = trials[
        (trials["variant"] == row["variant"])
        & trials["valid"].eq(True)
        & trials["status"].eq("ok")
        & trials["j_per_token"].notna()
    ]
    assert row["pooled"] == pytest.approx((used["j_per_token"] * used["tokens"]).sum() / used["tokens"].sum())
    assert row["pooled_formula"] == "Σ GPU energy / Σ tokens" and row["pooled_n"] == row["n"]
    assert g.loc[g["metric"] == "duration_s", "pooled"].isna().all()


# --------------------------------------------------------------------------- point 3


@pytest.mark.parametrize(
    "unit, values, label, shown",
    [
        ("kgCO2e", [2.088e-05, 2.071e-05], "mgCO2e", 20.88),
        ("kgCO2e", [2.461e-04], "mgCO2e", 246.1),
        ("kgCO2e", [0.0066, 0.011], "gCO2e", 6.6),
        ("kgCO2e", [12.5], "kgCO2e", 12.5),
        ("J", [375.9, 372.8], "J", 375.9),
        ("J", [4430.0], "Wh", 1.2306),
        ("J", [0.0121], "mJ", 12.1),
        ("kWh", [0.004109], "Wh", 4.109),
        ("kWh", [3.317], "kWh", 3.317),
        ("J/token", [0.01658, 0.007541], "mJ/token", 16.58),
        ("J/token", [0.93], "mJ/token", 930.0),
        ("J/GB", [45.61], "J/GB", 45.61),
        ("s", [1.205], "s", 1.205),
        ("s", [90.0], "s", 90.0),
        ("s", [603.7], "min", 10.06),
        ("s", [0.0095], "ms", 9.5),
        ("tokens/s", [18815.0], "tokens/s", 18815.0),
    ],
)
def test_units_are_scaled_for_reading(unit, values, label, shown):
    u = choose_unit(unit, values)
    assert u.label == label and u(values[0]) == pytest.approx(shown, rel=1e-3)


def test_one_unit_per_column_named_in_the_head_and_no_scientific_notation(simulated_report):
    data, paths = simulated_report
    md = paths.markdown.read_text(encoding="utf-8")
    groups = md.split("## Groups")[1].split("## Comparisons")[0]
    assert not re.search(r"\d\.\d+e[-+]\d", groups)
    assert "CO2e (mgCO2e), median [95 % CI]" in groups  # 2e-05 kg per trial
    assert "GPU J/token (mJ/token), median [95 % CI]" in groups
    a = analyze(data, FAST)
    t, groups_ = _table(a, "tinylm-train")
    c = _col(t, "CO2e")
    assert t.columns[c].unit.label == "gCO2e"
    s = groups_[0].summaries["co2e_kg"]
    assert t.rows[0]["cells"][c].main == fmt_num(s.median * 1e3)


CORE = ("time (", "GPU energy (", "CPU energy (", "CO2e (")
PRIMARY = {"tinylm": "GPU J/token", "h2d": "GPU J/GB", "resnet_cifar": "GPU energy", "noop": "time"}


def test_every_workload_table_has_the_core_columns():
    data = make_report_data(kinds=("tinylm", "h2d", "resnet_cifar", "noop"), n_rep=3)
    a = analyze(data, FAST)
    for workload, kind, groups in a.workloads():
        t = tables.workload_table(a, workload, kind, groups)
        heads = [c.head for c in t.columns if not c.pooled]
        for core in CORE:
            assert sum(h.startswith(core) for h in heads) == 1, (workload, heads)
        assert heads[0].startswith(PRIMARY[kind]), (workload, heads)
        cpu = _col(t, "CPU energy")
        if kind != "resnet_cifar":  # RAPL unreadable in these synthetic trials
            assert all(r["cells"][cpu].main == "–" for r in t.rows)
            assert any("CPU energy is unknown in every trial" in n and "never 0" in n for n in t.notes)


def test_totals_line_is_scaled(measured_report):
    _, paths = measured_report
    md = paths.markdown.read_text(encoding="utf-8")
    assert re.search(r"Total over valid trials: [\d.,]+ kWh, [\d.,]+ gCO2e at 0.2 kgCO2e/kWh", md)


def test_no_headline_says_why_when_no_comparison_has_a_ci():
    from gcbench.report.render.context import _no_comparison_reason

    a = analyze(make_report_data(kinds=("tinylm",), n_rep=2, failures=False), FAST)
    assert a.comparisons and not a.headlines
    assert _no_comparison_reason(a).startswith(
        f"No headline: no comparison has a CI (each needs at least {stats.MIN_N_INTERVAL['pct_change_of_medians']} "
        "valid trials per group"
    )
