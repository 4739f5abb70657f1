"""The nightly regression check on stored histories, with and without a planted regression.

The histories are real rows in a real PostgreSQL (``pg_url``): seven earlier nights of
three trials per group, each trial's primary metric drawn around a known level with
1 % noise; tonight's trials are the same, or 5 % higher for one group.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from gcbench.plan.schema import Plan, RegressionSettings
from gcbench.regression import baseline_frame, check, check_run, tonight_frame

DAG_ID = "gcbench__nightly-test"
NIGHT0 = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
LEVELS = {("noop", "noop"): 1.2, ("h2d[memory=pinned]", "h2d"): 2.3, ("tinylm-infer", "tinylm"): 0.05}
METRIC = {"noop": "duration_s", "h2d": "gpu_j_per_gb", "tinylm": "j_per_token"}


def _plan(**regression) -> Plan:
    return Plan.model_validate(
        {
            "name": "nightly-test",
            "schedule": "0 2 * * *",
            "regression": regression,
            "workloads": [{"name": "noop", "kind": "noop"}],
        }
    )


class History:
    """Writes nights of trials into the results database, as collect + validate would."""

    def __init__(self, conn):
        self.conn = conn
        with conn.cursor() as cur:
            cur.execute("INSERT INTO plans (plan_name, plan_sha256, plan) VALUES ('nightly-test', 'x', '{}')")
        conn.commit()
        self.rng = np.random.default_rng(20260301)

    def run(self, night: int, run_id: str | None = None) -> tuple[str, int]:
        logical = NIGHT0 + timedelta(days=night)
        run_id = run_id or f"scheduled__{logical.isoformat()}"
        with self.conn.cursor() as cur:
            cur.execute(
                "INSERT INTO dag_runs (plan_name, dag_id, run_id, logical_date) VALUES "
                "('nightly-test', %s, %s, %s) RETURNING id",
                (DAG_ID, run_id, logical),
            )
            pk = cur.fetchone()[0]
        self.conn.commit()
        return run_id, pk

    def trial(
        self,
        run_pk: int,
        variant: str,
        kind: str,
        rep: int,
        value: float,
        *,
        valid: bool = True,
        status: str = "ok",
        trial_id: str | None = None,
    ) -> None:
        trial_id = trial_id or f"{variant}-{rep}"
        with self.conn.cursor() as cur:
            cur.execute(
                "INSERT INTO trials (dag_run_id, trial_id, plan_name, variant, workload, kind, repetition, spec, "
                "status, valid) VALUES (%s, %s, 'nightly-test', %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                (
                    run_pk,
                    trial_id,
                    variant,
                    variant.split("[")[0],
                    kind,
                    rep,
                    json.dumps({"order": rep}),
                    status,
                    valid,
                ),
            )
            tpk = cur.fetchone()[0]
            cur.execute(
                "INSERT INTO metrics (trial_pk, name, value) VALUES (%s, %s, %s), (%s, 'tokens', 1000)",
                (tpk, METRIC[kind], value, tpk),
            )
        self.conn.commit()

    def night(self, night: int, factor: dict[str, float] | None = None, reps: int = 3) -> str:
        """One night of every group at its level x factor, 1 % noise; returns the run id."""
        run_id, pk = self.run(night)
        for (variant, kind), level in LEVELS.items():
            f = (factor or {}).get(variant, 1.0)
            for rep in range(reps):
                self.trial(pk, variant, kind, rep, level * f * (1 + 0.01 * self.rng.standard_normal()))
        return run_id


@pytest.fixture
def history(pg_url):
    from gcbench.store import db

    with db.connection(pg_url) as conn:
        yield History(conn)


def _verdicts(result) -> dict[str, str]:
    return {g.variant: g.verdict for g in result.groups}


@pytest.mark.integration
def test_planted_5_percent_regression_is_found_only_in_its_group(history):
    for n in range(7):
        history.night(n)
    tonight = history.night(7, factor={"h2d[memory=pinned]": 1.05})
    result = check_run(history.conn, _plan(threshold_rel=0.03), tonight)
    assert _verdicts(result) == {"h2d[memory=pinned]": "regression", "noop": "unchanged", "tinylm-infer": "unchanged"}
    (g,) = result.regressions
    assert g.metric == "gpu_j_per_gb" and g.n_tonight == 3 and g.n_baseline == 21 and g.baseline_nights == 7
    assert 3.5 < g.pct_change < 6.5
    # 3 tonight: no "95 %" interval (it would cover about 75 %, C22); the exact test decides
    assert g.pct_ci_low is None and g.pct_ci_high is None
    assert "n=3 vs 21: at least 5 values per group needed" in g.note
    # 3 tonight values above all 21 baseline values: exact two-sided p = 2 / C(24, 3); Holm x3 groups
    assert g.p_mannwhitney == pytest.approx(2 / 2024, rel=1e-6)
    assert g.p_mannwhitney_holm == pytest.approx(3 * 2 / 2024, rel=1e-6)
    assert "h2d[memory=pinned]: regression: gpu_j_per_gb" in result.message()


@pytest.mark.integration
def test_history_without_regression_passes(history):
    for n in range(8):
        tonight = history.night(n)
    result = check_run(history.conn, _plan(threshold_rel=0.03), tonight)
    assert result.regressions == []
    assert set(_verdicts(result).values()) == {"unchanged"}
    for g in result.groups:
        assert abs(g.pct_change) < 3.0
        assert g.n_baseline == 21


@pytest.mark.integration
def test_default_threshold_ignores_a_significant_change_below_it(history):
    for n in range(7):
        history.night(n)
    tonight = history.night(7, factor={"noop": 1.03})
    result = check_run(history.conn, _plan(), tonight)  # threshold 5 %
    g = next(g for g in result.groups if g.variant == "noop")
    assert g.verdict == "unchanged" and 1.5 < g.pct_change < 4.5
    assert g.p_mannwhitney_holm < 0.05  # significant, but not beyond the threshold


@pytest.mark.integration
def test_improvement_is_reported_and_does_not_fail(history):
    for n in range(7):
        history.night(n)
    tonight = history.night(7, factor={"tinylm-infer": 0.90})
    result = check_run(history.conn, _plan(), tonight)
    assert _verdicts(result)["tinylm-infer"] == "improvement"
    assert result.regressions == []


@pytest.mark.integration
def test_baseline_uses_only_the_last_n_valid_nights(history):
    history.night(0, factor={v: 2.0 for v, _ in LEVELS})  # 8 nights back: outside a 7-night baseline
    for n in range(1, 8):
        history.night(n)
    _, pk = history.run(8)
    for (variant, kind), level in LEVELS.items():
        for rep in range(3):
            history.trial(pk, variant, kind, rep, level)
        history.trial(pk, variant, kind, 9, level * 10, valid=False)  # invalid: never counted
        history.trial(pk, variant, kind, 10, level * 10, status="failed", valid=False)
    tonight = f"scheduled__{(NIGHT0 + timedelta(days=8)).isoformat()}"
    base = baseline_frame(history.conn, DAG_ID, tonight, 7)
    assert base["night"].nunique() == 7 and len(base) == 7 * 3 * len(LEVELS)
    assert base["night"].min() == NIGHT0 + timedelta(days=1)
    now = tonight_frame(history.conn, DAG_ID, tonight)
    assert len(now) == 3 * len(LEVELS) and set(now["value"]) == set(LEVELS.values())
    result = check_run(history.conn, _plan(), tonight)
    assert result.regressions == []


@pytest.mark.integration
def test_rerun_of_the_night_sees_trials_stored_by_the_first_run(history):
    for n in range(7):
        history.night(n)
    first = history.night(7, factor={"noop": 1.10})
    # a second run of the same logical date (backfill / clear) stored nothing new itself
    logical = NIGHT0 + timedelta(days=7)
    with history.conn.cursor() as cur:
        cur.execute(
            "INSERT INTO dag_runs (plan_name, dag_id, run_id, logical_date) VALUES "
            "('nightly-test', %s, 'backfill__x', %s)",
            (DAG_ID, logical),
        )
    history.conn.commit()
    for run_id in (first, "backfill__x"):
        result = check_run(history.conn, _plan(), run_id)
        assert _verdicts(result)["noop"] == "regression", run_id
        assert next(g for g in result.groups if g.variant == "noop").n_tonight == 3


@pytest.mark.integration
def test_first_nights_are_not_checked(history):
    history.night(0)
    tonight = history.night(1, factor={"noop": 2.0})
    result = check_run(history.conn, _plan(), tonight)
    assert set(_verdicts(result).values()) == {"not checked"}
    assert all("no baseline yet: 1 earlier night(s), 3 needed" in g.note for g in result.groups)


def _steady_nights(seed: int, nights: int) -> pd.DataFrame:
    """A baseline frame of variant ``v`` (noop, duration_s): ``nights`` nights of 3 trials
    at 1 s with 1 % noise."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "variant": "v",
            "kind": "noop",
            "metric": "duration_s",
            "value": 1 + 0.01 * rng.standard_normal(3 * nights),
            "night": np.repeat(np.arange(nights), 3),
        }
    )


