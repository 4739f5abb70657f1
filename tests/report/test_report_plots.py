"""The figures: every trial a dot over its group's median and CI (no bars), legends
outside the data, shaded windows under the traces, captions that describe only what is
drawn, axes in scaled units. Data: SYNTHETIC (tests/report/synthetic.py)."""

from __future__ import annotations

import numpy as np
import pytest
from synthetic import make_report_data

from gcbench import stats
from gcbench.report.analysis import ReportSettings, analyze
from gcbench.report.render import plots

FAST = ReportSettings(n_resamples=300)


@pytest.fixture(scope="module")
def measured():
    return analyze(make_report_data(kinds=("tinylm", "h2d", "resnet_cifar"), n_rep=6), FAST)


@pytest.fixture(scope="module")
def measured_plots(measured):
    return {p.name: p for p in plots.make_plots(measured)}


def _dots(ax) -> np.ndarray:
    ys = [line.get_ydata() for line in ax.get_lines() if line.get_marker() == "o"]
    return np.concatenate(ys) if ys else np.array([])


def _extent(artist, renderer):
    return artist.get_window_extent(renderer)


def test_every_valid_trial_is_a_dot_and_no_bar_is_drawn(measured, measured_plots):
    from matplotlib.container import BarContainer

    p = measured_plots["metric_tinylm_infer"]
    ax_j, ax_t = p.figure.axes[:2]
    groups = [g for g in measured.groups if g.workload == "tinylm-infer"]
    for ax, metric, scale in ((ax_j, "j_per_token", 1e3), (ax_t, "tokens_per_s", 1.0)):
        expected = np.concatenate([g.known(metric) for g in groups]) * scale
        assert np.allclose(np.sort(_dots(ax)), np.sort(expected))
        assert not any(isinstance(c, BarContainer) for c in ax.containers)
    assert ax_j.get_ylabel() == "GPU J/token (mJ/token)"
    for p in measured_plots.values():
        for ax in p.figure.axes:
            assert not any(isinstance(c, BarContainer) for c in ax.containers), p.name


def test_median_ci_and_pooled_drawn_over_the_dots(measured, measured_plots):
    p = measured_plots["metric_h2d"]
    ax = p.figure.axes[0]
    g = next(g for g in measured.groups if g.workload == "h2d")
    s, pooled = g.summaries["gpu_j_per_gb"], g.pooled["gpu_j_per_gb"]
    medians = [line.get_ydata()[0] for line in ax.get_lines() if line.get_marker() == "_"]
    diamonds = [line.get_ydata()[0] for line in ax.get_lines() if line.get_marker() == "D"]
    assert s.median in medians and pooled.pooled in diamonds  # J/GB stays in J/GB
    assert "Black bar with whiskers: the median and its 95 % distribution-free CI (order statistics)" in p.caption
    assert "Orange diamond: the pooled estimate (Σ GPU energy / Σ GB" in p.caption


def test_groups_under_three_trials_get_dots_only_and_the_caption_says_so():
    data = make_report_data(kinds=("tinylm",), n_rep=2, failures=False)
    a = analyze(data, FAST)
    p = next(p for p in plots.make_plots(a) if p.name == "metric_tinylm_infer")
    ax = p.figure.axes[0]
    assert len(_dots(ax)) == 6
    assert not [line for line in ax.get_lines() if line.get_marker() in ("_", "D")]
    assert (
        p.caption.count(f"No median or CI where a group has fewer than {stats.MIN_N_SUMMARY} valid trials") == 1
    )  # once for both panels
    assert "Black bar" not in p.caption and "diamond" not in p.caption


def test_legends_sit_outside_every_axes(measured_plots):
    names = ["power_trial", "metric_tinylm_infer", "pareto_resnet50_cifar10", "co2e", "energy_h2d"]
    for name in names:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        fig = measured_plots[name].figure
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)  # the layout as saved
        assert all(ax.get_legend() is None for ax in fig.axes), name
        assert fig.legends, name
        for legend in fig.legends:
            box = _extent(legend, renderer)
            for ax in fig.axes:
                assert not box.overlaps(_extent(ax, renderer)), name


def test_window_shading_lies_under_the_power_traces(measured_plots):
    from matplotlib.patches import Polygon, Rectangle

    ax = measured_plots["power_trial"].figure.axes[0]
    spans = [p for p in ax.patches if isinstance(p, (Polygon, Rectangle))]
    traces = [line for line in ax.get_lines() if len(line.get_xdata()) > 2]
    assert spans and len(traces) == 2
    assert max(s.get_zorder() for s in spans) < min(t.get_zorder() for t in traces)
    assert all(s.get_alpha() <= 0.25 for s in spans)
    colors = {t.get_color() for t in traces}
    assert not colors & {plots.WINDOW_COLORS["main"], plots.WINDOW_COLORS["other"]}


