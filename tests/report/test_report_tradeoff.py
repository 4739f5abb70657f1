"""The energy-time trade-off: every factor that trades energy for time (power cap,
precision, GPU count), its Pareto front as a table, and the "energy saved for time
lost" headline against the baseline with CIs. Data: SYNTHETIC (tests/report/synthetic.py):
ResNet-50 where a 250 W cap costs ~7 % energy and ~1.2 % time against 300 W."""

from __future__ import annotations

import re

import numpy as np
import pytest
from synthetic import make_report_data

from gcbench import stats
from gcbench.report.analysis import ReportSettings, analyze, baseline_level
from gcbench.report.analysis.tradeoff import pareto_front, tradeoff_kind
from gcbench.report.render import tables

FAST = ReportSettings(n_resamples=300)


@pytest.fixture(scope="module")
def resnet():
    return analyze(make_report_data(kinds=("resnet_cifar",), n_rep=5, failures=False), FAST)


def test_factors_that_trade_energy_for_time():
    assert [tradeoff_kind(f) for f in ("power_cap_w", "precision", "gpus", "path", "size_mib")] == [
        "cap",
        "precision",
        "gpus",
        None,
        None,
    ]
    assert baseline_level("precision", ["amp", "fp32"], ReportSettings()) == "fp32"
    assert baseline_level("gpus", [2, 1], ReportSettings()) == 1
    assert baseline_level("power_cap_w", [200, 300, 250], ReportSettings()) == 300


def test_tradeoff_of_every_factor_with_the_uncapped_fp32_baseline(resnet):
    (t,) = resnet.tradeoffs
    assert t.active and t.factors == ["gpus", "power_cap_w", "precision"]
    assert (t.energy_metric, t.time_metric) == ("total_energy_j", "duration_s")
    assert t.baseline.group.factors == {"gpus": 1, "precision": "fp32", "power_cap_w": 300}
    assert [(e.factor, e.level, e.baseline_level) for e in t.effects] == [
        ("gpus", 2, 1),
        ("power_cap_w", 200, 300),
        ("power_cap_w", 250, 300),
        ("precision", "amp", "fp32"),
    ]
    assert all(len(e.contexts) == (6 if e.factor != "power_cap_w" else 4) for e in t.effects)


def test_front_is_the_set_no_configuration_beats_in_both(resnet):
    (t,) = resnet.tradeoffs
    pts = [(c.time.median, c.energy.median) for c in t.configs]
    for c in t.configs:
        x, y = c.time.median, c.energy.median
        dominated = any(px <= x and py <= y and (px, py) != (x, y) for px, py in pts)
        assert c.on_front == (not dominated), c.label
    assert pareto_front([(1.0, 5.0), (2.0, 3.0), (3.0, 4.0), (4.0, 1.0)]) == [0, 1, 3]


def test_front_table_lists_the_front_with_changes_against_the_baseline(resnet):
    (t,) = resnet.tradeoffs
    ft = tables.tradeoff_rows(resnet, t)
    assert [r["config"] for r in ft.rows] == [t.baseline.label] + [c.label for c in t.front]
    assert ft.rows[0]["cells"][2].main == "baseline"
    heads = [c.head for c in ft.columns]
    assert heads == ["total energy (GPU + CPU) (Wh)", "time (s)", "Δ total energy (GPU + CPU)", "Δ time"]
    for row, c in zip(ft.rows[1:], t.front, strict=True):
        base_e = t.baseline.group.known("total_energy_j")
        want = 100 * (np.median(c.group.known("total_energy_j")) / np.median(base_e) - 1)
        assert row["cells"][2].main == f"{want:+.2f} %"
        assert row["cells"][2].ci == f"[{c.d_energy.pct_ci_low:+.2f} %, {c.d_energy.pct_ci_high:+.2f} %]"


