"""What storing a trial changed is shown where its numbers are read: the report's
"Stored with changes" list (Markdown and HTML) and trials.csv (``ingest_notes``,
``samples_dropped``), so a reader sees that rows were dropped or values nulled before
trusting a figure (store/ingest.py writes the notes; docs/measurement.md)."""

from __future__ import annotations

import pandas as pd
from synthetic import make_report_data

from gcbench.report import write_report
from gcbench.report.analysis import ReportSettings

NOTE_DROPPED = "samples.csv: 2 row(s) not stored (2 cut short (no newline))"
NOTE_EMPTY = "samples.csv: no samples (the sampler wrote nothing: stopped before its first row)"


def _report(tmp_path, notes: dict[int, list[str]], dropped: dict[int, int]):
    data = make_report_data(kinds=("h2d",), n_rep=3, failures=False)
    t = data.trials
    t["ingest_notes"] = [notes.get(i, []) for i in range(len(t))]
    t["samples_dropped"] = [dropped.get(i, 0) for i in range(len(t))]
    paths = write_report(data, tmp_path / "r", settings=ReportSettings.from_plan(data.plan, n_resamples=200))
    return data, paths


def test_trials_stored_with_changes_are_listed_with_their_notes(tmp_path):
    data, paths = _report(
        tmp_path, {1: [NOTE_DROPPED], 4: [NOTE_EMPTY, "result.json: error stored with U+FFFD"]}, {1: 2}
    )
    md = paths.markdown.read_text()
    html = paths.html.read_text()
    ids = data.trials["trial_id"].tolist()
    assert "### Stored with changes (2)" in md
    assert f"- `{ids[1]}` " in md and f": {NOTE_DROPPED}\n" in md
    assert f"{NOTE_EMPTY}; result.json: error stored with U+FFFD" in md
    assert 'id="stored-with-changes">Stored with changes (2)' in html and NOTE_EMPTY in html
    csv = pd.read_csv(paths.csv["trials"], keep_default_na=False)
    by_id = csv.set_index("trial_id")
    assert by_id.loc[ids[1], "ingest_notes"] == NOTE_DROPPED and by_id.loc[ids[1], "samples_dropped"] == 2
    assert by_id.loc[ids[0], "ingest_notes"] == "" and by_id.loc[ids[0], "samples_dropped"] == 0


def test_no_section_when_every_trial_was_stored_as_written(tmp_path):
    _, paths = _report(tmp_path, {}, {})
    assert "Stored with changes" not in paths.markdown.read_text()
    assert "Stored with changes" not in paths.html.read_text()
