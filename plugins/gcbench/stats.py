"""Statistics of GC-Bench reports: group summaries and comparisons between variants.

Energy figures of repeated trials are skewed and sometimes have outliers (a thermal
throttle, a background process), so GC-Bench leads with robust, distribution-free
methods and reports the classical ones beside them:

* per group: median, mean, standard deviation, coefficient of variation and a 95 %
  bootstrap confidence interval of the **median** by the bias-corrected and
  accelerated (BCa) method (:func:`summarize`);
* per group, for a ratio such as J/token or tokens/s: the **pooled** estimator
  ``sum(numerator) / sum(denominator)`` over the group's trials (total energy over total
  tokens, as energy reports usually quote it) with a BCa bootstrap CI that resamples
  whole trials (:func:`summarize_ratio`);
* between two variants: the **percentage change of the medians**
  ``100 * (median(treatment) / median(baseline) - 1)`` with its BCa bootstrap CI
  (the two groups resampled independently), the Mann-Whitney U and Welch's t
  p-values, Holm's correction across all the comparisons of one report, and the effect
  sizes Cliff's delta and the Hodges-Lehmann shift (:func:`compare`,
  :func:`adjust_holm`).

A comparison is called *significant* when its Holm-adjusted Mann-Whitney U p-value is
below ``alpha`` (0.05): the rank test assumes no distribution shape, and Holm keeps the
report-wide chance of any false claim at ``alpha``. Welch's p-value is reported beside
it, also Holm-adjusted, as a check.

Unknown values (None, NaN) are excluded and counted (``n_excluded``), never treated as
zero. Groups too small for an interval get ``None`` with the reason, never an
exception. The bootstrap is seeded from the group and metric names (:func:`stable_seed`)
so a report is reproducible in any process and independent of group order.

References:
    Efron, B. (1987). Better bootstrap confidence intervals. JASA 82(397), 171-185.
    Holm, S. (1979). A simple sequentially rejective multiple test procedure.
        Scandinavian Journal of Statistics 6(2), 65-70.
    Cliff, N. (1993). Dominance statistics: ordinal analyses to answer ordinal
        questions. Psychological Bulletin 114(3), 494-509.
    Hodges, J. L. & Lehmann, E. L. (1963). Estimates of location based on rank tests.
        Annals of Mathematical Statistics 34(2), 598-611.
    Mann, H. B. & Whitney, D. R. (1947). On a test of whether one of two random
        variables is stochastically larger than the other. Ann. Math. Stat. 18(1), 50-60.
    Welch, B. L. (1947). The generalization of "Student's" problem when several
        different population variances are involved. Biometrika 34(1-2), 28-35.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from scipy import stats as _sps

DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 10_000
DEFAULT_ALPHA = 0.05
MIN_N_CI = 3
"""Fewest values for which a bootstrap interval is computed: with 1 or 2 values the
bootstrap distribution has at most 3 distinct medians and its interval means nothing."""

MIN_N_TEST = 2
"""Fewest values per side for p-values and the percentage-change interval."""


def stable_seed(*parts: object, base: int = 0) -> int:
    """A 32-bit seed from ``base`` and ``parts`` (sha256; same in every process)."""
    text = "|".join([str(base), *map(str, parts)])
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "little")


def clean(values: Iterable[float | None] | np.ndarray) -> tuple[np.ndarray, int]:
    """Finite values as a float array, and how many were excluded (None, NaN, inf).

    Returns:
        (array of shape (n,), n_excluded)
    """
    try:
        arr = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError):  # None inside a list or an object array
        arr = np.asarray([np.nan if v is None else v for v in values], dtype=float).ravel()
    keep = np.isfinite(arr)
    return arr[keep], int(arr.size - keep.sum())


# --------------------------------------------------------------------------- bootstrap

_RNG_KW = "rng" if "rng" in inspect.signature(_sps.bootstrap).parameters else "random_state"


def _median_last(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(x, axis=axis)


def _bootstrap_ci(
    data: tuple[np.ndarray, ...],
    statistic,
    *,
    confidence: float,
    n_resamples: int,
    seed: int,
) -> tuple[float | None, float | None, str | None, str | None]:
    """BCa interval (Efron 1987) via scipy.stats.bootstrap; percentile if BCa is undefined.

    BCa needs a non-degenerate jackknife (it divides by the spread of the leave-one-out
    statistics); on heavily tied data it is undefined and SciPy returns NaN. Then the
    percentile interval of the same resamples is returned and the reason says so.

    Returns:
        (low, high, method, reason); low/high None when no interval could be formed.
    """
    reason = None
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = _sps.bootstrap(
                data,
                statistic,
                n_resamples=n_resamples,
                confidence_level=confidence,
                method=method,
                vectorized=True,
                paired=False,
                **{_RNG_KW: np.random.default_rng(seed)},
            )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(low) and math.isfinite(high):
            return low, high, method, reason
        reason = "BCa undefined (degenerate jackknife, many ties); percentile interval"
    return None, None, None, "bootstrap distribution degenerate; no interval"


# --------------------------------------------------------------------------- one group


@dataclass
class GroupSummary:
    """Summary of one metric over the valid trials of one group (variant).

    Attributes:
        group: the group (variant label).
        metric: metric column name; its unit is in the name (``_j``, ``_s``, ...).
        n: values used (finite).
        n_excluded: values excluded as unknown (None/NaN/inf).
        median, mean: in the metric's unit; None when n == 0.
        std: sample standard deviation (ddof=1); None when n < 2.
        cv: coefficient of variation std/|mean| (a fraction, not %); None when
            n < 2 or mean == 0.
        ci_low, ci_high: bootstrap CI of the median at ``confidence``; None with
            ``ci_reason`` when not computed.
        ci_method: ``BCa`` (Efron 1987), ``percentile`` (BCa undefined), ``exact``
            (all values identical: the median is known exactly), or None.
        ci_reason: why the interval is absent or not BCa; None when BCa worked.
        confidence: confidence level of the interval (0.95).
        n_resamples: bootstrap resamples drawn.
    """

    group: str
    metric: str
    n: int
    n_excluded: int
    median: float | None
    mean: float | None
    std: float | None
    cv: float | None
    ci_low: float | None
    ci_high: float | None
    ci_method: str | None
    ci_reason: str | None
    confidence: float = DEFAULT_CONFIDENCE
    n_resamples: int = DEFAULT_RESAMPLES

    def to_dict(self) -> dict:
        """Plain dict (for CSV and JSON)."""
        return asdict(self)


def summarize(
    values: Iterable[float | None] | np.ndarray,
    *,
    group: str = "",
    metric: str = "",
    confidence: float = DEFAULT_CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int | None = None,
    min_n_ci: int = MIN_N_CI,
) -> GroupSummary:
    """Median, mean, std, CV and a BCa bootstrap CI of the median of one group.

    The interval is Efron's (1987) bias-corrected and accelerated bootstrap interval,
    computed by ``scipy.stats.bootstrap(method="BCa")`` with ``n_resamples``
    resamples drawn from ``numpy.random.default_rng(seed)``; ``seed`` defaults to
    :func:`stable_seed` of the group and metric names. ``n_resamples=0`` skips the
    interval (reason ``"not requested"``).

    Never raises on small or empty groups: n=0 gives all-None figures, n=1 no std,
    n < ``min_n_ci`` no interval; each absence carries ``ci_reason``.
    """
    x, n_excluded = clean(values)
    n = int(x.size)
    seed = stable_seed(group, metric) if seed is None else seed
    base: dict[str, Any] = dict(
        group=group, metric=metric, n=n, n_excluded=n_excluded, confidence=confidence, n_resamples=n_resamples
    )
    if n == 0:
        return GroupSummary(
            **base,
            median=None,
            mean=None,
            std=None,
            cv=None,
            ci_low=None,
            ci_high=None,
            ci_method=None,
            ci_reason="no valid values",
        )
    median = float(np.median(x))
    mean = float(np.mean(x))
    std = float(np.std(x, ddof=1)) if n >= 2 else None
    cv = std / abs(mean) if std is not None and mean != 0 else None
    figures: dict[str, Any] = dict(median=median, mean=mean, std=std, cv=cv)
    if n_resamples <= 0:
        return GroupSummary(**base, **figures, ci_low=None, ci_high=None, ci_method=None, ci_reason="not requested")
    if n < min_n_ci:
        return GroupSummary(
            **base,
            **figures,
            ci_low=None,
            ci_high=None,
            ci_method=None,
            ci_reason=f"n={n}: at least {min_n_ci} values needed for a bootstrap CI",
        )
    if np.ptp(x) == 0:
        return GroupSummary(
            **base, **figures, ci_low=median, ci_high=median, ci_method="exact", ci_reason="all values identical"
        )
    low, high, method, reason = _bootstrap_ci(
        (x,), _median_last, confidence=confidence, n_resamples=n_resamples, seed=seed
    )
    return GroupSummary(**base, **figures, ci_low=low, ci_high=high, ci_method=method, ci_reason=reason)


# --------------------------------------------------------------------------- pooled ratio


@dataclass
class RatioSummary:
    """The pooled ratio ``sum(numerator) / sum(denominator)`` of one group.

    Pooling weights each trial by its denominator (tokens, bytes, seconds), so the pooled
    J/token times the pooled tokens/s is the pooled power (total energy / total time):
    pooled ratios of the same trials are consistent with each other, which medians of
    per-trial ratios need not be.

    Attributes:
        group, metric: as in :class:`GroupSummary`.
        n: trials used (numerator and denominator finite, denominator > 0).
        n_excluded: trials left out (either value unknown, or denominator <= 0).
        pooled: ``sum(numerator) / sum(denominator)`` over the n trials, in the
            metric's unit; None when n == 0.
        ci_low, ci_high: BCa bootstrap CI of ``pooled``, the trials resampled as
            (numerator, denominator) pairs; None with ``ci_reason``.
        ci_method, ci_reason, confidence, n_resamples: as in :class:`GroupSummary`.
    """

    group: str
    metric: str
    n: int
    n_excluded: int
    pooled: float | None
    ci_low: float | None
    ci_high: float | None
    ci_method: str | None
    ci_reason: str | None
    confidence: float = DEFAULT_CONFIDENCE
    n_resamples: int = DEFAULT_RESAMPLES

    def to_dict(self) -> dict:
        """Plain dict (for CSV and JSON)."""
        return asdict(self)


def _pooled_last(num: np.ndarray, den: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.sum(num, axis=axis) / np.sum(den, axis=axis)


def summarize_ratio(
    numerator: Iterable[float | None] | np.ndarray,
    denominator: Iterable[float | None] | np.ndarray,
    *,
    group: str = "",
    metric: str = "",
    confidence: float = DEFAULT_CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int | None = None,
    min_n_ci: int = MIN_N_CI,
) -> RatioSummary:
    """Pooled ratio ``sum(numerator) / sum(denominator)`` with a bootstrap CI over trials.

    Args:
        numerator, denominator: per-trial values of equal length n (e.g. GPU energy in
            J and tokens); pairs with an unknown value or a denominator <= 0 are left
            out and counted.

    The interval is the BCa bootstrap (Efron 1987) of the pooled ratio with the pairs
    resampled together (``scipy.stats.bootstrap(paired=True)``), seeded like
    :func:`summarize`; the percentile interval where BCa is undefined. Never raises on
    small or empty groups; fewer than ``min_n_ci`` pairs give no interval, with the reason.

    Raises:
        ValueError: numerator and denominator differ in length.
    """
    num = np.asarray([np.nan if v is None else v for v in numerator], dtype=float).ravel()
    den = np.asarray([np.nan if v is None else v for v in denominator], dtype=float).ravel()
    if num.size != den.size:
        raise ValueError(f"numerator has {num.size} values, denominator {den.size}")
    keep = np.isfinite(num) & np.isfinite(den) & (den > 0)
    num, den, n_excluded = num[keep], den[keep], int(keep.size - keep.sum())
    n = int(num.size)
    seed = stable_seed(group, metric, "pooled") if seed is None else seed
    base: dict[str, Any] = dict(
        group=group, metric=metric, n=n, n_excluded=n_excluded, confidence=confidence, n_resamples=n_resamples
    )
    if n == 0:
        return RatioSummary(**base, pooled=None, ci_low=None, ci_high=None, ci_method=None, ci_reason="no valid values")
    pooled = float(num.sum() / den.sum())
    if n_resamples <= 0:
        return RatioSummary(**base, pooled=pooled, ci_low=None, ci_high=None, ci_method=None, ci_reason="not requested")
    if n < min_n_ci:
        return RatioSummary(
            **base,
            pooled=pooled,
            ci_low=None,
            ci_high=None,
            ci_method=None,
            ci_reason=f"n={n}: at least {min_n_ci} values needed for a bootstrap CI",
        )
    ratios = num / den
    if np.ptp(ratios) == 0:
        return RatioSummary(
            **base, pooled=pooled, ci_low=pooled, ci_high=pooled, ci_method="exact", ci_reason="all ratios identical"
        )
    reason = None
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = _sps.bootstrap(
                (num, den),
                _pooled_last,
                n_resamples=n_resamples,
                confidence_level=confidence,
                method=method,
                vectorized=True,
                paired=True,
                **{_RNG_KW: np.random.default_rng(seed)},
            )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(low) and math.isfinite(high):
            return RatioSummary(**base, pooled=pooled, ci_low=low, ci_high=high, ci_method=method, ci_reason=reason)
        reason = "BCa undefined (degenerate jackknife, many ties); percentile interval"
    return RatioSummary(
        **base,
        pooled=pooled,
        ci_low=None,
        ci_high=None,
        ci_method=None,
        ci_reason="bootstrap distribution degenerate; no interval",
    )


# --------------------------------------------------------------------------- effect sizes


def cliffs_delta(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Cliff's (1993) delta: P(X > Y) - P(X < Y) over all pairs, in [-1, 1].

    ``(#{x_i > y_j} - #{x_i < y_j}) / (n m)``, counted in O((n + m) log m) with a sorted
    ``y`` and binary search rather than the n x m comparison matrix. Positive means
    ``x`` (the treatment) tends to be larger. NaN values must be removed beforehand.

    Raises:
        ValueError: either sample is empty.
    """
    x = np.asarray(x, dtype=float).ravel()
    y = np.sort(np.asarray(y, dtype=float).ravel())
    if x.size == 0 or y.size == 0:
        raise ValueError("Cliff's delta needs two non-empty samples")
    below = np.searchsorted(y, x, side="left")  # y_j < x_i
    above = y.size - np.searchsorted(y, x, side="right")  # y_j > x_i
    return float((below.sum() - above.sum()) / (x.size * y.size))


