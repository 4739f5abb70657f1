"""The HTML and Markdown reports: every section, labels, embedded plots, lists."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from gcbench import stats

SECTIONS = ("headlines", "groups", "comparisons", "figures", "co2e", "measurement", "excluded", "trials", "statistics")


def test_html_has_every_section_and_the_title(measured_report):
    data, paths = measured_report
    html = paths.html.read_text(encoding="utf-8")
    for s in SECTIONS:
        assert f'<section id="{s}">' in html, s
    assert f"GC-Bench report: {data.plan_name}" in html
    assert "How this was measured" in html
    assert data.run_id in html


def test_html_is_self_contained_with_every_plot_embedded(measured_report):
    _, paths = measured_report
    html = paths.html.read_text(encoding="utf-8")
    assert len(re.findall(r'src="data:image/png;base64,', html)) == len(paths.pngs)
    assert not re.search(r'(src|href)="https?://', html)
    names = {p.stem for p in paths.pngs}
    assert {"power_trial", "co2e", "trend", "pareto_resnet50_cifar10"} <= names
    assert any(n.startswith("energy_") for n in names) and any(n.startswith("metric_") for n in names)
    for p in paths.pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_headlines_in_the_studies_form_with_ci_and_significance(measured_report):
    _, paths = measured_report
    html = paths.html.read_text(encoding="utf-8")
    pattern = (
        r"path=external-go raised GPU J/token by \d+\.\d\d % \(95 % CI [-+]\d+\.\d\d % to "
        r"[-+]\d+\.\d\d %; p [=<] [\d.]+, significant\) against path=torch"
    )
    nsig = (
        r"no significant difference in GPU J/token between path=external-go and "
        r"path=torch \(change [-+]\d+\.\d\d %, 95 % CI [-+]\d+\.\d\d % to "
        r"[-+]\d+\.\d\d %; p [=<] [\d.]+\)"
    )
    assert re.search(pattern, html) or re.search(nsig, html), "tinylm-train headline missing"
    assert (
        re.search(r"memory=pinned raised bandwidth by [\d.]+ % \([\d.]+x\)", html)
        or "no significant difference in bandwidth between memory=pinned" in html
    )
    assert (
        "power_cap_w=250 cut GPU energy" in html
        or "no significant difference in GPU energy between power_cap_w=250" in html
    )


def test_small_groups_are_inconclusive_and_no_headline(simulated_report):
    _, paths = simulated_report
    html = paths.html.read_text(encoding="utf-8")
    # tinylm-infer path=torch keeps 1 valid of 5 trials (invalid, failed, skipped, unvalidated)
    row = html.split("tinylm-infer[mode=infer,path=torch]")[1].split("</tr>")[0]
    assert 'class="inconclusive">inconclusive' in row
    comparisons = _section(html, "comparisons")
    rows = [r.split("</tr>")[0] for r in comparisons.split("<tr>")]
    torch_rows = [r for r in rows if "<td>path=external-go vs path=torch</td>" in r and "<td>tinylm-infer</td>" in r]
    assert torch_rows and all('class="inconclusive">inconclusive' in r for r in torch_rows)
    heads = _section(html, "headlines")
    assert "path=external-go against path=torch" not in heads
    need = stats.MIN_N_INTERVAL["pct_change_of_medians"]
    assert f"without a CI (fewer than {need} valid trials in a group) are not a headline" in heads


def test_excluded_trials_are_listed_with_reasons_and_errors(measured_report):
    data, paths = measured_report
    html = paths.html.read_text(encoding="utf-8")
    md = paths.markdown.read_text(encoding="utf-8")
    t = data.trials
    for text in (html, md):
        assert t.loc[0, "trial_id"] in text and "window_too_short; counter_decreased" in text
        assert "CUDA error: out of memory" in text
        assert "needs CAP_SYS_ADMIN" in text
        assert "Not validated (1)" in text


def test_measurement_section_names_methods_rates_and_validity(measured_report):
    _, paths = measured_report
    html = paths.html.read_text(encoding="utf-8")
    sec = html.split('<section id="measurement">')[1].split("</section>")[0]
    assert "nvml-counter-edge-corrected" in sec and "edge correction" in sec
    assert "rapl" in sec and "unavailable" in sec
    assert "observed rate (Hz)" in sec and ">20.0<" in sec  # synthetic samples at 20 Hz
    assert "energy counter update (ms)" in sec and re.search(r">100(\.0)?<", sec)
    assert "window_too_short" in sec and "throttled_thermal" in sec


def test_co2e_in_every_report_with_band(measured_report, simulated_report):
    for _, paths in (measured_report, simulated_report):
        html = paths.html.read_text(encoding="utf-8")
        assert re.search(
            r"[\d.,]+ [mk]?gCO2e at 0.2 kgCO2e/kWh \(sensitivity [\d.,]+ to "
            r"[\d.,]+ [mk]?gCO2e at 0.1-0.3 kgCO2e/kWh\)",
            html,
        )
        assert "0.1-0.3 kgCO2e/kWh" in html
        assert "co2e.png" in paths.markdown.read_text(encoding="utf-8")


def test_markdown_links_pngs_beside_it(measured_report):
    _, paths = measured_report
    md = paths.markdown.read_text(encoding="utf-8")
    for p in paths.pngs:
        assert f"]({p.name})" in md and p.parent == paths.markdown.parent
    assert "## How this was measured" in md and "## Headlines" in md


def test_simulated_report_is_labelled_everywhere(simulated_report):
    _, paths = simulated_report
    html = paths.html.read_text(encoding="utf-8")
    md = paths.markdown.read_text(encoding="utf-8")
    assert 'id="simulated-banner"' in html and "(SIMULATED)</title>" in html
    assert md.startswith("# GC-Bench report: synthetic-test (SIMULATED)")
    assert "> **SIMULATED:**" in md
    heads = html.split('<section id="headlines">')[1].split("</section>")[0]
    items = heads.split("<li>")[1:]
    energy = [li for li in items if "J/token" in li]
    assert energy and all("SIMULATED" in li for li in energy)
    for fig in html.split("<figure")[1:]:
        if "energy_" in fig or "co2e" in fig or "power_trial" in fig:
            assert "SIMULATED" in fig


def test_measured_report_carries_no_simulated_label(measured_report):
    _, paths = measured_report
    assert "SIMULATED" not in paths.html.read_text(encoding="utf-8")
    assert "SIMULATED" not in paths.markdown.read_text(encoding="utf-8")
    assert (pd.read_csv(paths.csv["trials"])["gpu_energy_source"] != "simulated").all()


def _section(html: str, name: str) -> str:
    return html.split(f'<section id="{name}">')[1].split("</section>")[0]


def test_simulated_report_labels_only_energy_figures(simulated_report):
    _, paths = simulated_report
    html = paths.html.read_text(encoding="utf-8")
    groups = _section(html, "groups")
    heads = re.findall(r"<th>(.*?)</th>", groups)
    for h in heads:
        if "throughput" in h or "time (s)" in h:
            assert "SIMULATED" not in h, h
        if "J/token" in h or "CO2e" in h or "GPU energy" in h:
            assert "SIMULATED" in h, h
    for li in _section(html, "headlines").split("<li>")[1:]:
        li = li.split("</li>")[0]
        assert ("SIMULATED" in li) == ("J/token" in li), li
    assert "SIMULATED data, not a measurement" not in html.split('id="fig-metric_noop"')[1].split("</figure>")[0]


def test_simulated_model_edge_correction_and_sampling_are_stated(simulated_report):
    _, paths = simulated_report
    sec = _section(paths.html.read_text(encoding="utf-8"), "measurement")
    model = sec.split('id="simulated-model"')[1].split("</p>")[0]
    assert "60 W idle and 300 W while a measured window is open" in model
    assert "energy differences between variants only reflect differences in duration/throughput" in model
    edge = sec.split('id="edge-correction"')[1].split("</p>")[0]
    assert "did not apply" in edge and "simulated device" in edge
    assert "configured rate (Hz)" in sec and "observed rate (Hz)" in sec
    assert "– (model, not a sensor)" in sec and "power plot's trial" in sec


def test_measured_report_says_edge_correction_applied(measured_report):
    _, paths = measured_report
    sec = _section(paths.html.read_text(encoding="utf-8"), "measurement")
    edge = sec.split('id="edge-correction"')[1].split("</p>")[0]
    assert "Edge correction applied to" in edge and "nvml-counter-edge-corrected" in edge
    assert 'id="simulated-model"' not in sec


def test_power_plot_and_sampling_table_use_the_same_trial(simulated_report):
    _, paths = simulated_report
    html = paths.html.read_text(encoding="utf-8")
    sec = _section(html, "measurement")
    first = re.search(r"<td><code>([0-9a-f]+)</code><br><span class=\"small\">power plot", sec)
    assert first and f"Power samples of trial {first.group(1)}" in html


def test_unavailable_method_has_no_leftover_text():
    from gcbench.report.metrics import describe_method

    d = describe_method("unavailable: no RAPL powercap tree at /sys/class/powercap")
    assert "no description on file" not in d
    assert d.startswith("Not measured (no RAPL powercap tree at /sys/class/powercap)")


def test_groups_tables_have_no_duplicate_or_identical_columns(measured_report):
    _, paths = measured_report
    html = paths.html.read_text(encoding="utf-8")
    groups = _section(html, "groups")
    for table in groups.split("<table")[1:]:
        heads = re.findall(r"<th>(.*?)</th>", table.split("</tr>")[0])
        assert len(heads) == len(set(heads)), heads
        assert "CO2e band" not in table.split("</tr>")[0]
    assert "GPU-window J/token" not in html
    assert "GPU J/token = GPU energy of the main (measured) window / tokens" in groups
    assert "end-to-end J/token adds CPU energy and the external tokenization window" in groups


def test_no_comparison_message_names_inconclusive_groups():
    from synthetic import make_report_data

    from gcbench.report.analysis import ReportSettings, analyze
    from gcbench.report.render.context import _no_comparison_reason

    data = make_report_data(kinds=("tinylm",), n_rep=1, failures=False)
    a = analyze(data, ReportSettings(n_resamples=200))
    msg = _no_comparison_reason(a) if not a.headlines else ""
    assert not a.headlines or all("inconclusive" in h for h in a.headlines)
    data.trials = data.trials[data.trials["variant"].str.contains("torch")]
    data.trials["valid"] = False
    a = analyze(data, ReportSettings(n_resamples=200))
    msg = _no_comparison_reason(a)
    assert "inconclusive or empty" in msg and "0 valid of" in msg


def test_co2e_plot_axis_is_in_a_unit_scaled_for_its_values():
    from synthetic import make_report_data

    from gcbench.report.analysis import ReportSettings, analyze
    from gcbench.report.render.plots import plot_co2e

    data = make_report_data(kinds=("tinylm",), n_rep=3, failures=False)
    a = analyze(data, ReportSettings(n_resamples=200))
    p = plot_co2e(a)
    (ax,) = p.figure.axes
    # TinyLM trials here emit ~0.7-2.2 gCO2e each: grams, not 7e-04 kgCO2e
    assert ax.get_xlabel() == "CO2e per trial (gCO2e) at 0.2 kgCO2e/kWh"
    xs = np.concatenate([line.get_xdata() for line in ax.get_lines() if line.get_marker() == "o"])
    expected = a.trials.loc[a.trials["used"], "co2e_kg"].to_numpy() * 1e3
    assert np.allclose(np.sort(xs), np.sort(expected))
    assert "in gCO2e" in p.caption


def test_simulated_energy_total_is_labelled(simulated_report):
    _, paths = simulated_report
    heads = _section(paths.html.read_text(encoding="utf-8"), "headlines")
    assert '<span class="sim">SIMULATED</span> Total over valid trials:' in heads


def test_measurement_section_states_the_cross_check_rule_and_its_thresholds(measured_report):
    _, paths = measured_report
    md = paths.markdown.read_text(encoding="utf-8")
    html = paths.html.read_text(encoding="utf-8")
    section = md.split("### Cross-check of the energy counter")[1].split("###")[0]
    assert "1-s average power, integrated over the window shifted by its lag of 0.57 s" in section
    assert "0.175 s x the power step measured at each edge" in section
    assert "above 5 % flags the trial, above 15 % invalidates it" in section
    assert '<p id="cross-check">' in html and "above 15 % invalidates it" in html


def test_cross_check_statement_uses_the_plans_thresholds_and_counts_its_findings():
    from gcbench.report.analysis import cross_check_statement

    df = pd.DataFrame(
        {
            "gpu_method": ["nvml-counter-edge-corrected"] * 3 + ["nvidia-smi-power-integration"],
            "flags": [["gpu0: energy counter and 1-s average power differ by +7.00 % (...)"], [], [], []],
            "reasons": [
                [],
                ["gpu1: energy counter and 1-s average power differ by -43.00 % (...)"],
                ["window too short for the sensor: ..."],
                [],
            ],
        }
    )
    text = cross_check_statement(df, {"validation": {"cross_check_max_rel": 0.1}})  # the former name
    assert "above 5 % flags the trial, above 10 % invalidates it" in text
    assert (
        "This run: 3 trials with a counter (or the simulated device's model counter), 1 flagged and 1 invalid" in text
    )