def test_check_is_a_pure_function_of_frames():
    base = _steady_nights(1, 10)
    now = pd.DataFrame({"variant": ["v"] * 3, "kind": "noop", "metric": "duration_s", "value": [1.2, 1.21, 1.19]})
    (g,) = check(now, base, RegressionSettings(baseline_runs=4, min_baseline_runs=4))
    assert g.n_baseline == 12 and g.baseline_nights == 4  # only the last 4 nights
    assert g.verdict == "regression" and g.pct_change > 15
    two = now.iloc[:2]
    (g2,) = check(two, base, RegressionSettings())
    assert g2.verdict == "not checked" and "2 valid trial(s) tonight, 3 needed" in g2.note


def test_the_interval_of_the_change_is_shown_and_required_only_from_five_values_tonight_c22():
    """From 5 values a side the % change's 95 % interval keeps its confidence
    (stats.MIN_N_INTERVAL) and rule 3 applies: shown, and above 0 for a regression; one
    that reaches below 0 is no regression."""
    base = _steady_nights(7, 7)
    now = pd.DataFrame(
        {"variant": ["v"] * 5, "kind": "noop", "metric": "duration_s", "value": [1.2, 1.21, 1.19, 1.22, 1.18]}
    )
    (g,) = check(now, base, RegressionSettings())
    assert g.verdict == "regression" and 0 < g.pct_ci_low < g.pct_change < g.pct_ci_high
    assert g.note is None or "values per group needed" not in g.note
    # three of five far above, two at the baseline: the median rose 20 %, but the interval
    # of the change reaches below 0 (the median could be 1.0): unchanged
    wide = now.assign(value=[1.2, 1.21, 1.19, 0.99, 1.0])
    (w,) = check(wide, base, RegressionSettings())
    assert w.pct_change > 15 and w.pct_ci_low < 0 < w.pct_ci_high and w.verdict == "unchanged"


