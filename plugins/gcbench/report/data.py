"""The report's input and output shapes.

:class:`ReportData` is the contract between the store (which builds it from
PostgreSQL) and :func:`gcbench.report.write_report`. It is plain data: the trials as
one DataFrame, samples and windows fetched lazily per trial (a report plots only a
few trials' samples), so building it costs one query for the trials.

``trials`` has one row per trial with the columns of :data:`TRIAL_COLUMNS` and any of
the metric columns of :data:`gcbench.metrics.METRIC_COLUMNS` (float, NaN when unknown). Missing
optional columns are treated as unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas stays out of module level: the Airflow plugin imports us
    import pandas

TRIAL_COLUMNS = (
    "trial_id",
    "variant",
    "workload",
    "kind",
    "repetition",
    "status",
    "error",
    "valid",
    "reasons",
    "flags",
    "factors",
    "gpu_method",
    "gpu_source",
    "cpu_method",
    "simulated",
    "settings_not_in_effect",
)
"""Descriptive columns of ``ReportData.trials``.

* ``status``: ``ok`` | ``failed`` | ``skipped``; ``error``: message of a failed or
  skipped trial (str or None).
* ``valid``: True/False after validation, None when not validated (then excluded).
* ``reasons``: list of failed validation rules; ``flags``: findings that do not
  invalidate (``throttled``, ``outlier_mad`` ...).
* ``factors``: dict of the variant's factor values, e.g. ``{"path": "torch"}``.
* ``gpu_method``/``cpu_method``: how energy was obtained (see
  ``gcbench.energy.base.DeviceEnergy.method``); ``gpu_source``: ``nvml``,
  ``nvidia-smi``, ``simulated`` ...; ``simulated``: any figure from the simulated device.
* ``settings_not_in_effect``: ``{setting: reason}`` for each requested setting whose
  level did not run as asked (result.json, :func:`gcbench.workloads.effective`), e.g.
  ``{"memory": "no CUDA device: pinned memory unavailable, ..."}``; ``{}`` when all
  ran as asked; None when the trial did not record it (stored before GC-Bench recorded
  it, or failed before its workload returned). An optional ``settings`` column holds
  the requested settings (``{setting: value}``).
"""


@dataclass
class ReportData:
    """Everything one report needs about one DAG run of one plan.

    Attributes:
        plan_name: the plan's name.
        run_id: the Airflow DAG run id.
        logical_date: ISO 8601 logical date of the run, or None.
        plan: the plan as a plain dict; the report reads ``description``,
            ``carbon`` (``intensity_kg_per_kwh``, ``band`` [low, high]),
            ``validation.min_valid_repetitions`` and the optional ``report`` section
            (``baseline``: {factor: level}, ``compare``: [factor, ...]).
        trials: one row per trial (see :data:`TRIAL_COLUMNS`,
            :data:`gcbench.metrics.METRIC_COLUMNS`).
        samples: trial_id -> DataFrame with the columns of
            ``gcbench.energy.base.SAMPLE_COLUMNS``.
        windows: trial_id -> {"main": {"start_s": .., "end_s": ..}, other windows}.
        history: for nightly plans, earlier runs' figures: columns run_id,
            logical_date, variant, metric, value; None otherwise.
        notes: what happened to the run as a whole, shown at the report's top (the
            run was interrupted; it had nothing to run because every trial was
            already stored).
    """

    plan_name: str
    run_id: str
    logical_date: str | None
    plan: dict
    trials: pandas.DataFrame
    samples: Callable[[str], pandas.DataFrame]
    windows: Callable[[str], dict]
    history: pandas.DataFrame | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class ReportPaths:
    """Files written by :func:`gcbench.report.write_report`.

    Attributes:
        out_dir: the report folder (``reports/<plan>/<run id>/``).
        html: the self-contained HTML report (plots embedded).
        markdown: ``report.md``; its PNGs lie beside it.
        csv_dir: folder of ``trials.csv``, ``groups.csv``, ``comparisons.csv``.
        csv: the CSV files by name (``trials``, ``groups``, ``comparisons``).
        pngs: the plot files, in report order.
        summary_json: ``report.json``, the machine-readable summary (headlines,
            counts, simulated flag) the Airflow view lists.
        paper_md, paper_tex: the study's headline tables (``paper.md``, ``paper.tex``,
            a LaTeX booktabs fragment) when written with ``paper=True``, else None.
    """

    out_dir: Path
    html: Path
    markdown: Path
    csv_dir: Path
    csv: dict[str, Path] = field(default_factory=dict)
    pngs: list[Path] = field(default_factory=list)
    summary_json: Path | None = None
    paper_md: Path | None = None
    paper_tex: Path | None = None
