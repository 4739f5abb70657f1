"""Comparisons between groups one factor apart (tests, CIs, Holm adjustment) and their
headline sentences."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gcbench import stats
from gcbench.report.analysis.baseline import _is_sweep, baseline_level
from gcbench.report.analysis.groups import Group, not_compared_reason
from gcbench.report.analysis.settings import ReportSettings
from gcbench.report.fmt import fmt_p
from gcbench.report.metrics import (
    info,
    is_simulated_metric,
    kind_compared,
)


@dataclass
class ComparisonRow:
    """A :class:`gcbench.stats.Comparison` with its report context.

    Attributes:
        workload, kind: where the two variants come from.
        factor, treatment_level, baseline_level: the one factor they differ in.
        context: the other factor values, e.g. ``batch_size=8``.
        inconclusive: a side has too few valid repetitions: not tested.
        simulated: a side contains simulated trials and the metric is derived from GPU
            energy (durations, rates and accuracy are measured even on the simulated
            device).
        result: the statistics.
        headline: the sentence in the studies' form.
        not_compared: why the two groups are not compared ("memory=pinned requested, not
            in effect: ..."), or "" when they are; a row not compared carries only its
            counts and medians, is never tested and never a headline.
    """

    workload: str
    kind: str
    factor: str
    treatment_level: Any
    baseline_level: Any
    context: str
    inconclusive: bool
    simulated: bool
    result: stats.Comparison
    headline: str = ""
    not_compared: str = ""


def plan_comparisons(groups: list[Group], settings: ReportSettings) -> list[tuple[Group, Group, str]]:
    """(treatment, baseline, factor) pairs: same workload, one factor apart."""
    pairs = []
    by_workload: dict[str, list[Group]] = {}
    for g in groups:
        by_workload.setdefault(g.workload, []).append(g)
    for gs in by_workload.values():
        factors = sorted({k for g in gs for k in g.factors})
        for f in factors:
            levels = []
            for g in gs:
                if f in g.factors and g.factors[f] not in levels:
                    levels.append(g.factors[f])
            if len(levels) < 2 or _is_sweep(f, levels, settings):
                continue
            base = baseline_level(f, levels, settings)
            rest: dict[str, list[Group]] = {}
            for g in gs:
                key = json.dumps({k: v for k, v in g.factors.items() if k != f}, sort_keys=True, default=str)
                rest.setdefault(key, []).append(g)
            for members in rest.values():
                bases = [g for g in members if g.factors.get(f) == base]
                if not bases:
                    continue
                for g in members:
                    if g is not bases[0] and g.factors.get(f) != base:
                        pairs.append((g, bases[0], f))
    return pairs


def context_of(g: Group, skip: Iterable[str] = ()) -> str:
    """A group's other factor values for a comparison's context, each marked "(not in
    effect)" where its level did not run as asked."""
    skip = set(skip)
    return ", ".join(
        f"{k}={g.factors[k]}" + (" (not in effect)" if k in g.not_in_effect else "")
        for k in sorted(g.factors)
        if k not in skip
    )


def not_compared_result(treat: Group, base: Group, metric: str, factor: str, reason: str) -> stats.Comparison:
    """A :class:`gcbench.stats.Comparison` that was not made: the counts and medians of
    both sides (what ran), no change, no CI, no test; ``note`` says why."""

    def side(g: Group) -> np.ndarray:
        v = g.values.get(metric, np.array([]))
        return v[np.isfinite(v)]

    t, b = side(treat), side(base)
    return stats.Comparison(
        metric=metric,
        treatment=treat.variant,
        baseline=base.variant,
        factor=factor,
        n_treatment=int(t.size),
        n_baseline=int(b.size),
        n_excluded=0,
        median_treatment=float(np.median(t)) if t.size else None,
        median_baseline=float(np.median(b)) if b.size else None,
        pct_change=None,
        pct_ci_low=None,
        pct_ci_high=None,
        ci_method=None,
        ci_reason="not compared",
        p_mannwhitney=None,
        p_welch=None,
        cliffs_delta=None,
        hodges_lehmann=None,
        note=f"not compared: {reason}",
    )


