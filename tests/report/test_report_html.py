"""The HTML and Markdown reports: every section, labels, embedded plots, lists."""

from __future__ import annotations

import re

import pandas as pd

SECTIONS = ("headlines", "groups", "comparisons", "figures", "co2e", "measurement",
            "excluded", "trials", "statistics")


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
    pattern = (r"path=torch cut GPU J/token by \d+\.\d\d % \(95 % CI [-+]\d+\.\d\d % to "
               r"[-+]\d+\.\d\d %; p [=<] [\d.]+, (not )?significant\) against path=external-go")
    assert re.search(pattern, html), "tinylm-train headline missing"
    assert re.search(r"memory=pinned raised bandwidth by [\d.]+ % \([\d.]+x\)", html)
    assert "power_cap_w=250 cut GPU energy" in html


def test_small_groups_are_inconclusive(simulated_report):
    _, paths = simulated_report
    html = paths.html.read_text(encoding="utf-8")
    # tinylm-infer path=torch keeps 1 valid of 4 trials (invalid, failed, skipped)
    assert re.search(r"path=torch against path=external-go on GPU J/token is inconclusive "
                     r"\(1 and \d valid repetitions; at least 2 needed\)", html)
    row = html.split("tinylm-infer[mode=infer,path=torch]")[1].split("</tr>")[0]
    assert 'class="inconclusive">inconclusive' in row


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
    assert "sampling rate (Hz)" in sec and ">20.0<" in sec  # synthetic samples at 20 Hz
    assert "energy counter update (ms)" in sec and re.search(r">100(\.0)?<", sec)
    assert "window_too_short" in sec and "throttled_thermal" in sec


def test_co2e_in_every_report_with_band(measured_report, simulated_report):
    for _, paths in (measured_report, simulated_report):
        html = paths.html.read_text(encoding="utf-8")
        assert "kgCO2e at 0.2 kgCO2e/kWh (sensitivity" in html
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
    assert items and all("SIMULATED" in li for li in items)
    for fig in html.split("<figure")[1:]:
        assert "SIMULATED" in fig
    for name in ("trials", "groups", "comparisons"):
        df = pd.read_csv(paths.csv[name])
        assert df.columns[0] == "data_source" and (df["data_source"] == "SIMULATED").all()


def test_measured_report_carries_no_simulated_label(measured_report):
    _, paths = measured_report
    assert "SIMULATED" not in paths.html.read_text(encoding="utf-8")
    assert "SIMULATED" not in paths.markdown.read_text(encoding="utf-8")
    assert (pd.read_csv(paths.csv["trials"])["data_source"] == "measured").all()
