"""Statistics of gcbench.stats against SciPy's own results and hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from gcbench import stats

# Fixed data (not measurements): J/token-like values of two variants.
TREAT = np.array([0.93, 0.95, 0.91, 0.94, 0.96, 0.92, 0.95, 0.90, 0.97, 0.93, 0.94, 0.92])
BASE = np.array([1.00, 1.02, 0.99, 1.01, 0.98, 1.03, 1.00, 0.97, 1.04, 1.01, 0.99, 1.02])


def test_summarize_gives_the_order_statistic_interval_of_the_median_with_its_exact_coverage():
    s = stats.summarize(TREAT, group="g", metric="j_per_token", n_resamples=2000, seed=7)
    assert s.n == 12 and s.n_excluded == 0
    assert s.median == pytest.approx(np.median(TREAT))
    assert s.mean == pytest.approx(TREAT.mean())
    assert s.std == pytest.approx(TREAT.std(ddof=1))
    assert s.cv == pytest.approx(TREAT.std(ddof=1) / TREAT.mean())
    # n = 12: x(3) to x(10), coverage 1 - 2 * BinomCDF(2; 12, 1/2) = 1 - 2 * 79 / 4096
    x = np.sort(TREAT)
    assert s.ci_method == "order statistics" and (s.ci_low, s.ci_high) == (x[2], x[9])
    assert s.ci_coverage == pytest.approx(1 - 2 * 79 / 4096) and s.ci_coverage >= 0.95
    assert s.ci_low <= s.median <= s.ci_high


# C22 (round 3): a "95 % CI" of the median from 3-5 trials (BCa) covered 74 % at n = 3.
@pytest.mark.parametrize("n", [3, 4, 5])
def test_no_interval_of_the_median_below_six_values_and_the_reason_says_how_many(n):
    s = stats.summarize(np.arange(1.0, n + 1), n_resamples=2000)
    assert s.ci_low is None and s.ci_high is None and s.ci_method is None
    assert s.ci_reason.startswith("n too small for a 95 % interval of the median: 6 trials needed")


@pytest.mark.parametrize(
    ("n", "confidence", "expected"),
    [(6, 0.95, (1, 6, 1 - 2 / 64)), (8, 0.95, (1, 8, 1 - 2 / 256)), (9, 0.95, (2, 8, 1 - 2 * 10 / 512))],
)
def test_median_ranks_are_the_widest_binomial_bound_that_keeps_the_level(n, confidence, expected):
    k, j, cov = stats.median_ranks(n, confidence)
    assert (k, j) == expected[:2] and cov == pytest.approx(expected[2])
    assert stats.median_ranks(5, confidence) is None


def test_the_median_needs_more_values_at_a_higher_level():
    """Another input of the kind: a 99 % interval needs 8 values (1 - 2 * 0.5**8 = 99.2 %)."""
    assert stats.median_min_n(0.95) == 6 and stats.median_min_n(0.99) == 8
    assert stats.summarize(np.arange(7.0), confidence=0.99).ci_reason.startswith(
        "n too small for a 99 % interval of the median: 8 trials needed"
    )
    assert stats.summarize(np.arange(8.0), confidence=0.99).ci_coverage == pytest.approx(1 - 2 / 256)


@pytest.mark.parametrize(("n", "why"), [(3, "3 vs 3"), (4, "4 vs 4")])
def test_a_change_has_no_interval_below_the_methods_minimum_n(n, why):
    """3-vs-3 BCa CIs of the % change excluded 0 in 10.7 % of no-change comparisons."""
    rng = np.random.default_rng(2)
    c = stats.compare(rng.lognormal(5, 0.05, n), rng.lognormal(5, 0.05, n), n_resamples=500)
    need = stats.MIN_N_INTERVAL["pct_change_of_medians"]
    assert c.pct_ci_low is None and c.ci_reason == f"n={why}: at least {need} values per group needed"
    assert c.pct_change is not None  # the point estimate stays


def test_summarize_is_reproducible_from_names_alone():
    a = stats.summarize(TREAT, group="g", metric="m", n_resamples=500)
    b = stats.summarize(TREAT, group="g", metric="m", n_resamples=500)
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)


def test_summarize_excludes_and_counts_unknown_values():
    s = stats.summarize([1.0, None, float("nan"), 3.0, 2.0, float("inf")], n_resamples=200)
    assert s.n == 3 and s.n_excluded == 3
    assert s.median == 2.0 and s.mean == 2.0


@pytest.mark.parametrize("values, n", [([], 0), ([5.0], 1), ([5.0, 7.0], 2), ([None, None], 0)])
def test_summarize_small_groups_give_no_interval_with_a_reason(values, n):
    s = stats.summarize(values, n_resamples=1000)
    assert s.n == n
    assert s.ci_low is None and s.ci_high is None and s.ci_reason
    if n == 0:
        assert s.median is None and s.std is None
    if n == 1:
        assert s.median == 5.0 and s.std is None and s.cv is None
    if n == 2:
        assert s.median == 6.0 and s.std == pytest.approx(math.sqrt(2.0))


def test_summarize_constant_group_has_a_point_interval():
    s = stats.summarize([4.0] * 6, n_resamples=500)
    assert (s.ci_low, s.ci_high, s.ci_method) == (4.0, 4.0, "order statistics")
    assert s.std == 0.0 and s.cv == 0.0


def test_summarize_heavily_tied_data_never_returns_nan():
    s = stats.summarize([1.0] * 9 + [2.0], n_resamples=500)
    assert (s.ci_low, s.ci_high) == (1.0, 1.0)  # x(2) to x(9) of 10


def test_cliffs_delta_hand_computed():
    # x=1: below 2,2,4 (-3); x=2: ties, below 4 (-1); x=3: above 2,2, below 4 (+2 -1)
    assert stats.cliffs_delta([1, 2, 3], [2, 2, 4]) == pytest.approx(-1 / 3)
    assert stats.cliffs_delta([5, 6], [1, 2]) == 1.0
    assert stats.cliffs_delta([1, 2], [5, 6]) == -1.0
    assert stats.cliffs_delta([3, 3], [3, 3]) == 0.0


def test_cliffs_delta_equals_pairwise_definition_with_ties():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 6, 40).astype(float)
    y = rng.integers(0, 6, 33).astype(float)
    brute = np.sign(np.subtract.outer(x, y)).sum() / (x.size * y.size)
    assert stats.cliffs_delta(x, y) == pytest.approx(brute)


def test_hodges_lehmann_hand_computed():
    # differences: -1 -1 -3 / 0 0 -2 / 1 1 -1 -> sorted median -1
    assert stats.hodges_lehmann([1, 2, 3], [2, 2, 4]) == -1.0
    assert stats.hodges_lehmann([10, 11], [1]) == 9.5


def test_effect_sizes_refuse_empty_samples():
    with pytest.raises(ValueError):
        stats.cliffs_delta([], [1.0])
    with pytest.raises(ValueError):
        stats.hodges_lehmann([1.0], [])


def test_holm_on_a_known_p_vector():
    # sorted: .005*4=.02, .01*3=.03, .03*2=.06, .04*1=.04 -> running max .06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_caps_at_one_and_skips_unknown_p():
    # family of 2: .2*2=.4, then .5*1=.5; and .6*2=1.2 -> 1.0, .7 -> max(1.0, .7)
    out = stats.holm([0.5, None, 0.2, float("nan")])
    assert out[1] is None and out[3] is None
    assert out[0] == pytest.approx(0.5) and out[2] == pytest.approx(0.4)
    assert stats.holm([0.7, 0.6]) == pytest.approx([1.0, 1.0])
    assert stats.holm([]) == []


def test_compare_matches_scipy_tests_and_effect_sizes():
    c = stats.compare(
        TREAT, BASE, metric="j_per_token", treatment="torch", baseline="external-go", n_resamples=2000, seed=11
    )
    assert c.median_treatment == pytest.approx(np.median(TREAT))
    assert c.pct_change == pytest.approx(100 * (np.median(TREAT) / np.median(BASE) - 1))
    # TREAT and BASE hold ties (0.95 twice, 1.00 twice ...): a permutation p, not the normal
    # approximation; fully separated, no random split is as extreme: 2 (1 + 0) / (1 + R)
    assert c.p_method == f"permutation, {stats.PERMUTATION_RESAMPLES} random splits"
    assert c.p_mannwhitney == pytest.approx(2 / (1 + stats.PERMUTATION_RESAMPLES))
    assert c.p_welch == pytest.approx(sps.ttest_ind(TREAT, BASE, equal_var=False).pvalue)
    assert c.cliffs_delta == pytest.approx(stats.cliffs_delta(TREAT, BASE))
    assert c.hodges_lehmann == pytest.approx(np.median(np.subtract.outer(TREAT, BASE)))
    ref = sps.bootstrap(
        (TREAT, BASE),
        stats._pct_change_of_medians,
        n_resamples=2000,
        method="BCa",
        rng=np.random.default_rng(11),
        vectorized=True,
    )
    assert c.pct_ci_low == pytest.approx(ref.confidence_interval.low)
    assert c.pct_ci_high == pytest.approx(ref.confidence_interval.high)
    assert c.pct_ci_low < c.pct_change < c.pct_ci_high < 0
    assert c.significant is None  # until Holm-adjusted


def test_adjust_holm_sets_significance_from_adjusted_mann_whitney():
    rng = np.random.default_rng(5)
    same = rng.normal(1.0, 0.05, 12)
    comps = [
        stats.compare(TREAT, BASE, metric="m", treatment="a", baseline="b", n_resamples=200),
        stats.compare(same, rng.normal(1.0, 0.05, 12), metric="m", treatment="c", baseline="d", n_resamples=200),
        stats.compare([1.0], BASE, metric="m", treatment="e", baseline="b", n_resamples=200),
    ]
    adj = stats.adjust_holm(comps)
    expected = stats.holm([c.p_mannwhitney for c in comps])
    assert [c.p_mannwhitney_holm for c in adj] == expected
    assert adj[0].significant is True
    assert adj[2].significant is None and adj[2].note  # n=1: not tested, says why


def test_compare_small_and_unknown_values_do_not_crash():
    c = stats.compare([1.0, None, 2.0], [float("nan")], n_resamples=100)
    assert c.n_treatment == 2 and c.n_baseline == 0 and c.n_excluded == 2
    assert c.pct_change is None and c.p_mannwhitney is None and c.cliffs_delta is None
    c2 = stats.compare([1.0, 2.0], [1.5, 2.5], n_resamples=100)
    assert c2.pct_ci_low is None and "at least" in c2.ci_reason
    assert c2.p_mannwhitney is not None


def test_compare_constant_groups():
    c = stats.compare([2.0] * 5, [2.0] * 5, n_resamples=100)
    assert c.pct_change == 0.0 and c.p_mannwhitney == 1.0 and c.p_welch is None
    c2 = stats.compare([1.0] * 8, [2.0] * 8, n_resamples=100)
    assert (c2.pct_ci_low, c2.pct_ci_high) == (-50.0, -50.0)


def test_compare_zero_baseline_median_gives_no_percentage():
    c = stats.compare([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], n_resamples=100)
    assert c.pct_change is None and c.note and "0" in c.note


# --------------------------------------------------------------------------- pooled ratio

# Fixed data (not measurements): GPU energy (J) and tokens of five trials whose token
# counts differ tenfold, as on a loaded machine.
ENERGY_J = np.array([360.0, 370.0, 380.0, 365.0, 390.0])
TOKENS = np.array([7000.0, 9000.0, 94000.0, 12000.0, 30000.0])


def test_pooled_ratio_is_sum_over_sum_not_the_median_of_ratios():
    r = stats.summarize_ratio(ENERGY_J, TOKENS, group="g", metric="j_per_token", n_resamples=0)
    assert r.pooled == pytest.approx(ENERGY_J.sum() / TOKENS.sum()) == pytest.approx(1865 / 152000)
    assert r.pooled != pytest.approx(np.median(ENERGY_J / TOKENS))
    assert r.n == 5 and r.n_excluded == 0 and r.ci_reason == "not requested"


def test_pooled_ratio_interval_is_the_ratio_estimators_t_interval():
    """Cochran (1977) 6.4 by hand: R = sum e / sum t, SE from the residuals e - R t."""
    e = np.array([360.0, 370.0, 380.0, 365.0, 390.0, 372.0, 368.0, 381.0])
    t = np.array([7000.0, 9000.0, 9400.0, 12000.0, 30000.0, 8000.0, 9100.0, 9900.0])
    r = stats.summarize_ratio(e, t, n_resamples=2000)
    ratio = e.sum() / t.sum()
    se = math.sqrt(((e - ratio * t) ** 2).sum() / (8 * 7)) / t.mean()
    q = sps.t.ppf(0.975, 7)
    assert r.ci_method == stats.RATIO_METHOD and r.pooled == pytest.approx(ratio)
    assert (r.ci_low, r.ci_high) == (pytest.approx(ratio - q * se), pytest.approx(ratio + q * se))


def test_pooled_ratios_of_the_same_trials_multiply_to_the_pooled_power():
    """J/token x tokens/s = W: pooled figures agree with each other; medians of an even
    number of trials (each the mean of two different trials) need not."""
    e, t, seconds = ENERGY_J[:4], TOKENS[:4], np.array([1.2, 1.2, 1.3, 1.2])
    jpt = stats.summarize_ratio(e, t, n_resamples=0).pooled
    tps = stats.summarize_ratio(t, seconds, n_resamples=0).pooled
    assert jpt * tps == pytest.approx(e.sum() / seconds.sum()) == pytest.approx(301.02, abs=0.01)
    median_product = np.median(e / t) * np.median(t / seconds)
    assert median_product == pytest.approx(312.93, abs=0.01)  # 4 % off the 301 W measured


def test_pooled_ratio_excludes_unknown_and_non_positive_denominators():
    r = stats.summarize_ratio([1.0, None, 3.0, 4.0, float("nan")], [2.0, 2.0, 0.0, 4.0, 1.0], n_resamples=100)
    assert r.n == 2 and r.n_excluded == 3 and r.pooled == pytest.approx(5.0 / 6.0)
    assert r.ci_low is None and f"at least {stats.MIN_N_INTERVAL['pooled_ratio']}" in r.ci_reason


def test_pooled_ratio_has_no_interval_below_its_minimum_n():
    r = stats.summarize_ratio(ENERGY_J, TOKENS, n_resamples=2000)  # 5 trials
    assert r.ci_low is None and r.pooled is not None
    assert (
        r.ci_reason
        == f"n=5: at least {stats.MIN_N_INTERVAL['pooled_ratio']} values needed for an interval of the pooled ratio"
    )


def test_pooled_ratio_small_and_empty_groups_and_bad_shapes():
    assert stats.summarize_ratio([], []).pooled is None
    assert stats.summarize_ratio([2.0, 4.0], [1.0, 1.0]).ci_reason.startswith("n=2")
    same = stats.summarize_ratio([2.0, 4.0, 6.0], [1.0, 2.0, 3.0], n_resamples=100, min_n_ci=3)
    assert (same.ci_low, same.ci_high, same.ci_method) == (2.0, 2.0, "exact")
    with pytest.raises(ValueError, match="numerator has 2 values, denominator 1"):
        stats.summarize_ratio([1.0, 2.0], [1.0])


# C23 (round 3): ties in small groups made SciPy's default switch to the normal approximation,
# p = 0.047 for [1,1,1] vs [2,2,2], "significant" where the exact test cannot go below 0.1.
@pytest.mark.parametrize(
    ("treat", "base"),
    [
        ([1.0, 1.0, 1.0], [2.0, 2.0, 2.0]),  # the case: every value tied within its group
        ([10.0, 10.0, 11.0], [12.0, 12.0, 13.0]),  # one tie per group
        ([10.1, 10.2, 10.3], [12.1, 12.2, 12.3]),  # no tie: SciPy was exact already
        ([5.0, 5.0, 5.0], [4.0, 4.0, 4.0]),  # the other direction
    ],
)
def test_fully_separated_3_vs_3_gives_the_exact_p_of_one_tenth_tied_or_not(treat, base):
    c = stats.adjust_holm([stats.compare(treat, base, metric="gpu_energy_j", n_resamples=500)])[0]
    assert c.p_mannwhitney == pytest.approx(2 / math.comb(6, 3)) and c.p_method == "exact permutation"
    assert c.significant is False


def test_exact_permutation_p_equals_scipys_enumeration_with_ties_at_other_sizes():
    """Another input of the kind: 2 vs 5 and 8 vs 8 with quantized (tied) readings; the
    enumerated p equals SciPy's PermutationMethod over every split."""
    rng = np.random.default_rng(5)
    for n, m in ((2, 5), (4, 7), (8, 8)):
        t = np.round(rng.normal(0.0, 1.0, n), 0)
        b = np.round(rng.normal(0.8, 1.0, m), 0)
        p, method = stats.mannwhitney_p(t, b)
        ref = sps.mannwhitneyu(t, b, alternative="two-sided", method=sps.PermutationMethod(n_resamples=np.inf))
        assert method == "exact permutation" and p == pytest.approx(ref.pvalue)