def test_headline_energy_saved_for_time_lost_with_cis(resnet):
    (t,) = resnet.tradeoffs
    cap250 = next(e for e in t.effects if e.factor == "power_cap_w" and e.level == 250)
    de = [c[1].pct_change for c in cap250.contexts]
    dt = [c[2].pct_change for c in cap250.contexts]
    assert max(de) < 0 < min(dt)  # the synthetic cap saves energy and costs time everywhere
    head = cap250.headline
    assert head.startswith(
        f"resnet50-cifar10: power_cap_w=250 against power_cap_w=300 saved "
        f"{-max(de):.2f}-{-min(de):.2f} % total energy (GPU + CPU) for "
        f"{min(dt):.2f}-{max(dt):.2f} % more time over 4 configurations of gpus, precision"
    )
    lo = min(c[1].pct_ci_low for c in cap250.contexts)
    hi = max(c[2].pct_ci_high for c in cap250.contexts)
    assert f"within {lo:+.2f} % to" in head and f"to {hi:+.2f} %)." in head
    assert head in resnet.headlines


def test_single_configuration_headline_and_no_headline_without_cis():
    data = make_report_data(kinds=("resnet_cifar",), n_rep=5, failures=False)
    keep = data.trials["factors"].map(lambda f: f["gpus"] == 1 and f["precision"] == "fp32")
    data.trials = data.trials[keep].reset_index(drop=True)
    a = analyze(data, FAST)
    (t,) = a.tradeoffs
    e = next(e for e in t.effects if e.level == 250)
    assert re.fullmatch(
        r"resnet50-cifar10: power_cap_w=250 saved \d+\.\d\d % total energy "
        r"\(GPU \+ CPU\) for \d+\.\d\d % more time against power_cap_w=300 "
        r"\(gpus=1, precision=fp32\) \(95 % CI of the total energy \(GPU \+ CPU\) "
        r"change [-+]\d+\.\d\d % to [-+]\d+\.\d\d %, of the time change "
        r"[-+]\d+\.\d\d % to [-+]\d+\.\d\d %\)\.",
        e.headline,
    ), e.headline
    data.trials = data.trials[data.trials["repetition"] < 2]
    a = analyze(data, FAST)
    (t,) = a.tradeoffs
    need = stats.MIN_N_INTERVAL["pct_change_of_medians"]
    assert not t.headlines and all(f"at least {need} valid trials" in e.reason for e in t.effects)


def test_windowed_workloads_trade_energy_per_token_against_time_per_token():
    data = make_report_data(kinds=("tinylm",), n_rep=5, failures=False)
    t = data.trials  # relabel two of the paths as a precision factor: amp and fp32
    t = t[t["factors"].map(lambda f: f["path"] != "external-go")].copy()
    t["factors"] = [{"precision": "amp" if "rust" in f["path"] else "fp32", "mode": f["mode"]} for f in t["factors"]]
    t["variant"] = [f"{w}[precision={f['precision']}]" for w, f in zip(t["workload"], t["factors"], strict=True)]
    data.trials = t.reset_index(drop=True)
    a = analyze(data, FAST)
    trade = {x.workload: x for x in a.tradeoffs}
    x = trade["tinylm-infer"]
    assert (x.energy_metric, x.time_metric) == ("j_per_token", "s_per_token")
    assert x.baseline.group.factors["precision"] == "fp32"
    g = x.configs[0].group
    used = a.trials[(a.trials["variant"] == g.variant) & a.trials["used"]]
    assert np.allclose(np.sort(g.known("s_per_token")), np.sort((used["duration_s"] / used["tokens"]).to_numpy()))
    assert any("time per token" in h for h in a.headlines)


def test_report_has_the_tradeoff_section_plot_and_front_table(measured_report):
    _, paths = measured_report
    html = paths.html.read_text(encoding="utf-8")
    sec = html.split('<section id="tradeoff">')[1].split("</section>")[0]
    assert 'id="fig-pareto_resnet50_cifar10"' in sec and "Thick grey line: the Pareto front" in sec
    assert '<table class="front">' in sec and "baseline" in sec
    md = paths.markdown.read_text(encoding="utf-8")
    assert "## Energy-time trade-off" in md and "| power_cap_w=250 vs 300 |" in md
    assert re.search(
        r"- resnet50-cifar10: power_cap_w=250 against power_cap_w=300 saved "
        r"[\d.]+(-[\d.]+)? % total energy \(GPU \+ CPU\) for",
        md,
    )
