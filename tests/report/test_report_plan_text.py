"""Plan text is text in every output (cases C20, C21 of round 3): factor values that a
spreadsheet would evaluate (``=HYPERLINK(...)``, ``@SUM(1+1)``), that matplotlib would parse
as mathtext (``$x^$`` made the report fail; ``cost $5 or $6`` was drawn as math), or that
would end a Markdown table cell or open HTML (``a|b``, ``<b>``) reach every CSV, the
Markdown and the plots as the literal text."""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import pandas as pd
import pytest
from synthetic import _trial_rows, make_report_data

from gcbench.report.analysis import ReportSettings
from gcbench.report.fmt import FORMULA_PREFIXES, spreadsheet_text

LEVELS = [
    '=HYPERLINK("http://evil.example/","open me")',  # C20
    "@SUM(1+1)",  # C20
    "+cmd|' /C calc'!A0",  # another formula start (OWASP's DDE example)
    "-2+3",  # another: a formula that reads as arithmetic, not as a number
    "$x^$",  # C21: malformed mathtext
    "cost $5 or $6",  # well-formed mathtext, drawn as math before
    "a|b <b>x</b>",  # a Markdown cell separator and HTML
    "plain",
]


def _data():
    rng = np.random.default_rng(7)
    rows = _trial_rows(
        rng,
        workload="flags",
        kind="noop",
        factors_list=[{"note": v} for v in LEVELS],
        n_rep=6,
        simulated=True,
        metric_fn=lambda r, f: dict(duration_s=1.0 + abs(r.normal(0, 0.01)), gpu_energy_j=100 + r.normal(0, 1)),
    )
    base = make_report_data(kinds=("noop",), n_rep=2, failures=False, simulated=True, plan_name="k01-plan-text")
    plan = dict(base.plan, report={"baseline": {"note": "plain"}})
    return dataclasses.replace(base, trials=pd.DataFrame(rows), plan=plan)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from gcbench.report import write_report

    data = _data()
    out = tmp_path_factory.mktemp("plan-text") / data.run_id
    return write_report(data, out, settings=ReportSettings.from_plan(data.plan, n_resamples=300))


def test_no_csv_cell_starts_a_formula_and_the_text_is_kept(report):
    cells = []
    for path in report.csv.values():
        with path.open(newline="", encoding="utf-8") as f:
            for row in csv.reader(f):
                cells += row
    live = [c for c in cells if c.startswith(FORMULA_PREFIXES) and spreadsheet_text(c) != c]
    assert not live, f"cells a spreadsheet evaluates: {live[:5]}"
    comparisons = pd.read_csv(report.csv["comparisons"], dtype=str, keep_default_na=False)
    shown = set(comparisons["treatment_level"]) | set(comparisons["baseline_level"])
    for level in LEVELS:
        assert (("'" + level) if level.startswith(FORMULA_PREFIXES) else level) in shown


def test_numbers_stay_numbers_in_csv():
    assert spreadsheet_text("-1.5") == "-1.5" and spreadsheet_text(-3.0) == -3.0
    assert spreadsheet_text("+7") == "+7" and spreadsheet_text("-O2") == "'-O2"


def test_dollar_signs_in_plan_text_do_not_stop_the_report_and_plots_are_drawn(report):
    assert report.html.exists() and report.pngs
    assert any(p.name.startswith("metric_flags") for p in report.pngs)


def test_plot_labels_are_drawn_literally():
    """The plotting functions run with mathtext off: a label with ``$`` is one literal Text."""
    import matplotlib

    from gcbench.report.render.plots import literal_text

    @literal_text
    def label_parses_math() -> bool:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots()
        try:
            ax.set_xticks([0], labels=["cost $5 or $6"])
            fig.canvas.draw()
            return ax.get_xticklabels()[0]._parse_math
        finally:
            plt.close(fig)

    matplotlib.use("Agg")
    assert label_parses_math() is False


