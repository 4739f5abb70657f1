"""Statistics of GC-Bench reports: group summaries and comparisons between variants.

Energy figures of repeated trials are skewed and sometimes have outliers (a thermal
throttle, a background process), so GC-Bench leads with robust, distribution-free
methods and reports the classical ones beside them:

* per group: median, mean, standard deviation, coefficient of variation and a 95 %
  distribution-free interval of the **median** bounded by order statistics, with its
  exact coverage (:func:`summarize`); from 6 values on, none below;
* per group, for a ratio such as J/token or tokens/s: the **pooled** estimator
  ``sum(numerator) / sum(denominator)`` over the group's trials (total energy over total
  tokens, as energy reports usually quote it) with the ratio estimator's t interval
  (Cochran 1977; :func:`summarize_ratio`);
* between two variants: the **percentage change of the medians**
  ``100 * (median(treatment) / median(baseline) - 1)`` with its BCa bootstrap CI
  (the two groups resampled independently), the Mann-Whitney U (exact or
  permutation p-value at small n, ties included: :func:`mannwhitney_p`) and Welch's t
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

Each interval is shown only from the group size at which it keeps its confidence,
measured by simulation (:data:`MIN_N_INTERVAL`, docs/statistics.md).

References:
    Cochran, W. G. (1977). Sampling Techniques, 3rd ed. Wiley, section 6.4.
    Conover, W. J. (1999). Practical Nonparametric Statistics, 3rd ed. Wiley, section 3.2.
    Efron, B. (1987). Better bootstrap confidence intervals. JASA 82(397), 171-185.
    Holm, S. (1979). A simple sequentially rejective multiple test procedure.
        Scandinavian Journal of Statistics 6(2), 65-70.
    Cliff, N. (1993). Dominance statistics: ordinal analyses to answer ordinal
        questions. Psychological Bulletin 114(3), 494-509.
    Hodges, J. L. & Lehmann, E. L. (1963). Estimates of location based on rank tests.
        Annals of Mathematical Statistics 34(2), 598-611.
    Mann, H. B. & Whitney, D. R. (1947). On a test of whether one of two random
        variables is stochastically larger than the other. Ann. Math. Stat. 18(1), 50-60.
    Phipson, B. & Smyth, G. K. (2010). Permutation p-values should never be zero.
        Statistical Applications in Genetics and Molecular Biology 9(1), 39.
    Welch, B. L. (1947). The generalization of "Student's" problem when several
        different population variances are involved. Biometrika 34(1-2), 28-35.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
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
MIN_N_INTERVAL: dict[str, int] = {
    "median": 6,
    "pooled_ratio": 8,
    "pct_change_of_medians": 5,
}
"""Fewest values (per group; per side for a change) at which each interval GC-Bench prints
holds its 95 % confidence, the one place every part of the report, the headlines and the
paper tables take it from. Measured by simulation: ``benchmarks/coverage.py`` (the table
is docs/statistics.md); ``tests/test_stats_coverage.py`` checks the boundary.

