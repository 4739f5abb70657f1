"""The report's tables as plain rows of text cells (no HTML, no Markdown): each workload's
groups table, the comparisons table and the energy-time trade-off tables. The writer's
templates and the paper tables (:mod:`gcbench.report.render.paper`) render them.

Rules for every number shown:

* units scaled for reading, one unit per column, written in the column head
  (:mod:`gcbench.report.scale`);
* a group with at least ``stats.MIN_N_SUMMARY`` valid trials shows ``median [low, high]``
  (the order-statistic interval of the median, where n allows one); a group with fewer shows each trial's value
  (``trials: a, b``), never a median, and the reason for the missing CI is stated once
  per table, not in every cell;
* a ratio (J/token, tokens/s, J/GB, GB/s) also shows the pooled estimator
  ``sum / sum`` over the same trials with its CI;
* unknown is an en dash, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gcbench import stats
from gcbench.report.analysis.core import Analysis
from gcbench.report.analysis.groups import Group
from gcbench.report.fmt import fmt_num
from gcbench.report.metrics import RATIOS, in_work_unit, info, is_simulated_metric, table_metrics
from gcbench.report.render.utilization import PERCENT, busy_note
from gcbench.report.scale import Unit, choose_unit

DASH = "–"


def fmt_in(v: float | None, unit: Unit, digits: int = 4) -> str:
    """``v`` (stored unit) in ``unit``, 4 significant digits; en dash when unknown."""
    return fmt_num(unit(v), digits)


def fmt_ci(lo: float | None, hi: float | None, unit: Unit) -> str:
    """``[lo, hi]`` in ``unit``, or "" without an interval."""
    if lo is None or hi is None:
        return ""
    return f"[{fmt_in(lo, unit)}, {fmt_in(hi, unit)}]"


def fmt_pct(v: float | None) -> str:
    """A signed percentage, ``-6.73 %``; en dash when unknown."""
    return DASH if v is None else f"{v:+.2f} %"


def fmt_pct_ci(c: stats.Comparison) -> str:
    """``[-8.10 %, -5.20 %]`` of a comparison, or "" without an interval."""
    if c.pct_ci_low is None or c.pct_ci_high is None:
        return ""
    return f"[{c.pct_ci_low:+.2f} %, {c.pct_ci_high:+.2f} %]"


@dataclass
class Cell:
    """One table cell: ``main`` (median, pooled value, or the trials' values), ``ci``
    (``[low, high]`` or ""), ``band`` (CO2e sensitivity band or "") and ``trials``
    (True when ``main`` lists trial values instead of a summary)."""

    main: str
    ci: str = ""
    band: str = ""
    trials: bool = False

    def text(self) -> str:
        """The cell on one line (Markdown, LaTeX)."""
        parts = [self.main]
        if self.ci:
            parts.append(self.ci)
        if self.band:
            parts.append(f"band {self.band}")
        return " ".join(parts)


def summary_cell(
    s: stats.GroupSummary | None, values: np.ndarray | None, unit: Unit, band: tuple[float, float] | None = None
) -> Cell:
    """A group's cell of one metric: the median and its CI (where its n allows one) from
    ``stats.MIN_N_SUMMARY`` trials on, else the trials' values (en dash when none is known)."""
    if s is None or s.n == 0:
        return Cell(DASH)
    if s.n < stats.MIN_N_SUMMARY:
        v = values[np.isfinite(values)] if values is not None else np.array([])
        return Cell("trials: " + ", ".join(fmt_in(float(x), unit) for x in v), trials=True)
    return Cell(fmt_in(s.median, unit), fmt_ci(s.ci_low, s.ci_high, unit), fmt_ci(*band, unit) if band else "")


def busy_cells(g: Group) -> list[str]:
    """A group's busy and idle share cells (median of its valid trials, or their values
    below the summary's minimum n; en dash when unknown)."""
    return [
        summary_cell(g.summaries.get(m), g.values.get(m), PERCENT).text() for m in ("gpu_busy_share", "gpu_idle_share")
    ]


def pooled_cell(p: stats.RatioSummary | None, unit: Unit) -> Cell:
    """A group's pooled ratio and its CI (the value alone below ``stats.MIN_N_INTERVAL``)."""
    if p is None or p.pooled is None:
        return Cell(DASH)
    return Cell(fmt_in(p.pooled, unit), fmt_ci(p.ci_low, p.ci_high, unit))


@dataclass
class Column:
    """A metric column: ``head`` (label and unit), ``sub`` (how summarised),
    ``simulated`` (derived from simulated GPU energy)."""

    metric: str
    head: str
    sub: str
    unit: Unit
    simulated: bool
    pooled: bool = False


@dataclass
class Table:
    """Rows of cells under columns, with notes stated once below the table."""

    columns: list[Column]
    rows: list[dict]
    notes: list[str] = field(default_factory=list)


def identical_columns(x: pd.Series, y: pd.Series) -> bool:
    """Two metric columns equal in every trial (NaN where the other is NaN), e.g. total
    energy and GPU energy when CPU energy is unknown."""
    a, b = x.to_numpy(dtype=float), y.to_numpy(dtype=float)
    if not np.isfinite(a).any():
        return False
    return bool(
        np.array_equal(np.isnan(a), np.isnan(b)) and np.allclose(a[~np.isnan(a)], b[~np.isnan(b)], rtol=1e-12, atol=0)
    )


def shown_metrics(a: Analysis, workload: str, kind: str, groups: list[Group]) -> tuple[list[str], list[str]]:
    """(metrics of a workload's table, notes on the columns left out).

    The kind's metrics, then the core columns (time, GPU energy, CPU energy, CO2e: always,
    an en dash where unknown), then the extras; each once. A metric whose values equal
    an earlier column's in every trial (``total_energy_j`` when CPU energy is unknown)
    is left out, with a note."""
    metrics = [m for m in table_metrics(kind) if m in groups[0].summaries]
    df = a.trials[a.trials["workload"] == workload]
    shown: list[str] = []
    notes: list[str] = []
    for m in metrics:
        same = next((k for k in shown if identical_columns(df[m], df[k])), None)
        if same is None:
            shown.append(m)
            continue
        why = " (CPU energy unknown)" if m == "total_energy_j" else ""
        notes.append(
            f"{info(m).label} equals {info(same).label} in every trial{why}, "
            f"so it is shown once (both are in groups.csv)."
        )
    return shown, notes


def column_unit(groups: list[Group], metric: str) -> Unit:
    """One unit for a metric's column, from every value it shows (trials, medians,
    pooled values, CIs)."""
    vals: list[float] = []
    for g in groups:
        vals += g.known(metric).tolist()
        p = g.pooled.get(metric)
        if p is not None and p.pooled is not None:
            vals.append(p.pooled)
    return choose_unit(info(metric, groups[0].work_unit if groups else None).unit, vals)


def _unknown_reason(a: Analysis, workload: str, metric: str) -> str:
    df = a.trials[(a.trials["workload"] == workload) & a.trials["used"]]
    if metric == "cpu_energy_j":
        why = sorted(
            {
                str(m).removeprefix("unavailable").lstrip(":; ").strip()
                for m in df["cpu_method"]
                if m and str(m).startswith("unavailable")
            }
        )
        why = [w for w in why if w]
        return f" ({'; '.join(why)})" if why else " (RAPL not readable)"
    return ""


def workload_table(a: Analysis, workload: str, kind: str, groups: list[Group]) -> Table:
    """The groups table of one workload (see the module docstring)."""
    metrics, notes = shown_metrics(a, workload, kind, groups)
    any_sim = any(g.simulated for g in groups)
    conf = round(a.settings.confidence * 100)
    cols: list[Column] = []
    work_unit = groups[0].work_unit if groups else None
    for m in metrics:
        mi = info(m, work_unit)
        unit = column_unit(groups, m)
        sim = any_sim and is_simulated_metric(m)
        head = f"{mi.label} ({unit.label})" if unit.label else mi.label
        cols.append(Column(m, head, f"median [{conf} % CI]", unit, sim))
        if m in RATIOS and any(m in g.pooled for g in groups):
            formula = in_work_unit(RATIOS[m].formula, work_unit)
            cols.append(Column(m, head, f"pooled {formula} [{conf} % CI]", unit, sim, pooled=True))
    rows = []
    small: dict[str, int] = {}
    no_ci: dict[str, dict[str, int]] = {}
    for g in groups:
        cells = []
        for c in cols:
            if c.pooled:
                cells.append(pooled_cell(g.pooled.get(c.metric), c.unit))
                continue
            s = g.summaries.get(c.metric)
            band = g.co2e_band if c.metric == "co2e_kg" else None
            cells.append(summary_cell(s, g.values.get(c.metric), c.unit, band))
            if s is not None and 0 < s.n < stats.MIN_N_SUMMARY:
                small[g.variant] = max(small.get(g.variant, 0), s.n)
            elif s is not None and s.n and s.ci_low is None and s.ci_reason:
                no_ci.setdefault(s.ci_reason, {})[g.variant] = s.n
        rows.append(
            dict(
                variant=g.variant,
                factors=", ".join(f"{k}={v}" for k, v in sorted(g.factors.items())),
                n_valid=g.n_valid,
                n_trials=g.n_trials,
                n_invalid=g.n_invalid,
                n_failed=g.n_failed + g.n_skipped,
                inconclusive=g.inconclusive,
                simulated=g.simulated,
                cells=cells,
                not_in_effect=[not_in_effect_mark(g, k) for k in g.not_in_effect],
                not_in_effect_text=list(g.not_in_effect.values()),
            )
        )
    marked = [g for g in groups if g.not_in_effect]
    if marked:
        factors = sorted({k for g in marked for k in g.not_in_effect if k in g.factors})
        notes.insert(
            0,
            "Requested settings not in effect: "
            + "; ".join(f"{g.variant}: {why}" for g in marked for why in g.not_in_effect.values())
            + "."
            + (
                f" These groups are not compared along {', '.join(factors)} (see Comparisons): "
                f"their work is not what the labels say."
                if factors
                else ""
            ),
        )
    contended = [g for g in groups if g.n_contended]
    if contended:
        notes.insert(0, contention_note(contended))
    empty = [g for g in groups if g.n_trials and not g.n_valid]
    if empty:
        names = ", ".join(f"{g.variant} (0 valid of {g.n_trials})" for g in empty)
        notes.insert(
            0,
            f"No value for groups without a valid trial: {names}; each trial's status and "
            f"the reason it is invalid are in the trials table.",
        )
    if small:
        names = ", ".join(f"{v} ({n} valid)" for v, n in small.items())
        notes.insert(
            0,
            f"No median and no CI for groups with fewer than {stats.MIN_N_SUMMARY} valid "
            f'trials: {names}. Their cells list each trial\'s value ("trials: ...")'
            + (" (pooled values of these groups are shown without a CI)." if any(c.pooled for c in cols) else "."),
        )
    for why, where in no_ci.items():
        names = ", ".join(f"{v} ({n} valid)" for v, n in where.items())
        notes.append(f"No CI ({why}): {names}; minimum n per interval: {stats.min_n_text()} (docs/statistics.md).")
    for c in cols:
        if not c.pooled and all(g.summaries.get(c.metric) is None or g.summaries[c.metric].n == 0 for g in groups):
            notes.append(
                f"{info(c.metric).label} is unknown in every trial"
                f"{_unknown_reason(a, workload, c.metric)}: shown as {DASH}, never 0."
            )
    if any(c.metric == "gpu_busy_share" for c in cols):
        busy_text = busy_note(groups)
        if busy_text:
            notes.append(busy_text)
    paired = [c.metric for c in cols if not c.pooled and c.metric in RATIOS]
    if any(c.pooled for c in cols):
        left = [
            f"{g.variant} ({g.summaries[paired[0]].n_excluded})"
            for g in groups
            if paired and g.summaries[paired[0]].n_excluded
        ]
        notes.append(
            "Ratios: the median of the per-trial ratios and the pooled estimate "
            "(sum over the group's trials of the numerator / sum of the denominator, "
            "its CI from resampling whole trials) come from the same valid trials"
            + (
                f"; trials where any ratio of the row was unknown are left out of all of them: {', '.join(left)}."
                if left
                else "."
            )
        )
    return Table(cols, rows, notes)


def not_in_effect_mark(g: Group, key: str) -> str:
    """The short mark of a group's setting not in effect: ``memory=pinned not in effect``."""
    value = g.factors.get(key)
    return f"{key}={value} not in effect" if key in g.factors else f"{key} not in effect"


def contention_note(contended: list[Group]) -> str:
    """The sentence under a groups table naming the groups whose valid trials include
    windows flagged for CPU contention: their figures include the time other processes
    took on the trials' CPUs (kept in the statistics: the plan only flags contention)."""
    which = ", ".join(f"{g.variant} ({g.n_contended} of {g.n_valid})" for g in contended)
    return (
        f"CPU contention: valid trials flagged because other processes used their CPUs, kept in these "
        f"figures: {which}. Their times and energies include that wait, so a difference between these "
        f"groups may be the host's, not the workload's; the trials table names each share. A plan's "
        f"validation.cpu_contention_invalid_share excludes such windows (docs/measurement.md)."
    )


def comparison_unit(c: stats.Comparison, work_unit: str | None = None) -> Unit:
    """The unit of a comparison's medians and Hodges-Lehmann shift (``work_unit``: the
    workload's own unit of work, :attr:`Group.work_unit`)."""
    return choose_unit(info(c.metric, work_unit).unit, [c.median_treatment, c.median_baseline])


def tradeoff_rows(a: Analysis, t) -> Table:
    """The front table of a trade-off: the baseline, then every Pareto-front
    configuration, with energy and time and their changes against the baseline."""
    conf = round(a.settings.confidence * 100)
    em, tm = info(t.energy_metric), info(t.time_metric)
    groups = [c.group for c in t.configs]
    ue, ut = column_unit(groups, t.energy_metric), column_unit(groups, t.time_metric)
    cols = [
        Column(t.energy_metric, f"{em.label} ({ue.label})", f"median [{conf} % CI]", ue, t.simulated),
        Column(t.time_metric, f"{tm.label} ({ut.label})", f"median [{conf} % CI]", ut, False),
        Column(t.energy_metric, f"Δ {em.label}", f"vs baseline [{conf} % CI]", ue, t.simulated),
        Column(t.time_metric, f"Δ {tm.label}", f"vs baseline [{conf} % CI]", ut, False),
    ]
    shown = ([t.baseline] if t.baseline is not None and not t.baseline.on_front else []) + t.front
    rows = []
    for c in shown:
        g = c.group
        cells = [
            summary_cell(c.energy, g.values.get(t.energy_metric), ue),
            summary_cell(c.time, g.values.get(t.time_metric), ut),
        ]
        for d in (c.d_energy, c.d_time):
            cells.append(
                Cell("baseline")
                if c.is_baseline
                else Cell("not compared")
                if c.not_compared
                else Cell(DASH)
                if d is None
                else Cell(fmt_pct(d.pct_change), fmt_pct_ci(d))
            )
        rows.append(
            dict(
                config=c.label,
                variant=g.variant,
                n_valid=g.n_valid,
                baseline=c.is_baseline,
                front=c.on_front,
                cells=cells,
            )
        )
    notes = []
    if t.baseline is None:
        notes.append(
            "The baseline configuration (every factor at its baseline level) was not run: no changes against it."
        )
    elif not t.baseline.on_front:
        notes.append(f"The baseline ({t.baseline.label}) is not on the Pareto front; it is listed first for reference.")
    skipped = [c for c in shown if c.not_compared]
    if skipped:
        notes.append(
            "Not compared with the baseline: " + "; ".join(f"{c.label} ({c.not_compared})" for c in skipped) + "."
        )
    if any(c.d_energy is not None and c.d_energy.pct_ci_low is None for c in shown):
        need = stats.MIN_N_INTERVAL["pct_change_of_medians"]
        notes.append(f"A change without a CI: a group has fewer than the {need} valid trials its interval needs.")
    return Table(cols, rows, notes)
