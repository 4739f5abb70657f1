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


def test_summarize_matches_numpy_and_scipy_bca_with_same_seed():
    s = stats.summarize(TREAT, group="g", metric="j_per_token", n_resamples=2000, seed=7)
    ref = sps.bootstrap(
        (TREAT,), np.median, n_resamples=2000, method="BCa", rng=np.random.default_rng(7), vectorized=True
    )
    assert s.n == 12 and s.n_excluded == 0
    assert s.median == pytest.approx(np.median(TREAT))
    assert s.mean == pytest.approx(TREAT.mean())
    assert s.std == pytest.approx(TREAT.std(ddof=1))
    assert s.cv == pytest.approx(TREAT.std(ddof=1) / TREAT.mean())
    assert s.ci_method == "BCa" and s.ci_reason is None
    assert s.ci_low == pytest.approx(ref.confidence_interval.low)
    assert s.ci_high == pytest.approx(ref.confidence_interval.high)
    assert s.ci_low <= s.median <= s.ci_high


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


def test_summarize_constant_group_has_exact_interval():
    s = stats.summarize([4.0] * 6, n_resamples=500)
    assert (s.ci_low, s.ci_high, s.ci_method) == (4.0, 4.0, "exact")
    assert s.std == 0.0 and s.cv == 0.0


def test_summarize_heavily_tied_data_never_returns_nan():
    s = stats.summarize([1.0] * 9 + [2.0], n_resamples=500)
    assert s.ci_method in ("BCa", "percentile")
    assert math.isfinite(s.ci_low) and math.isfinite(s.ci_high)


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
    assert c.p_mannwhitney == pytest.approx(sps.mannwhitneyu(TREAT, BASE, alternative="two-sided").pvalue)
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
    c2 = stats.compare([1.0] * 5, [2.0] * 5, n_resamples=100)
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


def test_pooled_ratio_ci_resamples_trials_as_pairs_like_scipy():
    r = stats.summarize_ratio(ENERGY_J, TOKENS, n_resamples=2000, seed=3)
    ref = sps.bootstrap(
        (ENERGY_J, TOKENS),
        lambda e, t, axis=-1: e.sum(axis) / t.sum(axis),
        paired=True,
        vectorized=True,
        n_resamples=2000,
        method="BCa",
        rng=np.random.default_rng(3),
    )
    assert r.ci_method == "BCa"
    assert r.ci_low == pytest.approx(ref.confidence_interval.low)
    assert r.ci_high == pytest.approx(ref.confidence_interval.high)
    assert r.ci_low <= r.pooled <= r.ci_high


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
    assert r.ci_low is None and "at least 3" in r.ci_reason


def test_pooled_ratio_small_and_empty_groups_and_bad_shapes():
    assert stats.summarize_ratio([], []).pooled is None
    assert stats.summarize_ratio([2.0, 4.0], [1.0, 1.0]).ci_reason.startswith("n=2")
    same = stats.summarize_ratio([2.0, 4.0, 6.0], [1.0, 2.0, 3.0], n_resamples=100)
    assert (same.ci_low, same.ci_high, same.ci_method) == (2.0, 2.0, "exact")
    with pytest.raises(ValueError, match="numerator has 2 values, denominator 1"):
        stats.summarize_ratio([1.0, 2.0], [1.0])