def hodges_lehmann(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Hodges-Lehmann (1963) two-sample shift: the median of all differences x_i - y_j.

    In the metric's unit; the estimate of location shift that goes with the
    Mann-Whitney test. Uses the n x m difference matrix (fine up to a few thousand
    trials per group).

    Raises:
        ValueError: either sample is empty.
    """
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.size == 0 or y.size == 0:
        raise ValueError("the Hodges-Lehmann shift needs two non-empty samples")
    return float(np.median(np.subtract.outer(x, y)))


# --------------------------------------------------------------------------- Holm


def holm(pvalues: Sequence[float | None] | np.ndarray) -> list[float | None]:
    """Holm's (1979) step-down adjusted p-values, in the input order.

    With the m known p-values sorted ascending, ``p_adj(i) = max_{j <= i}
    min(1, (m - j + 1) p(j))``; rejecting where ``p_adj < alpha`` controls the
    family-wise error rate at ``alpha`` under any dependence. None/NaN entries are not
    part of the family and stay None.
    """
    p = np.array([np.nan if v is None else v for v in pvalues], dtype=float)
    known = np.flatnonzero(np.isfinite(p))
    out: list[float | None] = [None] * p.size
    m = known.size
    if m == 0:
        return out
    order = known[np.argsort(p[known], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.maximum.accumulate(scaled)
    for idx, val in zip(order, adjusted, strict=True):
        out[int(idx)] = float(val)
    return out


# --------------------------------------------------------------------------- comparisons


@dataclass
class Comparison:
    """A treatment variant against a baseline variant on one metric.

    Attributes:
        metric: metric column.
        treatment, baseline: group labels; changes read "treatment against baseline".
        factor: the factor in which they differ (e.g. ``path``), when known.
        n_treatment, n_baseline: finite values used; n_excluded: unknown values
            excluded on both sides together.
        median_treatment, median_baseline: medians, metric unit.
        pct_change: ``100 * (median_treatment / median_baseline - 1)`` (percent,
            change of the **median**); None when a median is missing or the baseline
            median is 0.
        pct_ci_low, pct_ci_high: bootstrap CI of ``pct_change`` (BCa, the two groups
            resampled independently), percent; None with ``ci_reason``.
        ci_method, ci_reason: as in :class:`GroupSummary`.
        p_mannwhitney: two-sided Mann-Whitney (1947) U test p-value (SciPy's exact
            distribution for small samples without ties, else the normal
            approximation with tie and continuity correction).
        p_welch: two-sided Welch (1947) unequal-variance t test p-value.
        p_mannwhitney_holm, p_welch_holm: Holm (1979) adjusted across the family
            passed to :func:`adjust_holm`; None until adjusted or when not tested.
        cliffs_delta: Cliff's (1993) delta of treatment against baseline, [-1, 1].
        hodges_lehmann: Hodges-Lehmann (1963) shift treatment - baseline, metric unit.
        significant: Holm-adjusted Mann-Whitney p < alpha; None when not tested.
        alpha: the significance level.
        note: why tests or interval are missing (too few values, constant data...).
    """

    metric: str
    treatment: str
    baseline: str
    factor: str | None
    n_treatment: int
    n_baseline: int
    n_excluded: int
    median_treatment: float | None
    median_baseline: float | None
    pct_change: float | None
    pct_ci_low: float | None
    pct_ci_high: float | None
    ci_method: str | None
    ci_reason: str | None
    p_mannwhitney: float | None
    p_welch: float | None
    cliffs_delta: float | None
    hodges_lehmann: float | None
    p_mannwhitney_holm: float | None = None
    p_welch_holm: float | None = None
    significant: bool | None = None
    alpha: float = DEFAULT_ALPHA
    note: str | None = None

    @property
    def tested(self) -> bool:
        """True when the Mann-Whitney p-value exists (both sides had enough values)."""
        return self.p_mannwhitney is not None

    def to_dict(self) -> dict:
        """Plain dict (for CSV and JSON)."""
        return asdict(self)


def _pct_change_of_medians(t: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return 100.0 * (np.median(t, axis=axis) / np.median(b, axis=axis) - 1.0)


def _finite_or_none(v: float) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


def compare(
    treatment_values: Iterable[float | None] | np.ndarray,
    baseline_values: Iterable[float | None] | np.ndarray,
    *,
    metric: str = "",
    treatment: str = "treatment",
    baseline: str = "baseline",
    factor: str | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int | None = None,
    alpha: float = DEFAULT_ALPHA,
    min_n: int = MIN_N_TEST,
    min_n_ci: int = MIN_N_CI,
) -> Comparison:
    """Compare two groups on one metric (percentage change of medians, tests, effects).

    The Holm-adjusted fields stay None: adjust a whole family with :func:`adjust_holm`.
    Never raises on small, empty or constant groups; missing figures carry ``note`` or
    ``ci_reason``.
    """
    t, ex_t = clean(treatment_values)
    b, ex_b = clean(baseline_values)
    seed = stable_seed(metric, treatment, baseline) if seed is None else seed
    med_t = float(np.median(t)) if t.size else None
    med_b = float(np.median(b)) if b.size else None
    notes: list[str] = []
    pct = None
    if med_t is not None and med_b is not None:
        if med_b != 0:
            pct = 100.0 * (med_t / med_b - 1.0)
        else:
            notes.append("baseline median is 0: no percentage change")

    lo = hi = method = None
    ci_reason: str | None = None
    if pct is None:
        ci_reason = "no percentage change"
    elif n_resamples <= 0:
        ci_reason = "not requested"
    elif min(t.size, b.size) < min_n_ci:
        ci_reason = f"n={t.size} vs {b.size}: at least {min_n_ci} values per group needed"
    elif np.ptp(t) == 0 and np.ptp(b) == 0:
        lo = hi = pct
        method, ci_reason = "exact", "all values identical in both groups"
    else:
        lo, hi, method, ci_reason = _bootstrap_ci(
            (t, b),
            _pct_change_of_medians,
            confidence=confidence,
            n_resamples=n_resamples,
            seed=seed,
        )

    p_mw = p_w = cd = hl = None
    if min(t.size, b.size) < min_n:
        notes.append(f"n={t.size} vs {b.size}: at least {min_n} values per group needed for tests")
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if np.ptp(np.concatenate([t, b])) == 0:
                p_mw = 1.0  # identical samples: no evidence of any difference
                notes.append("all values identical")
            else:
                p_mw = _finite_or_none(_sps.mannwhitneyu(t, b, alternative="two-sided").pvalue)
            p_w = _finite_or_none(_sps.ttest_ind(t, b, equal_var=False).pvalue)
        if p_w is None:
            notes.append("Welch's t undefined (zero variance in both groups)")
    if t.size and b.size:
        cd = cliffs_delta(t, b)
        hl = hodges_lehmann(t, b)
    return Comparison(
        metric=metric,
        treatment=treatment,
        baseline=baseline,
        factor=factor,
        n_treatment=int(t.size),
        n_baseline=int(b.size),
        n_excluded=ex_t + ex_b,
        median_treatment=med_t,
        median_baseline=med_b,
        pct_change=pct,
        pct_ci_low=lo,
        pct_ci_high=hi,
        ci_method=method,
        ci_reason=ci_reason,
        p_mannwhitney=p_mw,
        p_welch=p_w,
        cliffs_delta=cd,
        hodges_lehmann=hl,
        alpha=alpha,
        note="; ".join(notes) or None,
    )


def adjust_holm(comparisons: Sequence[Comparison], alpha: float | None = None) -> list[Comparison]:
    """Copies of ``comparisons`` with Holm-adjusted p-values and ``significant`` set.

    The family is exactly the comparisons given that were tested (``p`` not None);
    GC-Bench passes all comparisons of one report, so the family-wise error rate of the
    whole report is held at ``alpha`` (Holm 1979). Mann-Whitney and Welch p-values are
    adjusted as two separate families; ``significant`` follows Mann-Whitney.
    """
    adj_mw = holm([c.p_mannwhitney for c in comparisons])
    adj_w = holm([c.p_welch for c in comparisons])
    out = []
    for c, pm, pw in zip(comparisons, adj_mw, adj_w, strict=True):
        a = c.alpha if alpha is None else alpha
        out.append(
            replace(
                c, p_mannwhitney_holm=pm, p_welch_holm=pw, alpha=a, significant=None if pm is None else bool(pm < a)
            )
        )
    return out
