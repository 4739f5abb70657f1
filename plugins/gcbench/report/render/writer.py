"""Write one report: HTML (self-contained), Markdown with PNGs beside it, CSV, JSON.

    from gcbench.report import write_report
    paths = write_report(data, Path("reports") / data.plan_name / data.run_id)

Layout of ``out_dir``::

    report.html        everything, plots embedded as base64 PNG
    report.md          the same text; links the PNGs below
    *.png              one file per figure
    trials.csv         one row per trial; gpu_energy_source (simulated | nvml | nvidia-smi |
                       unavailable) and simulated_columns (the columns of that row whose
                       values come from the simulated device, ';'-separated; empty when
                       none) label the figures per column
    groups.csv         one row per group and metric; data_source: SIMULATED when that
                       metric comes from simulated GPU energy, else measured
    comparisons.csv    one row per comparison and metric; data_source as in groups.csv
    tradeoff.csv       one row per configuration of each energy-time trade-off (energy,
                       time, changes against the baseline); data_source as in groups.csv
    paper.md/.tex      with paper=True: the study's headline tables (gcbench.report.render.paper)
    report.json        summary for the Airflow view (headlines, counts, simulated)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from gcbench.report.analysis import analyze
from gcbench.report.analysis.settings import ReportSettings
from gcbench.report.data import ReportData, ReportPaths
from gcbench.report.fmt import markdown_text, spreadsheet_text
from gcbench.report.render.context import _context
from gcbench.report.render.exports import comparisons_frame, groups_frame, tradeoff_frame, trials_frame
from gcbench.report.render.plots import make_plots

TEMPLATES = Path(__file__).with_name("templates")


def _env(markdown: bool = False):
    """The templates' Jinja environment: HTML autoescaped; for Markdown every printed value
    passes :func:`gcbench.report.fmt.markdown_text` (plan text stays text)."""
    import jinja2

    from gcbench.report.fmt import md_escape

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(["html", "html.j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
        finalize=markdown_text if markdown else None,
    )
    env.filters["md"] = md_escape  # every Markdown special character of plan text escaped
    return env


def _clean_json(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def write_report(
    data: ReportData, out_dir: Path, *, settings: ReportSettings | None = None, paper: bool = False
) -> ReportPaths:
    """Analyze ``data`` and write the report files into ``out_dir`` (created).

    Args:
        data: the run's trials, samples and windows (see :class:`ReportData`).
        out_dir: the report folder, conventionally ``reports/<plan>/<run id>/``
            (:func:`gcbench.web.app.report_dir`).
        settings: overrides of the plan-derived settings (tests use fewer resamples).
        paper: also write the study's headline tables, ``paper.md`` and ``paper.tex``
            (:mod:`gcbench.report.render.paper`).

    Returns:
        The paths written (:class:`ReportPaths`).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    a = analyze(data, settings)
    plots = make_plots(a)
    ctx = _context(a, plots)
    env = _env()
    html = out_dir / "report.html"
    html.write_text(env.get_template("report.html.j2").render(**ctx), encoding="utf-8")
    md = out_dir / "report.md"
    md.write_text(_env(markdown=True).get_template("report.md.j2").render(**ctx), encoding="utf-8")
    pngs = []
    for p in plots:
        path = out_dir / f"{p.name}.png"
        path.write_bytes(p.png)
        pngs.append(path)
    csv = {
        "trials": out_dir / "trials.csv",
        "groups": out_dir / "groups.csv",
        "comparisons": out_dir / "comparisons.csv",
        "tradeoff": out_dir / "tradeoff.csv",
    }
    for key, frame in (
        ("trials", trials_frame(a)),
        ("groups", groups_frame(a)),
        ("comparisons", comparisons_frame(a)),
        ("tradeoff", tradeoff_frame(a)),
    ):
        # plan text is text: no cell a spreadsheet would evaluate as a formula (case C20).
        # RFC 4180 line ends: the csv module quotes a cell holding any character of the line
        # terminator, so a carriage return inside plan text (``note=\r=1``) is quoted; with
        # "\n" it was written bare, a reader ended the row there and the rest (``=1]``)
        # began a cell of its own
        frame.map(spreadsheet_text).to_csv(csv[key], index=False, lineterminator="\r\n")
    summary = dict(
        plan_name=data.plan_name,
        run_id=data.run_id,
        logical_date=data.logical_date,
        title=ctx["title"],
        generated_at=ctx["generated_at"],
        simulated=a.simulated,
        counts=a.measurement.counts,
        headlines=a.headlines,
        notes=ctx["run_notes"],
        co2e_total={k: _clean_json(v) for k, v in a.co2e_total.items()},
        files=dict(
            html=html.name, markdown=md.name, csv={k: v.name for k, v in csv.items()}, png=[p.name for p in pngs]
        ),
    )
    paper_md = paper_tex = None
    if paper:
        from gcbench.report.render.paper import write_paper

        paper_md, paper_tex = write_paper(a, out_dir)
        summary["files"]["paper"] = [paper_md.name, paper_tex.name]
    summary_json = out_dir / "report.json"
    summary_json.write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
    return ReportPaths(
        out_dir=out_dir,
        html=html,
        markdown=md,
        csv_dir=out_dir,
        csv=csv,
        pngs=pngs,
        summary_json=summary_json,
        paper_md=paper_md,
        paper_tex=paper_tex,
    )