def build_comparisons(df: pd.DataFrame, groups: list[Group], settings: ReportSettings) -> list[ComparisonRow]:
    """Compare each planned pair on the kind's compared metrics; Holm across all
    conclusive comparisons of the report; write the headline sentences."""
    constant: dict[str, set[str]] = {}  # factors with one level in a workload: no context
    for g in groups:
        others = [h for h in groups if h.workload == g.workload]
        constant[g.workload] = {
            k for k in g.factors if len({json.dumps(h.factors.get(k), default=str) for h in others}) == 1
        }
    rows: list[ComparisonRow] = []
    for treat, base, factor in plan_comparisons(groups, settings):
        why_not = not_compared_reason(treat, base, [factor])
        for m in kind_compared(treat.kind):
            if m not in treat.summaries or not df.loc[df["workload"] == treat.workload, m].notna().any():
                continue
            if why_not:
                res = not_compared_result(treat, base, m, factor, why_not)
            else:
                res = stats.compare(
                    treat.values[m],
                    base.values[m],
                    metric=m,
                    treatment=treat.variant,
                    baseline=base.variant,
                    factor=factor,
                    confidence=settings.confidence,
                    n_resamples=settings.n_resamples,
                    seed=stats.stable_seed(treat.workload, treat.variant, base.variant, m, base=settings.seed),
                    alpha=settings.alpha,
                )
            rows.append(
                ComparisonRow(
                    workload=treat.workload,
                    kind=treat.kind,
                    factor=factor,
                    treatment_level=treat.factors.get(factor),
                    baseline_level=base.factors.get(factor),
                    context=context_of(treat, skip=[factor, *constant[treat.workload]]),
                    inconclusive=treat.inconclusive or base.inconclusive,
                    simulated=(treat.simulated or base.simulated) and is_simulated_metric(m),
                    result=res,
                    not_compared=why_not,
                )
            )
    family = [i for i, r in enumerate(rows) if not r.inconclusive and not r.not_compared]
    adjusted = stats.adjust_holm([rows[i].result for i in family], alpha=settings.alpha)
    for i, res in zip(family, adjusted, strict=True):
        rows[i].result = res
    by_variant = {(g.workload, g.variant): g for g in groups}
    for r in rows:
        if r.inconclusive and not r.not_compared:
            sides = [by_variant.get((r.workload, v)) for v in (r.result.treatment, r.result.baseline)]
            twins = [
                g for g in sides if g is not None and g.inconclusive and g.n_valid >= settings.min_valid_repetitions
            ]
            note = (
                (
                    "inconclusive: the two repetitions of "
                    + " and of ".join(g.variant for g in twins)
                    + " disagree; not tested"
                )
                if twins
                else "inconclusive: too few valid repetitions; not tested"
            )
            r.result.note = note if not r.result.note else f"{note}; {r.result.note}"
        r.headline = headline(r, groups_by_variant={(g.workload, g.variant): g for g in groups}, settings=settings)
    return rows


def headline(r: ComparisonRow, *, groups_by_variant: dict, settings: ReportSettings) -> str:
    """The studies' sentence: ``X cut GPU J/token by 6.73 % (95 % CI -8.1 % to -5.2 %;
    p = 0.002, significant) against Y`` for a significant difference, ``no significant
    difference in GPU J/token between X and Y (change +0.41 %, 95 % CI -1.2 % to
    +2.0 %; p = 0.53)`` otherwise; prefixed ``SIMULATED:`` when the metric comes from
    the simulated device's energy.

    ``p`` is the Holm-adjusted Mann-Whitney U p-value; the CI is that of the
    percentage change of the medians."""
    c = r.result
    where = r.workload + (f" ({r.context})" if r.context else "")
    x = f"{r.factor}={r.treatment_level}"
    y = f"{r.factor}={r.baseline_level}"
    prefix = "SIMULATED: " if r.simulated else ""
    tg = groups_by_variant.get((r.workload, c.treatment))
    bg = groups_by_variant.get((r.workload, c.baseline))
    mi = info(c.metric, tg.work_unit if tg is not None else None)
    if r.not_compared:
        return f"{prefix}{where}: {x} against {y} on {mi.label}: not compared ({r.not_compared})."
    if r.inconclusive:
        need = settings.min_valid_repetitions
        nt = tg.n_valid if tg else c.n_treatment
        nb = bg.n_valid if bg else c.n_baseline
        if nt >= need and nb >= need:
            apart = [g.variant for g in (tg, bg) if g is not None and g.inconclusive]
            return (
                f"{prefix}{where}: {x} against {y} on {mi.label} is inconclusive (the two "
                f"repetitions of {' and of '.join(apart)} ran too far apart in throughput)."
            )
        return (
            f"{prefix}{where}: {x} against {y} on {mi.label} is inconclusive "
            f"({nt} and {nb} valid repetitions; at least {need} needed)."
        )
    if c.pct_change is None:
        return f"{prefix}{where}: {x} against {y} on {mi.label}: no percentage change ({c.note})."
    pct = c.pct_change
    conf = round(settings.confidence * 100)
    ci = (
        f"{conf} % CI {c.pct_ci_low:+.2f} % to {c.pct_ci_high:+.2f} %"
        if c.pct_ci_low is not None
        else f"no CI: {c.ci_reason}"
    )
    contended = [
        f"{g.n_contended} of {g.n_valid} trials of {lv}" for g, lv in ((tg, x), (bg, y)) if g and g.n_contended
    ]
    caveat = (
        f" CPU contention was flagged in {' and '.join(contended)}: part of it may be the host's." if contended else ""
    )
    if not c.significant:
        test = (
            fmt_p(c.p_mannwhitney_holm)
            if c.significant is not None
            else (f"not tested: {c.note}" if c.note else "not tested")
        )
        return (
            f"{prefix}{where}: no significant difference in {mi.label} between {x} and "
            f"{y} (change {pct:+.2f} %, {ci}; {test}).{caveat}"
        )
    verb = "cut" if pct < 0 else "raised" if pct > 0 else "did not change"
    by = f" by {abs(pct):.2f} %" if pct != 0 else ""
    if pct > 100:
        by += f" ({1 + pct / 100:.2f}x)"
    test = f"{fmt_p(c.p_mannwhitney_holm)}, significant"
    return f"{prefix}{where}: {x} {verb} {mi.label}{by} ({ci}; {test}) against {y}.{caveat}"
