"""What happened to a run as a whole (interrupted; nothing to run) is at the top of its
report, HTML and Markdown, and in report.json."""

from __future__ import annotations

import dataclasses
import json

from synthetic import make_report_data

FAST = dict(n_resamples=500)  # few resamples: the notes, not the statistics, are under test

NOTE = "Interrupted by SIGINT (Ctrl-C) after 12 of 18 trials; running it again does the 6 missing ones."


def test_run_notes_open_the_report(tmp_path):
    from gcbench.report import write_report
    from gcbench.report.analysis import ReportSettings

    data = dataclasses.replace(make_report_data(kinds=("noop",), n_rep=3), notes=[NOTE])
    paths = write_report(data, tmp_path / "r", settings=ReportSettings.from_plan(data.plan, **FAST))
    html = paths.html.read_text()
    assert f'<div class="run-note">{NOTE}</div>' in html
    assert html.index(NOTE) < html.index("</header>")
    md = paths.markdown.read_text()
    assert f"> **{NOTE}**" in md and md.index(NOTE) < md.index("## ")
    assert json.loads(paths.summary_json.read_text())["notes"] == [NOTE]


def test_a_report_without_notes_has_none(tmp_path):
    from gcbench.report import write_report
    from gcbench.report.analysis import ReportSettings

    data = make_report_data(kinds=("noop",), n_rep=3)
    paths = write_report(data, tmp_path / "r", settings=ReportSettings.from_plan(data.plan, **FAST))
    assert 'run-note">' not in paths.html.read_text() and "> **" not in paths.markdown.read_text()
