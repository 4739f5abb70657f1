"""The report's CO2e says which carbon-intensity source (and year) each figure used: a
place's own intensity and band, and for an hourly series each trial's own intensity, with
the trials that have none and why (issue 25)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from synthetic import make_report_data

FAST = dict(n_resamples=500)


def test_a_place_sets_the_reports_intensity_and_band():
    from gcbench.report.analysis import ReportSettings

    s = ReportSettings.from_plan({"carbon": {"place": "FRA", "band_factor": [0.5, 1.5]}})
    assert s.intensity_kg_per_kwh == 0.056039 and s.band == pytest.approx((0.0280195, 0.0840585))
    assert not s.per_trial_carbon


def test_an_hourly_series_report_uses_each_trials_intensity_and_names_the_source(tmp_path):
    from gcbench.report import write_report
    from gcbench.report.analysis import ReportSettings

    data = make_report_data(kinds=("h2d",), n_rep=3)  # trials with GPU energy
    trials = data.trials.copy()
    n = len(trials)
    intensity = np.linspace(0.1, 0.3, n)
    intensity[0] = np.nan  # the series did not cover this trial
    trials["carbon_intensity_kg_per_kwh"] = intensity
    trials["carbon_intensity_low_kg_per_kwh"] = intensity * 0.5
    trials["carbon_intensity_high_kg_per_kwh"] = intensity * 1.5
    trials["carbon_intensity_source"] = "hourly series grid-2026.csv (ENTSO-E, 2026)"
    trials["carbon_intensity_kind"] = "average"
    trials["co2e_reason"] = [
        "the series grid-2026.csv has no intensity for 2026-11-05T09:00:00+00:00" if i == 0 else None for i in range(n)
    ]
    plan = {**data.plan, "carbon": {"series": "grid-2026.csv", "series_source": "ENTSO-E, 2026"}}
    data = dataclasses.replace(data, trials=trials, plan=plan)
    settings = ReportSettings.from_plan(plan, **FAST)
    assert settings.per_trial_carbon
    paths = write_report(data, tmp_path / "r", settings=settings)
    sentence = (
        f"Carbon intensity: hourly series grid-2026.csv (ENTSO-E, 2026), average intensity ({n} trials). "
        "No CO2e for 1 trial: the series grid-2026.csv has no intensity for 2026-11-05T09:00:00+00:00 (energy kept)."
    )
    assert sentence in paths.markdown.read_text() and sentence in paths.html.read_text()
    import pandas as pd

    rows = pd.read_csv(paths.csv["trials"])
    kwh = rows["gpu_energy_j"] / 3.6e6  # the report's energy basis here: GPU energy only
    known = kwh.notna() & rows["carbon_intensity_kg_per_kwh"].notna()
    assert known.sum() >= n - 3
    assert rows["co2e_kg"][known].to_numpy() == pytest.approx(
        (kwh * rows["carbon_intensity_kg_per_kwh"])[known].to_numpy()
    )
    assert rows["co2e_kg"][~known].isna().all()  # no intensity (or no energy): no CO2e, never the plan's default


def test_an_hourly_series_report_quotes_the_energy_weighted_mean_intensity():
    from gcbench.report.analysis import ReportSettings, analyze

    data = make_report_data(kinds=("h2d",), n_rep=3)
    trials = data.trials.copy()
    intensity = np.where(np.arange(len(trials)) % 2 == 0, 0.1, 0.3)
    trials["carbon_intensity_kg_per_kwh"] = intensity
    trials["carbon_intensity_low_kg_per_kwh"] = intensity * 0.5
    trials["carbon_intensity_high_kg_per_kwh"] = intensity * 1.5
    plan = {**data.plan, "carbon": {"series": "grid-2026.csv"}}
    a = analyze(dataclasses.replace(data, trials=trials, plan=plan), ReportSettings.from_plan(plan, **FAST))
    kwh = trials["gpu_energy_j"] / 3.6e6
    known = kwh.notna()
    mean = float((kwh * intensity)[known].sum() / kwh[known].sum())
    assert 0.1 < mean < 0.3
    assert a.settings.intensity_kg_per_kwh == pytest.approx(mean)
    assert a.settings.band == pytest.approx((mean * 0.5, mean * 1.5))


@pytest.mark.parametrize(
    "series_name",
    ["grid|2026*x*<script>alert(1)</script>.csv", "a_b_[link](http://x)&amp;`code`~~s~~|.csv"],
)
def test_the_carbon_source_sentence_is_plan_text_escaped_in_markdown_and_html(tmp_path, series_name):
    """A series path or place from the plan is shown as written: no table cell, emphasis,
    link, code or raw HTML in report.md, and no markup in report.html."""
    import markupsafe

    from gcbench.report import write_report
    from gcbench.report.analysis import ReportSettings
    from gcbench.report.fmt import md_escape
    from gcbench.report.render.context import carbon_sources_sentence

    data = make_report_data(kinds=("h2d",), n_rep=3)
    trials = data.trials.copy()
    n = len(trials)
    trials["carbon_intensity_kg_per_kwh"] = 0.2
    trials["carbon_intensity_low_kg_per_kwh"] = 0.1
    trials["carbon_intensity_high_kg_per_kwh"] = 0.3
    trials["carbon_intensity_source"] = f"hourly series {series_name} (<b>grid</b>, 2026)"
    trials["carbon_intensity_kind"] = "average"
    trials["co2e_reason"] = [f"the series {series_name} has no intensity" if i == 0 else None for i in range(n)]
    plan = {**data.plan, "carbon": {"series": series_name}}
    data = dataclasses.replace(data, trials=trials, plan=plan)
    paths = write_report(data, tmp_path / "r", settings=ReportSettings.from_plan(plan, **FAST))
    sentence = carbon_sources_sentence(trials)
    assert series_name in sentence

    md = paths.markdown.read_text()
    assert md_escape(sentence) in md
    line = next(ln for ln in md.splitlines() if "Carbon intensity:" in ln)
    tail = line[line.index("Carbon intensity:") :]
    # with every backslash escape taken out, no Markdown special character of the plan text is left
    unescaped = re.sub(r"\\.", "", tail)
    assert not [c for c in "|*_[]<>`&~" if c in unescaped], unescaped
    assert "\\<script\\>" in tail or "<script>" not in series_name

    page = paths.html.read_text()
    assert str(markupsafe.escape(sentence)) in page
    assert "<script>alert" not in page and "<b>grid</b>" not in page


def test_md_escape_makes_markdown_specials_literal():
    from gcbench.report.fmt import md_escape

    assert md_escape("a|b*c_d<script>") == "a\\|b\\*c\\_d\\<script\\>"
    assert md_escape("[x](y) `z` &lt; ~~s~~ \\") == "\\[x\\](y) \\`z\\` \\&lt; \\~\\~s\\~\\~ \\\\"
    assert md_escape("grid-2026.csv (ENTSO-E, 2026)") == "grid-2026.csv (ENTSO-E, 2026)"