* ``median``: the distribution-free order-statistic interval (:func:`median_interval`)
  covers exactly ``1 - 2 * BinomCDF(k - 1; n, 1/2)``; its widest form, min to max, covers
  ``1 - 2 * 0.5**n``: 93.75 % at n = 5, 96.9 % at n = 6. Below that no interval can keep
  95 % (any interval inside the sample's range covers at most that), and none is shown.
* ``pooled_ratio``: the ratio estimator's t interval of sum / sum over trials
  (:func:`pooled_ratio_interval`); the BCa bootstrap it replaced covered 82-88 % at n = 5-10.
  It holds from n = 3 where the per-trial values are roughly symmetric or mildly skewed
  (normal, lognormal up to sigma 0.2, heavy tails, quantized, ties); a mean cannot be pinned
  down from few trials when rare slow windows (throttling: 83 % at n = 8, 93.5 % at 30) or
  strong skew (sigma 0.5: 91-93 % up to n = 20) drive it. 8 is the stated compromise: the
  table (docs/statistics.md, "Known limits") shows where it falls short.
* ``pct_change_of_medians``: at n = 4 per side the BCa interval covers 91 %, from n = 5
  at least 94 % on every distribution of the table.
* ``pct_change_of_medians``: BCa two-sample bootstrap of the % change of the medians
  (:func:`compare`); a comparison with fewer values on a side has no CI and is no headline.

No interval of the mean or of the Hodges-Lehmann shift is printed (their point values only).
"""

RATIO_METHOD = "ratio estimator, t"
"""ci_method of a pooled ratio's interval (:func:`pooled_ratio_interval`)."""

MIN_N_SUMMARY = 3
"""Fewest values for which a report shows a group's median (and pooled ratio) rather than
the values themselves; an interval needs more (:data:`MIN_N_INTERVAL`)."""


def min_n_text() -> str:
    """The minimum n per interval as one phrase, for the report's "how this was measured"."""
    names = {"median": "the median", "pooled_ratio": "a pooled ratio", "pct_change_of_medians": "a % change (per side)"}
    return ", ".join(f"{names[k]} {v}" for k, v in MIN_N_INTERVAL.items())


MIN_N_TEST = 2
"""Fewest values per side for p-values and the percentage-change interval."""

EXACT_PERMUTATION_MAX_SPLITS = 20_000
"""Mann-Whitney: up to this many splits of the pooled values (``comb(n + m, n)``: 8 vs 8 is
12,870) the p-value is the exact permutation p, every split enumerated."""

PERMUTATION_BELOW_N = 10
"""Mann-Whitney: with more splits than :data:`EXACT_PERMUTATION_MAX_SPLITS` and a group
smaller than this, or any tie among the pooled values, the p-value is a Monte Carlo
permutation p (the normal approximation is poor there); from this size on both sides and
without ties, SciPy's normal approximation with continuity correction. With heavy ties the
normal approximation is anti-conservative at any size: 10 vs 10 of 0/1 readings,
``[0]*9+[1]`` against ``[0]*4+[1]*6``, gave p = 0.025 where the permutation p is 0.057."""

_PERMUTATION_CHUNK = 1_000
"""Random splits drawn per batch (memory: batch x pooled size floats)."""

PERMUTATION_RESAMPLES = 9_999
"""Random splits of a Monte Carlo permutation p-value."""


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


# --------------------------------------------------------------------------- the median's interval


def median_ranks(n: int, confidence: float = DEFAULT_CONFIDENCE) -> tuple[int, int, float] | None:
    """The distribution-free interval of the median of ``n`` values: 1-based ranks
    ``(k, n + 1 - k)`` of the order statistics that bound it, with the largest ``k`` whose
    coverage ``1 - 2 * BinomCDF(k - 1; n, 1/2)`` is at least ``confidence``, and that exact
    coverage (a fraction); None when even min to max covers less (n below
    :func:`median_min_n`).

    The count of values below the population median is Binomial(n, 1/2) for any continuous
    distribution, so the coverage is exact, not approximate; with ties (quantized readings)
    the closed interval covers at least as often. Source: Conover (1999), Practical
    Nonparametric Statistics, 3rd ed., section 3.2; Hahn & Meeker (1991), ch. 5.
    """
    best = None
    for k in range(1, n // 2 + 1):
        cov = float(1.0 - 2.0 * _sps.binom.cdf(k - 1, n, 0.5))
        if cov < confidence:
            break
        best = (k, n + 1 - k, cov)
    return best


def median_min_n(confidence: float = DEFAULT_CONFIDENCE) -> int:
    """Fewest values whose order-statistic interval of the median reaches ``confidence``:
    the smallest n with ``1 - 2 * 0.5**n >= confidence`` (6 at 95 %, 8 at 99 %)."""
    return max(2, math.ceil(math.log2(2.0 / (1.0 - confidence)) - 1e-12))


def median_interval(
    x: np.ndarray, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[np.ndarray | None, np.ndarray | None, float | None]:
    """The order-statistic interval of the median (:func:`median_ranks`) of each row of
    ``x`` (shape ``(..., n)``, finite values): ``(low, high, coverage)``, low and high of
    shape ``(...)``; ``(None, None, None)`` when n is too small for ``confidence``."""
    x = np.sort(np.asarray(x, dtype=float), axis=-1)
    ranks = median_ranks(x.shape[-1], confidence)
    if ranks is None:
        return None, None, None
    k, j, cov = ranks
    return x[..., k - 1], x[..., j - 1], cov


def planned_repetitions(
    pilot: Iterable[float | None] | np.ndarray,
    *,
    until_ci_rel: float,
    max_n: int,
    confidence: float = DEFAULT_CONFIDENCE,
) -> int:
    """How many trials a group needs in all for its median's interval to be narrower than
    ``until_ci_rel`` (relative half-width, e.g. 0.02), from a first round of trials: the
    stopping rule of a precision target (``repetitions: {min, max, until_ci_rel}``).

    Stein's (1945) two-stage rule: the total n is fixed from the first round alone, with
    Student's t at the first round's degrees of freedom, ``n = ceil((t * sqrt(pi / 2) * s /
    (until_ci_rel * |median|))^2)`` (``sqrt(pi / 2) s / sqrt(n)``: the median's standard error
    for normal data), at least the first round's size and :data:`MIN_N_INTERVAL` ``median``,
    at most ``max_n``. Deciding once, before the added trials are seen, keeps the interval's
    coverage; stopping as soon as an interval looks narrow does not (benchmarks/coverage.py
    measures both).

    Args:
        pilot: the first round's values of the group's compared metric (unknown ones left out).
        until_ci_rel: target relative half-width, a fraction (> 0).
        max_n: most trials in all.

    Raises:
        ValueError: ``until_ci_rel`` is not positive.

    Source: Stein, C. (1945). A two-sample test for a linear hypothesis whose power is
    independent of the variance. Ann. Math. Stat. 16(3), 243-258.
    """
    if not until_ci_rel > 0:
        raise ValueError(f"until_ci_rel must be > 0, got {until_ci_rel}")
    x, _ = clean(pilot)
    n0 = int(x.size)
    floor = max(n0, MIN_N_INTERVAL["median"])
    if n0 < 2 or np.median(x) == 0:
        return max(floor, max_n)
    q = float(_sps.t.ppf((1.0 + confidence) / 2.0, n0 - 1))
    s = float(np.std(x, ddof=1))
    need = math.ceil((q * math.sqrt(math.pi / 2.0) * s / (until_ci_rel * abs(float(np.median(x))))) ** 2)
    return int(min(max(max_n, floor), max(floor, need)))


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
        ci_low, ci_high: distribution-free interval of the median at ``confidence``
            (order statistics, :func:`median_interval`); None with ``ci_reason`` when
            not computed (n below :func:`median_min_n`: no interval can keep the level).
        ci_method: ``order statistics`` or None.
        ci_reason: which order statistics bound the interval, or why there is none.
        ci_coverage: the interval's exact coverage (a fraction, at least ``confidence``).
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
    ci_coverage: float | None = None

    def to_dict(self) -> dict:
        """Plain dict (for CSV and JSON)."""
        return asdict(self)


def median_too_small(n: int, confidence: float = DEFAULT_CONFIDENCE) -> str:
    """The reason a group of ``n`` values (fewer than :func:`median_min_n`) has no interval of
    the median."""
    need = median_min_n(confidence)
    return f"n too small for a {100 * confidence:g} % interval of the median: {need} trials needed"


def summarize(
    values: Iterable[float | None] | np.ndarray,
    *,
    group: str = "",
    metric: str = "",
    confidence: float = DEFAULT_CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int | None = None,
    min_n_ci: int | None = None,
) -> GroupSummary:
    """Median, mean, std, CV and the distribution-free interval of the median of one group.

    The interval is bounded by order statistics (:func:`median_interval`): its coverage is
    exact for any distribution, stated in ``ci_coverage``, and at least ``confidence``.
    Resampling intervals of the median (BCa, percentile) lie inside the sample's range and
    cover 75 % at n = 3 when they claim 95 % (case C22); below :func:`median_min_n` values
    (6 at 95 %) no interval is given, with the reason. ``n_resamples=0`` skips the interval
    (reason ``"not requested"``); ``seed`` is kept for the signature (the interval draws no
    random numbers); ``min_n_ci`` may raise the minimum above the median's own.

    Never raises on small or empty groups: n=0 gives all-None figures, n=1 no std; each
    absence carries ``ci_reason``.
    """
    x, n_excluded = clean(values)
    n = int(x.size)
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
    need = max(median_min_n(confidence), min_n_ci or 0)
    ranks = median_ranks(n, confidence) if n >= need else None
    if ranks is None:
        reason = median_too_small(n, confidence)
        if need > median_min_n(confidence):
            reason = f"n={n}: at least {need} values needed for an interval"
        return GroupSummary(**base, **figures, ci_low=None, ci_high=None, ci_method=None, ci_reason=reason)
    k, j, cov = ranks
    xs = np.sort(x)
    return GroupSummary(
        **base,
        **figures,
        ci_low=float(xs[k - 1]),
        ci_high=float(xs[j - 1]),
        ci_method="order statistics",
        ci_reason=f"x({k}) to x({j}) of {n} sorted values, exact coverage {100 * cov:.1f} %",
        ci_coverage=cov,
    )


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


def pooled_ratio_interval(
    numerator: np.ndarray, denominator: np.ndarray, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[np.ndarray, np.ndarray]:
    """The interval of the pooled ratio ``R = sum(numerator) / sum(denominator)`` of each row
    (arrays of shape ``(..., n)``, n >= 2, denominators > 0): ``R -+ t(n - 1) * SE`` with the
    ratio estimator's linearized standard error ``SE = sqrt(sum((num - R den)^2) / (n (n - 1)))
    / mean(den)`` and Student's t quantile at ``(1 + confidence) / 2``.

    Source: Cochran (1977), Sampling Techniques, 3rd ed., section 6.4 (variance of the ratio
    estimate). Chosen by coverage (docs/statistics.md): the BCa bootstrap of sum / sum
    covered 82-88 % at n = 5-10 where it claimed 95 % (its resampling spread is too narrow
    by sqrt((n - 1) / n) and has no t correction at small n).

    Returns:
        (low, high), each of shape ``(...)``, in the ratio's unit.
    """
    num = np.asarray(numerator, dtype=float)
    den = np.asarray(denominator, dtype=float)
    n = num.shape[-1]
    ratio = num.sum(axis=-1) / den.sum(axis=-1)
    resid = num - ratio[..., None] * den
    se = np.sqrt((resid**2).sum(axis=-1) / (n * (n - 1))) / den.mean(axis=-1)
    q = float(_sps.t.ppf((1.0 + confidence) / 2.0, n - 1))
    return ratio - q * se, ratio + q * se


def summarize_ratio(
    numerator: Iterable[float | None] | np.ndarray,
    denominator: Iterable[float | None] | np.ndarray,
    *,
    group: str = "",
    metric: str = "",
    confidence: float = DEFAULT_CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int | None = None,
    min_n_ci: int = MIN_N_INTERVAL["pooled_ratio"],
) -> RatioSummary:
    """Pooled ratio ``sum(numerator) / sum(denominator)`` with its CI over trials.

    Args:
        numerator, denominator: per-trial values of equal length n (e.g. GPU energy in
            J and tokens); pairs with an unknown value or a denominator <= 0 are left
            out and counted.

    The interval is the ratio estimator's t interval (:func:`pooled_ratio_interval`), from
    ``min_n_ci`` pairs on (:data:`MIN_N_INTERVAL`); fewer give no interval, with the reason.
    ``n_resamples=0`` skips it; ``seed`` is kept for the signature (no random numbers drawn).
    Never raises on small or empty groups.

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
            ci_reason=f"n={n}: at least {min_n_ci} values needed for an interval of the pooled ratio",
        )
    ratios = num / den
    if np.ptp(ratios) == 0:
        return RatioSummary(
            **base, pooled=pooled, ci_low=pooled, ci_high=pooled, ci_method="exact", ci_reason="all ratios identical"
        )
    low, high = pooled_ratio_interval(num, den, confidence)
    return RatioSummary(
        **base,
        pooled=pooled,
        ci_low=float(low),
        ci_high=float(high),
        ci_method=RATIO_METHOD,
        ci_reason=None,
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
        p_mannwhitney: two-sided Mann-Whitney (1947) U test p-value by the method that
            holds at the groups' sizes (:func:`mannwhitney_p`: exact permutation for small
            groups, ties included).
        p_method: the name of that method ("exact permutation", ...); None when not tested.
        p_welch: two-sided Welch (1947) unequal-variance t test p-value; None when both
            groups have zero variance (t is undefined there, not infinite).
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
    p_method: str | None = None
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


def mannwhitney_p(
    t: np.ndarray, b: np.ndarray, *, seed: int = 0, resamples: int = PERMUTATION_RESAMPLES
) -> tuple[float, str]:
    """Two-sided Mann-Whitney (1947) p-value of ``t`` against ``b``, by the method that holds
    at their size, and that method's name.

    The statistic is U of ``t`` with midranks for ties; over the splits of the pooled values
    into groups of the two sizes, the two-sided p-value is twice the smaller one-sided share
    (splits with U at least, or at most, the observed one), capped at 1: SciPy's convention
    for ``mannwhitneyu(method=PermutationMethod())`` (with ties the permutation distribution
    need not be symmetric).

    * up to :data:`EXACT_PERMUTATION_MAX_SPLITS` splits: every split enumerated, the exact
      permutation p-value, ties included ("exact permutation"). 3 vs 3 fully separated
      gives 2 / 20 = 0.1 whether or not values tie; SciPy's default switches to the
      normal approximation at one tie and gives 0.047 (scipy/scipy#18400);
    * more splits and a side below :data:`PERMUTATION_BELOW_N`: ``resamples`` random
      splits from ``numpy.random.default_rng(seed)``, each one-sided share
      ``(1 + hits) / (1 + resamples)`` (Phipson & Smyth 2010: never 0) ("permutation, 9999
      random splits"); the same where the pooled values hold a tie, at any size;
    * else (no tie, both sides at least :data:`PERMUTATION_BELOW_N`)
      ``scipy.stats.mannwhitneyu`` (normal approximation with continuity correction;
      "normal approximation").

    Args:
        t, b: finite values, at least one each.

    Returns:
        (p, method name).
    """
    n, m = int(t.size), int(b.size)
    ranks = _sps.rankdata(np.concatenate([t, b]))
    observed = float(ranks[:n].sum())
    tol = 1e-9 * max(1.0, observed)
    splits = math.comb(n + m, n)

    def two_sided(rank_sums: np.ndarray, plus: int) -> float:
        ge = np.count_nonzero(rank_sums >= observed - tol) + plus
        le = np.count_nonzero(rank_sums <= observed + tol) + plus
        return float(min(1.0, 2.0 * min(ge, le) / (rank_sums.size + plus)))

    if splits <= EXACT_PERMUTATION_MAX_SPLITS:
        idx = np.fromiter(
            itertools.chain.from_iterable(itertools.combinations(range(n + m), n)), dtype=np.int32, count=splits * n
        ).reshape(splits, n)
        return two_sided(ranks[idx].sum(axis=1), 0), "exact permutation"
    tied = np.unique(ranks).size < ranks.size
    if min(n, m) < PERMUTATION_BELOW_N or tied:
        rng = np.random.default_rng(seed)
        sums = [
            rng.permuted(np.broadcast_to(ranks, (min(_PERMUTATION_CHUNK, resamples - i), n + m)), axis=1)[:, :n].sum(
                axis=1
            )
            for i in range(0, resamples, _PERMUTATION_CHUNK)
        ]
        return two_sided(np.concatenate(sums), 1), f"permutation, {resamples} random splits"
    return float(_sps.mannwhitneyu(t, b, alternative="two-sided").pvalue), "normal approximation"


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
    min_n_ci: int = MIN_N_INTERVAL["pct_change_of_medians"],
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

    p_mw = p_w = cd = hl = p_method = None
    if min(t.size, b.size) < min_n:
        notes.append(f"n={t.size} vs {b.size}: at least {min_n} values per group needed for tests")
    else:
        if np.ptp(np.concatenate([t, b])) == 0:
            p_mw, p_method = 1.0, "identical values"  # no evidence of any difference
            notes.append("all values identical")
        else:
            p_mw, p_method = mannwhitney_p(t, b, seed=seed)
        if np.ptp(t) == 0 and np.ptp(b) == 0:
            p_w = None  # t = difference / 0: undefined, not a certainty
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
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
        p_method=p_method,
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
