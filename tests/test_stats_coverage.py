"""The boundary of docs/statistics.md's coverage table, in ``make test``: each interval GC-Bench
prints, at the smallest n where it shows it (``gcbench.stats.MIN_N_INTERVAL``), on the
hardest distributions of the table for that method, covers at least 95 % - 1.5 points.

Seeded; the groups per check keep the simulation's own standard error near half a point
(sqrt(0.95 x 0.05 / 2000) = 0.49). The simulation is benchmarks/coverage.py's, which calls the
same functions of gcbench.stats the report uses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import coverage as cov  # noqa: E402

from gcbench import stats  # noqa: E402

NOMINAL = 0.95
TOLERANCE = 0.015
GROUPS = {"median": 20_000, "pooled_ratio": 20_000, "pct_change_of_medians": 2_000}
"""The median's and the pooled ratio's intervals draw no resamples: many groups cost little."""

CASES = [(m, d) for m, ds in cov.HARDEST.items() for d in ds]


@pytest.mark.parametrize(("method", "dist_name"), CASES)
def test_interval_keeps_its_level_at_the_smallest_n_shown(method, dist_name):
    dist = next(d for d in cov.DISTRIBUTIONS if d.name == dist_name)
    n = stats.MIN_N_INTERVAL[method]
    got, groups = cov.coverage(
        method, dist, n, groups=GROUPS[method], seed=stats.stable_seed("boundary", method, dist_name), resamples=1000
    )
    assert groups == GROUPS[method]
    assert got >= NOMINAL - TOLERANCE, f"{method} at n={n} on {dist_name}: coverage {100 * got:.1f} %"


def test_one_value_fewer_gives_no_median_interval_at_all():
    """Below the median's minimum no interval is computed (none could reach 95 %)."""
    n = stats.MIN_N_INTERVAL["median"] - 1
    assert 1 - 2 * 0.5**n < NOMINAL
    assert cov.coverage("median", cov.DISTRIBUTIONS[0], n, groups=10)[1] == 0


def test_the_check_can_fail_the_old_bootstrap_median_at_three_trials():
    """The same measurement on the BCa interval GC-Bench printed before (C22): 74-75 % at n = 3."""
    import numpy as np

    rng = np.random.default_rng(1)
    x = rng.lognormal(5.0, 0.2, (2000, 3))
    lo, hi = cov._bootstrap(
        (x,), lambda v, axis=-1: np.median(v, axis=axis), paired=False, resamples=500, rng=rng, confidence=0.95
    )
    covered = float(np.mean((lo <= np.exp(5.0)) & (np.exp(5.0) <= hi)))
    assert covered < 0.76  # at most 1 - 2 * 0.5**3 = 75 % (inside the sample's range), plus noise


def test_the_precision_targets_two_stage_rule_keeps_coverage_where_stopping_when_narrow_does_not():
    dist = next(d for d in cov.DISTRIBUTIONS if d.name == "lognormal sigma 0.2")
    kw = dict(n_min=6, n_max=30, until_ci_rel=0.10, groups=3000, seed=11)
    two_stage, mean_n, reached = cov.stopping_rule("two-stage", dist, **kw)
    assert two_stage >= NOMINAL - TOLERANCE and 6 < mean_n < 30 and 0 < reached < 1