def test_noisy_change_beyond_threshold_is_not_significant():
    base = pd.DataFrame(
        {
            "variant": "v",
            "kind": "noop",
            "metric": "duration_s",
            "value": [1.0, 1.3, 0.8, 1.1, 0.9, 1.2, 0.7, 1.25, 0.95],
            "night": [0, 0, 0, 1, 1, 1, 2, 2, 2],
        }
    )
    now = pd.DataFrame({"variant": ["v"] * 3, "kind": "noop", "metric": "duration_s", "value": [1.3, 0.85, 1.15]})
    (g,) = check(now, base, RegressionSettings())
    assert g.pct_change > 5 and g.p_mannwhitney_holm > 0.05
    assert g.verdict == "unchanged"


def test_regression_settings_refuse_min_above_baseline():
    with pytest.raises(ValueError, match="min_baseline_runs must not exceed baseline_runs"):
        RegressionSettings(baseline_runs=2, min_baseline_runs=3)


def _program_trial(history: History, run_pk: int, variant: str, rep: int, metrics: dict[str, float]) -> None:
    history.trial(run_pk, variant, "noop", rep, 0.0, trial_id=f"{variant}-{rep}")  # a row to turn into a command trial
    with history.conn.cursor() as cur:
        cur.execute(
            "UPDATE trials SET kind = 'command' WHERE dag_run_id = %s AND trial_id = %s RETURNING id",
            (run_pk, f"{variant}-{rep}"),
        )
        tpk = cur.fetchone()[0]
        cur.execute("DELETE FROM metrics WHERE trial_pk = %s", (tpk,))
        for name, value in metrics.items():
            cur.execute("INSERT INTO metrics (trial_pk, name, value) VALUES (%s, %s, %s)", (tpk, name, value))
    history.conn.commit()


@pytest.mark.integration
def test_a_users_program_is_judged_on_the_first_candidate_it_stored(history):
    """A program kind's candidates are J/token, J/GB, J/unit, then GPU energy: a program
    with ``unit: requests`` is judged on its J/unit, one without a unit on its GPU energy
    (before, every program (kinds command, python, container) was looked up as J/token and so never checked); the report's
    nightly trend plots the same figure."""
    from gcbench.store.queries import history_frame

    rng = np.random.default_rng(7)

    def night(n: int, serve_factor: float = 1.0) -> str:
        run_id, pk = history.run(n)
        for rep in range(3):
            noise = 1 + 0.01 * rng.standard_normal()
            _program_trial(
                history, pk, "serve", rep, {"gpu_j_per_unit": 0.8 * serve_factor * noise, "gpu_energy_j": 80.0 * noise}
            )
            _program_trial(history, pk, "batch-job", rep, {"gpu_energy_j": 500.0 * (1 + 0.01 * rng.standard_normal())})
        return run_id

    for n in range(7):
        night(n)
    tonight = night(7, serve_factor=1.10)
    result = check_run(history.conn, _plan(threshold_rel=0.05), tonight)
    by_variant = {g.variant: g for g in result.groups}
    assert {v: (g.metric, g.verdict) for v, g in by_variant.items()} == {
        "serve": ("gpu_j_per_unit", "regression"),
        "batch-job": ("gpu_energy_j", "unchanged"),
    }
    assert by_variant["serve"].n_baseline == 21 and 7.0 < by_variant["serve"].pct_change < 13.0
    trend = history_frame(history.conn, DAG_ID)
    assert set(zip(trend["variant"], trend["metric"], strict=True)) == {
        ("serve", "gpu_j_per_unit"),
        ("batch-job", "gpu_energy_j"),
    }
    assert len(trend) == 16 and set(trend["n"]) == {3}