def test_permutation_p_beyond_enumeration_is_seeded_never_zero_and_named():
    t = np.round(np.linspace(0.0, 1.0, 6), 1)
    b = np.round(np.linspace(5.0, 6.0, 30), 1)  # comb(36, 6) splits: too many to enumerate
    p1, method = stats.mannwhitney_p(t, b, seed=3)
    p2, _ = stats.mannwhitney_p(t, b, seed=3)
    assert p1 == p2 == pytest.approx(2 / (1 + stats.PERMUTATION_RESAMPLES))  # no split as extreme: 2 (1 + 0) / (1 + R)
    assert method.startswith("permutation")
    big_t, big_b = np.arange(12.0), np.arange(12.0) + 0.5
    p, method = stats.mannwhitney_p(big_t, big_b)
    assert method == "normal approximation"
    assert p == pytest.approx(sps.mannwhitneyu(big_t, big_b, alternative="two-sided").pvalue)


def test_welch_p_is_none_not_zero_for_two_constant_groups():
    c = stats.compare([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], n_resamples=0)
    assert c.p_welch is None and "Welch's t undefined" in (c.note or "")


# Precision targets (issue 21 point 3): repetitions {min, max, until_ci_rel}.
def test_precision_target_stops_early_on_a_quiet_group_and_late_on_a_noisy_one():
    rng = np.random.default_rng(4)
    quiet = 100 * (1 + 0.001 * rng.standard_normal(6))  # planted noise: CV 0.1 %
    noisy = 100 * (1 + 0.10 * rng.standard_normal(6))  # CV 10 %
    middle = 100 * (1 + 0.02 * rng.standard_normal(6))
    assert stats.planned_repetitions(quiet, until_ci_rel=0.02, max_n=30) == 6
    assert stats.planned_repetitions(noisy, until_ci_rel=0.02, max_n=30) == 30
    n = stats.planned_repetitions(middle, until_ci_rel=0.02, max_n=30)
    s, m = np.std(middle, ddof=1), np.median(middle)
    assert n == min(30, max(6, math.ceil((sps.t.ppf(0.975, 5) * math.sqrt(math.pi / 2) * s / (0.02 * m)) ** 2)))
    with pytest.raises(ValueError, match="until_ci_rel must be > 0"):
        stats.planned_repetitions(quiet, until_ci_rel=0, max_n=30)


@pytest.mark.parametrize(
    ("treat", "base"),
    [
        ([0.0] * 9 + [1.0], [0.0] * 4 + [1.0] * 6),  # 10 vs 10 of 0/1 readings
        ([0.0] * 10, [0.0] * 6 + [1.0] * 4),
        ([0.0] * 12, [0.0] * 8 + [1.0] * 4),  # 12 vs 12
    ],
)
def test_heavy_ties_at_ten_or_more_per_side_get_a_permutation_p_not_the_normal_one(treat, base):
    """Another input of kind C23: from 10 per side the normal approximation was used, tied
    or not; with 0/1 readings it gave p = 0.025-0.036, "significant", where the permutation
    p (SciPy's PermutationMethod) is 0.057-0.094."""
    t, b = np.array(treat), np.array(base)
    p, method = stats.mannwhitney_p(t, b, seed=1)
    ref = sps.mannwhitneyu(
        t, b, alternative="two-sided", method=sps.PermutationMethod(n_resamples=99_999, random_state=0)
    ).pvalue
    assert method.startswith("permutation") and p == pytest.approx(ref, abs=0.012)
    assert p > 0.05
    c = stats.adjust_holm([stats.compare(treat, base, n_resamples=0)])[0]
    assert c.significant is False
