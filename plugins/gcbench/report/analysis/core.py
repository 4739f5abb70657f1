"""All numbers of one report (:class:`Analysis`) and :func:`build_analysis`, which computes
them from :class:`ReportData`. The energy-time trade-offs are built on an Analysis
(:func:`gcbench.report.analysis.tradeoff.build_tradeoffs`), not inside it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gcbench import stats
from gcbench.report.analysis.baseline import baseline_level
from gcbench.report.analysis.comparisons import ComparisonRow, build_comparisons
from gcbench.report.analysis.frame import add_carbon, add_time_per_work, normalize_trials
from gcbench.report.analysis.groups import Group, build_groups
from gcbench.report.analysis.measurement import Measurement, build_measurement
from gcbench.report.analysis.precision import PrecisionOutcome, precision_outcomes
from gcbench.report.analysis.settings import ReportSettings
from gcbench.report.data import ReportData
from gcbench.report.metrics import (
    kind_compared,
)


@dataclass
class Analysis:
    """All numbers of one report.

    Attributes:
        data: the input.
        settings: plan-derived settings.
        trials: the normalized trials frame (with ``used`` and CO2e columns).
        groups, comparisons, measurement: see their classes.
        simulated: any trial is simulated (the report then says SIMULATED everywhere).
        co2e_total: dict(energy_kwh, co2e_kg, low, high) over all valid trials, with
            ``pue``, ``facility_energy_kwh`` and ``facility_co2e_kg`` (x PUE; None without
            the plan's ``carbon.pue``).
        precision: per group of a workload with a precision target, what it reached
            (:mod:`gcbench.report.analysis.precision`).
        tradeoffs: the energy-time trade-off of each workload that has energy and time
            (:mod:`gcbench.report.analysis.tradeoff`), filled by :func:`analyze`.
    """

    data: ReportData
    settings: ReportSettings
    trials: pd.DataFrame
    groups: list[Group]
    comparisons: list[ComparisonRow]
    measurement: Measurement
    simulated: bool
    co2e_total: dict[str, float | None]
    precision: list[PrecisionOutcome] = field(default_factory=list)
    tradeoffs: list = field(default_factory=list)
    _extra: dict = field(default_factory=dict, repr=False)

    def comparison(self, treat: Group, base: Group, metric: str) -> stats.Comparison:
        """``treat`` against ``base`` on ``metric`` over the groups' summarised values:
        the report's own comparison when it made this one (same numbers everywhere),
        else computed once with the report's seed and settings (not Holm-adjusted: an
        estimate with its CI, not a test)."""
        for r in self.comparisons:
            c = r.result
            if (
                r.workload == treat.workload
                and c.treatment == treat.variant
                and c.baseline == base.variant
                and c.metric == metric
            ):
                return c
        key = (treat.workload, treat.variant, base.variant, metric)
        if key not in self._extra:
            s = self.settings
            self._extra[key] = stats.compare(
                treat.values.get(metric, np.array([])),
                base.values.get(metric, np.array([])),
                metric=metric,
                treatment=treat.variant,
                baseline=base.variant,
                confidence=s.confidence,
                n_resamples=s.n_resamples,
                alpha=s.alpha,
                seed=stats.stable_seed(*key, base=s.seed),
            )
        return self._extra[key]

    def untested_for_ci(self) -> list[ComparisonRow]:
        """Comparisons of headline metrics left out of the headlines: no CI (fewer than
        ``stats.MIN_N_INTERVAL["pct_change_of_medians"]`` valid trials on a side, or no percentage change)."""
        return [
            r
            for r in self.comparisons
            if r.result.metric in self.headline_metrics(r) and r.result.pct_ci_low is None and not r.not_compared
        ]

    def not_compared(self) -> list[ComparisonRow]:
        """Comparisons of headline metrics not made: a requested level of the factor was
        not in effect on a side (:attr:`ComparisonRow.not_compared`)."""
        return [r for r in self.comparisons if r.result.metric in self.headline_metrics(r) and r.not_compared]

    def headline_metrics(self, r: ComparisonRow) -> tuple[str, ...]:
        """The two metrics a comparison of ``r``'s workload can headline: the first two
        of its kind's compared metrics that the workload's comparisons have (a user's
        program yields J/token, J/GB or J/unit by its unit)."""
        seen = {c.result.metric for c in self.comparisons if c.workload == r.workload}
        return tuple(m for m in kind_compared(r.kind) if m in seen)[:2]

    def baseline_for(self, workload: str, factor: str, levels: list | None = None) -> Any:
        """The baseline level of ``factor`` in ``workload`` (:func:`baseline_level` over
        ``levels``, by default the factor's levels in that workload's groups), or None
        when the workload has no level of it."""
        if levels is None:
            levels = []
            for g in self.groups:
                if g.workload == workload and factor in g.factors and g.factors[factor] not in levels:
                    levels.append(g.factors[factor])
        return baseline_level(factor, levels, self.settings) if levels else None

    def headline_rows(self) -> list[ComparisonRow]:
        """Comparisons of the primary and secondary compared metrics that have a CI,
        significant ones first, then not significant, then untested and inconclusive
        (stable order). A change without a CI is no headline: it stays in the
        comparisons table (see :meth:`untested_for_ci`)."""
        rows = [
            r
            for r in self.comparisons
            if r.result.metric in self.headline_metrics(r) and r.result.pct_ci_low is not None and not r.not_compared
        ]

        def rank(r: ComparisonRow) -> int:
            if r.inconclusive:
                return 3
            if r.result.significant is None:
                return 2
            return 0 if r.result.significant else 1

        return sorted(rows, key=rank)

    @property
    def headlines(self) -> list[str]:
        """Headline sentences of :meth:`headline_rows`, in that order, then the
        energy-time trade-off's "energy saved for time lost" sentences."""
        return [r.headline for r in self.headline_rows()] + [h for t in self.tradeoffs if t.active for h in t.headlines]

    def workloads(self) -> list[tuple[str, str, list[Group]]]:
        """(workload, kind, groups) in report order."""
        out: dict[str, tuple[str, str, list[Group]]] = {}
        for g in self.groups:
            out.setdefault(g.workload, (g.workload, g.kind, []))[2].append(g)
        return list(out.values())