def test_markdown_keeps_plan_text_inside_its_table_cell(report):
    md = report.markdown.read_text(encoding="utf-8")
    assert "a\\|b &lt;b>x&lt;/b>" in md
    assert "<b>x</b>" not in md
    html = report.html.read_text(encoding="utf-8")
    assert "a|b &lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html


def test_two_workload_names_get_two_plot_files(tmp_path):
    """``a-b`` and ``a_b`` are two valid workload names; their plots were both
    ``metric_a_b.png``, so the second replaced the first (round-3 kind C19)."""
    from gcbench.report import write_report
    from gcbench.report.render.plots import _slug

    rng = np.random.default_rng(3)
    rows = []
    for name, energy_j in (("a-b", 100.0), ("a_b", 200.0)):
        rows += _trial_rows(
            rng,
            workload=name,
            kind="noop",
            factors_list=[{"note": "x"}, {"note": "y"}],
            n_rep=3,
            simulated=True,
            metric_fn=lambda r, f, e=energy_j: dict(duration_s=1.0, gpu_energy_j=e + r.normal(0, 1)),
        )
    base = make_report_data(kinds=("noop",), n_rep=2, failures=False, simulated=True, plan_name="k01-two-names")
    data = dataclasses.replace(base, trials=pd.DataFrame(rows))
    paths = write_report(data, tmp_path / "r", settings=ReportSettings.from_plan(data.plan, n_resamples=200))
    metric_pngs = sorted(p.name for p in paths.pngs if p.name.startswith("metric_"))
    assert len(metric_pngs) == len(set(metric_pngs)) == 2, metric_pngs
    assert _slug("a-b") == "a_b" and _slug("a_b").startswith("a_b~") and _slug("tinylm-infer") == "tinylm_infer"
    md = paths.markdown.read_text(encoding="utf-8")
    assert all(f"]({name})" in md for name in metric_pngs)


def test_a_carriage_return_in_plan_text_stays_inside_its_csv_cell(tmp_path):
    """A level with a carriage return (``\\r=1``) was written unquoted with "\\n" line ends: a
    reader (csv, a spreadsheet) ended the row at the ``\\r`` and ``=1]`` began a cell of its
    own, a live formula and a shifted row (round-3 kind C20)."""
    from gcbench.report import write_report

    rng = np.random.default_rng(5)
    rows = _trial_rows(
        rng,
        workload="flags",
        kind="noop",
        factors_list=[{"note": v} for v in ("plain", "\r=1", "a\nb")],
        n_rep=3,
        simulated=True,
        metric_fn=lambda r, f: dict(duration_s=1.0, gpu_energy_j=100 + r.normal(0, 1)),
    )
    base = make_report_data(kinds=("noop",), n_rep=2, failures=False, simulated=True, plan_name="k01-cr")
    plan = dict(base.plan, report={"baseline": {"note": "plain"}})
    data = dataclasses.replace(base, trials=pd.DataFrame(rows), plan=plan)
    paths = write_report(data, tmp_path / "r", settings=ReportSettings.from_plan(data.plan, n_resamples=200))
    for key, path in paths.csv.items():
        with path.open(newline="", encoding="utf-8") as f:
            table = list(csv.reader(f))
        assert {len(r) for r in table} == {len(table[0])}, key  # no row cut in two
        cells = [c for r in table for c in r]
        assert not [c for c in cells if c.startswith(FORMULA_PREFIXES) and spreadsheet_text(c) != c], key
    groups = pd.read_csv(paths.csv["groups"], dtype=str, keep_default_na=False)
    assert "flags[note=\r=1]" in set(groups["variant"]) and "flags[note=a\nb]" in set(groups["variant"])


def test_a_line_break_in_plan_text_does_not_cut_a_markdown_table_row():
    """``a\\nb`` in a factor value ended the report.md table row in the middle of its first
    cell (round-3 kind C21, Markdown): a line break is shown as a space."""
    from gcbench.report.fmt import markdown_text, md_escape

    assert markdown_text("flags[note=a\nb\r\nc\rd|e]") == "flags[note=a b c d\\|e]"
    assert md_escape("x\ny*") == "x y\\*"
    assert markdown_text(3.5) == 3.5
