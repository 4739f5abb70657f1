"""Which groups reached their plan's precision target (``repetitions: {min, max,
until_ci_rel}``, :class:`gcbench.plan.schema.RepetitionTarget`).

A group reached the target when the interval of the median of its primary metric
(:func:`gcbench.kinds.primary_metric`, the metric the second round was planned on) lies
within ``until_ci_rel`` of the median on both sides: ``max(median - ci_low, ci_high -
median) / |median| <= until_ci_rel``. The second round's n came from Stein's two-stage
rule (:func:`gcbench.stats.planned_repetitions`), decided once from the first round; a
group that was planned enough trials can still miss the target (the first round
understated its spread), and one that hit ``max`` usually does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gcbench import kinds
from gcbench.report.analysis.groups import Group


@dataclass(frozen=True)
class PrecisionOutcome:
    """One group's precision target and what it reached.

    Attributes:
        workload, variant: the group.
        metric: the primary metric the target applies to (unit in its name).
        until_ci_rel: the target relative half-width (a fraction: 0.02 is +-2 %).
        max_n: the target's ``max``.
        n: the group's valid trials whose metric is known.
        half_width_rel: the larger side of the median's interval over |median| (a
            fraction), or None when the group has no interval (n too small).
    """

    workload: str
    variant: str
    metric: str
    until_ci_rel: float
    max_n: int
    n: int
    half_width_rel: float | None

    @property
    def reached(self) -> bool:
        """The interval is within the target on both sides."""
        return self.half_width_rel is not None and self.half_width_rel <= self.until_ci_rel

    def sentence(self) -> str:
        """``precision target ±2 %: reached (n=9)``, ``... not reached at max 30 (±3.4 %)``,
        ``... not reached (n=9, ±2.3 %)``, or ``... not reached (n=4, no interval)``."""
        head = f"precision target \u00b1{self.until_ci_rel * 100:g} %"
        if self.reached:
            return f"{head}: reached (n={self.n})"
        width = "no interval" if self.half_width_rel is None else f"\u00b1{self.half_width_rel * 100:.1f} %"
        if self.n >= self.max_n:
            return f"{head}: not reached at max {self.max_n} ({width})"
        return f"{head}: not reached (n={self.n}, {width})"


def workload_target(plan: dict[str, Any], workload: str) -> dict[str, Any] | None:
    """The precision target (``{min, max, until_ci_rel}``) of ``workload`` in the plan
    dict (its own ``repetitions``, else the plan's), or None for a fixed count."""
    for w in plan.get("workloads") or []:
        if isinstance(w, dict) and w.get("name") == workload:
            reps = w.get("repetitions")
            if reps is None:
                reps = plan.get("repetitions")
            return reps if isinstance(reps, dict) and "until_ci_rel" in reps else None
    return None


def _known_in(g: Group) -> Callable[[str], bool]:
    return lambda m: m in g.summaries and g.summaries[m].n > 0


def precision_outcomes(plan: dict[str, Any], groups: Iterable[Group]) -> list[PrecisionOutcome]:
    """One :class:`PrecisionOutcome` per group whose workload has a precision target, in
    the groups' order."""
    out: list[PrecisionOutcome] = []
    for g in groups:
        target = workload_target(plan, g.workload)
        if target is None:
            continue
        metric = kinds.primary_metric(g.kind, _known_in(g))
        s = g.summaries.get(metric)
        half: float | None = None
        if s is not None and s.median and s.ci_low is not None and s.ci_high is not None:
            half = max(s.median - s.ci_low, s.ci_high - s.median) / abs(s.median)
        out.append(
            PrecisionOutcome(
                workload=g.workload,
                variant=g.variant,
                metric=metric,
                until_ci_rel=float(target["until_ci_rel"]),
                max_n=int(target["max"]),
                n=s.n if s is not None else 0,
                half_width_rel=half,
            )
        )
    return out