def test_captions_describe_only_what_is_drawn(measured, measured_plots):
    power = measured_plots["power_trial"].caption
    assert "Light blue shading between dashed lines: the measured window" in power
    assert "Grey shading: the warmup phase" in power  # synthetic trials have a warmup window
    co2e = measured_plots["co2e"].caption
    assert "whisker" not in co2e.lower() and "ring" not in co2e.lower()
    assert "Pale green bar: the median's CO2e at 0.1 to 0.3 kgCO2e/kWh" in co2e
    # tinylm-infer's first group has an invalid trial (synthetic failures), h2d has none
    assert "Red crosses: invalid trials" in measured_plots["metric_tinylm_infer"].caption
    assert "Red crosses" not in measured_plots["metric_h2d"].caption
    clean = analyze(make_report_data(kinds=("tinylm",), n_rep=4, failures=False), FAST)
    cap = next(p for p in plots.make_plots(clean) if p.name == "metric_tinylm_infer").caption
    assert "Red crosses" not in cap and "Grey dots" not in cap


def test_one_panel_per_metric_and_no_duplicate_energy_figure(measured_plots):
    assert "energy_resnet50_cifar10" not in measured_plots  # GPU energy is its primary panel
    assert len(measured_plots["metric_resnet50_cifar10"].figure.axes) == 2
    assert "energy_tinylm_infer" in measured_plots


def test_co2e_title_speaks_of_a_band_only_when_one_is_drawn(measured_plots):
    banded = measured_plots["co2e"]
    assert banded.title == "CO2e per group with sensitivity band"
    assert banded.figure.axes[0].get_title() == "CO2e per group with sensitivity band"
    assert banded.figure.axes[0].collections  # the pale green bars
    small = analyze(make_report_data(kinds=("tinylm",), n_rep=2, failures=False), FAST)
    p = next(p for p in plots.make_plots(small) if p.name == "co2e")
    assert p.title == "CO2e per group" and p.figure.axes[0].get_title() == "CO2e per group"
    assert not p.figure.axes[0].collections and "Pale green" not in p.caption
    assert "band" not in p.title
    # each group without a CI named once, by its variant label (which begins with its workload)
    variants = sorted(set(small.trials["variant"]))
    assert f"than {stats.MIN_N_SUMMARY} valid trials: " in p.caption
    for v in variants:
        assert p.caption.count(v) == 1 and f"tinylm-infer: {v}" not in p.caption


def test_grey_means_inconclusive_for_the_reasons_the_groups_have():
    data = make_report_data(kinds=("tinylm",), n_rep=2, failures=False)
    t = data.trials
    apart = t["variant"] == "tinylm-infer[mode=infer,path=torch]"
    flag = (
        "twins disagree: the two valid repetitions ran at 70 and 1 steps/s (70.0x apart, limit 2x); "
        "the group is inconclusive"
    )
    t.loc[apart, "flags"] = t.loc[apart, "flags"].map(lambda f: list(f) + [flag])
    p = next(p for p in plots.make_plots(analyze(data, FAST)) if p.name == "metric_tinylm_infer")
    assert (
        "Grey dots: inconclusive groups (two valid repetitions too far apart in throughput; each group's "
        "reason is in its table), not tested."
    ) in p.caption
    assert "fewer than 2 valid repetitions" not in p.caption
    assert "inconclusive (reason in the table)" in [t.get_text() for t in p.figure.legends[0].get_texts()]
    # one valid trial left in a group: both reasons, each where it applies
    t.loc[t.index[(t["variant"] == "tinylm-infer[mode=infer,path=external-go]")][0], "valid"] = False
    p = next(p for p in plots.make_plots(analyze(data, FAST)) if p.name == "metric_tinylm_infer")
    assert (
        "Grey dots: inconclusive groups (fewer than 2 valid repetitions or two valid repetitions too far "
        "apart in throughput; each group's reason is in its table), not tested."
    ) in p.caption


def test_a_level_not_in_effect_is_marked_on_the_axis():
    data = make_report_data(kinds=("h2d",), n_rep=3, failures=False)
    data.trials["settings_not_in_effect"] = [
        {"memory": "no CUDA device: pinned memory unavailable"} if f["memory"] == "pinned" else {}
        for f in data.trials["factors"]
    ]
    p = next(p for p in plots.make_plots(analyze(data, FAST)) if p.name == "metric_h2d")
    ticks = [t.get_text() for t in p.figure.axes[0].get_xticklabels()]
    assert "memory=pinned (not in effect), size_mib=64" in ticks and "memory=pageable, size_mib=64" in ticks
    assert 'A label marked "(not in effect)": that requested level did not run as asked' in p.caption