def build_analysis(data: ReportData, settings: ReportSettings | None = None) -> Analysis:
    """Every number of the report from ``data`` but the trade-offs (see :mod:`gcbench.report.analysis`)."""
    settings = settings or ReportSettings.from_plan(data.plan or {})
    df = normalize_trials(data.trials)
    df, basis = add_carbon(df, settings)
    if (
        settings.per_trial_carbon
    ):  # an hourly series: the text quotes the energy-weighted mean of the trials' intensities
        known = df["co2e_kg"].notna() & (df["co2_energy_kwh"] > 0)
        kwh_known = float(df.loc[known, "co2_energy_kwh"].sum())
        if kwh_known > 0:
            settings = dataclasses.replace(
                settings,
                intensity_kg_per_kwh=float(df.loc[known, "co2e_kg"].sum()) / kwh_known,
                band=(
                    float(df.loc[known, "co2e_kg_low"].sum()) / kwh_known,
                    float(df.loc[known, "co2e_kg_high"].sum()) / kwh_known,
                ),
            )
    df = add_time_per_work(df)
    groups = build_groups(df, settings)
    comparisons = build_comparisons(df, groups, settings)
    measurement = build_measurement(df, data, basis, groups)
    used = df[df["used"]]
    kwh = used["co2_energy_kwh"]
    known = bool(kwh.notna().any())
    co2e_total = dict(
        energy_kwh=float(kwh.sum()) if known else None,
        co2e_kg=float(used["co2e_kg"].sum()) if known else None,
        low=float(used["co2e_kg_low"].sum()) if known else None,
        high=float(used["co2e_kg_high"].sum()) if known else None,
        n_unknown=int(kwh.isna().sum()),
        pue=settings.pue,
        facility_energy_kwh=float(used["facility_energy_kwh"].sum()) if known and settings.pue else None,
        facility_co2e_kg=float(used["facility_co2e_kg"].sum()) if known and settings.pue else None,
    )
    a = Analysis(
        data=data,
        settings=settings,
        trials=df,
        groups=groups,
        comparisons=comparisons,
        measurement=measurement,
        simulated=bool(df["simulated"].any()),
        co2e_total=co2e_total,
        precision=precision_outcomes(data.plan or {}, groups),
    )
    return a
