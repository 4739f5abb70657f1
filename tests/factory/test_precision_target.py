"""Precision targets in plans (issue 21, item 3), without a database: the schema and its
errors, the rounds' trial ids, the second round's n per group (Stein's rule on the first
round's valid trials), how a re-run finds the first round, the DAG's second round, the
report's sentence, and the noop kind's planted noise. The run through ``gcbench run`` is
tests/integration/test_precision_rounds.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gcbench.errors import PlanError
from gcbench.factory.tasks import _latest_trials, round2_totals
from gcbench.plan import expand
from gcbench.plan.loader import plan_from_text
from gcbench.plan.schema import RepetitionTarget, describe_repetitions
from gcbench.report.analysis.precision import PrecisionOutcome, workload_target

PLAN = """
name: target
repetitions: {min: 6, max: 12, until_ci_rel: 0.05}
window: {seconds: 1.2}
workloads:
  - name: noop
    kind: noop
    matrix: {jitter_s_sd: [0.0, 0.6]}
"""
STEADY, NOISY = "noop[jitter_s_sd=0.0]", "noop[jitter_s_sd=0.6]"


def test_a_target_plan_expands_its_first_round_of_min_repetitions():
    plan = plan_from_text(PLAN, "t.yaml")
    assert plan.repetitions == RepetitionTarget(min=6, max=12, until_ci_rel=0.05)
    assert plan.has_target
    specs = expand(plan)
    assert sorted({s.repetition for s in specs}) == list(range(6)) and len(specs) == 12
    assert describe_repetitions(plan.repetitions) == "6 to 12, until the median's interval is within ±5 %"
    # a run's --repetitions override is a plain count: no rounds
    assert len(expand(plan, repetitions=2)) == 4


def test_the_second_round_has_the_ids_of_a_plain_count():
    plan = plan_from_text(PLAN, "t.yaml")
    both = expand(plan, totals={NOISY: 9})
    fixed = expand(plan_from_text(PLAN.replace("{min: 6, max: 12, until_ci_rel: 0.05}", "9"), "t.yaml"))
    ids = {(s.variant, s.repetition): s.trial_id for s in fixed}
    assert {(s.variant, s.repetition): s.trial_id for s in both} == {
        k: v for k, v in ids.items() if k[0] == NOISY or k[1] < 6
    }


@pytest.mark.parametrize(
    ("reps", "field", "message"),
    [
        ("{min: 6, max: 3, until_ci_rel: 0.02}", "repetitions", "max (3) must be >= min (6)"),
        ("{min: 1, max: 3, until_ci_rel: 0.02}", "repetitions.min", "greater than or equal to 2"),
        ("{min: 6, max: 1001, until_ci_rel: 0.02}", "repetitions.max", "less than or equal to 1000"),
        ("{min: 6, max: 30, until_ci_rel: 1}", "repetitions.until_ci_rel", "less than 1"),
        ("{min: 6, max: 30, until_ci_rel: 0}", "repetitions.until_ci_rel", "greater than 0"),
        ("{min: 6, max: 30}", "repetitions.until_ci_rel", "Field required"),
        ("{min: 6, max: 30, until_ci_rel: 0.02, until: 3}", "repetitions.until", "unknown field"),
        ("0", "repetitions", "greater than or equal to 1"),
    ],
)
def test_a_bad_target_names_its_file_line_and_field(reps, field, message):
    text = f"name: t\nworkloads:\n  - name: a\n    kind: noop\n    repetitions: {reps}\n"
    with pytest.raises(PlanError) as err:
        plan_from_text(text, "t.yaml")
    assert str(err.value).startswith(f"t.yaml:5: workloads[0].{field}: "), str(err.value)
    assert message in str(err.value)


def _frame(values: dict[str, list[float]], valid: bool = True) -> pd.DataFrame:
    rows = [
        dict(trial_id=f"{v}-{i}", workload="noop", variant=v, status="ok", valid=valid, duration_s=x)
        for v, xs in values.items()
        for i, x in enumerate(xs)
    ]
    return pd.DataFrame(rows)


def test_the_second_round_is_stein_s_n_per_group_between_min_and_max():
    plan = plan_from_text(PLAN, "t.yaml")
    rng = np.random.default_rng(1)
    steady = list(1.2 + rng.normal(0, 0.002, 6))
    noisy = list(1.2 + np.abs(rng.normal(0, 0.6, 6)))
    assert round2_totals(plan, _frame({STEADY: steady, NOISY: noisy})) == {STEADY: 6, NOISY: 12}
    # a middling spread lands between: Stein's n from the pilot, here 8 (t_5 = 2.571)
    mid = [1.0, 1.06, 0.94, 1.03, 0.97, 1.0]
    from gcbench import stats

    expected = stats.planned_repetitions(mid, until_ci_rel=0.05, max_n=12)
    assert 6 < expected < 12
    assert round2_totals(plan, _frame({STEADY: steady, NOISY: mid}))[NOISY] == expected
    # invalid trials do not count: a group with none valid runs to max
    assert round2_totals(plan, _frame({STEADY: steady, NOISY: noisy}, valid=False)) == {STEADY: 12, NOISY: 12}
    assert round2_totals(plan, _frame({STEADY: steady, NOISY: noisy}), (STEADY,)) == {STEADY: 6}


def test_a_rerun_sees_the_first_round_stored_by_the_earlier_run():
    earlier = pd.DataFrame(
        [dict(trial_id="a", status="failed"), dict(trial_id="b", status="ok"), dict(trial_id="c", status="ok")]
    )
    now = pd.DataFrame([dict(trial_id="a", status="ok"), dict(trial_id="b", status="failed")])
    latest = _latest_trials([earlier, now]).set_index("trial_id")["status"].to_dict()
    assert latest == {"a": "ok", "b": "ok", "c": "ok"}
    assert len(_latest_trials([])) == 0


def test_the_dag_has_a_second_round_only_for_a_target():
    from gcbench.factory.dag import build_dag

    dag = build_dag(plan_from_text(PLAN, "t.yaml"))
    ids = {t.task_id for t in dag.tasks}
    assert {"expand_round2", "trials_gpu0_round2", "run_trial_gpu0_round2", "collect_round2", "validate_round2"} <= ids
    assert dag.get_task("expand_round2").upstream_task_ids == {"validate"}
    assert dag.get_task("report").upstream_task_ids == {"validate_round2"}
    assert {"expand_round2", "collect_round2", "validate_round2"} <= dag.get_task("check_trials").upstream_task_ids
    plain = build_dag(plan_from_text(PLAN.replace("{min: 6, max: 12, until_ci_rel: 0.05}", "3"), "t.yaml"))
    assert not any(t.task_id.endswith("round2") for t in plain.tasks)


def test_the_report_says_which_groups_reached_the_target():
    def outcome(n, half):
        return PrecisionOutcome("noop", "v", "duration_s", 0.02, 30, n, half)

    assert outcome(9, 0.018).sentence() == "precision target ±2 %: reached (n=9)"
    assert outcome(30, 0.0341).sentence() == "precision target ±2 %: not reached at max 30 (±3.4 %)"
    assert outcome(9, 0.023).sentence() == "precision target ±2 %: not reached (n=9, ±2.3 %)"
    assert outcome(4, None).sentence() == "precision target ±2 %: not reached (n=4, no interval)"
    plan = plan_from_text(PLAN, "t.yaml").model_dump(mode="json")
    assert workload_target(plan, "noop") == {"min": 6, "max": 12, "until_ci_rel": 0.05}
    assert workload_target({**plan, "repetitions": 3}, "noop") is None


def test_planted_noise_is_seeded_per_trial(tmp_path):
    from gcbench.workloads import noop

    class Ctx:
        def log(self, message):
            self.message = message

        def window(self):
            import contextlib

            return contextlib.nullcontext()

    plan = plan_from_text(PLAN.replace("1.2", "0.01"), "t.yaml")
    spec = next(s for s in expand(plan) if s.variant == NOISY and s.repetition == 0)
    lengths = []
    for _ in range(2):
        ctx = Ctx()
        noop.run(spec.model_copy(update={"settings": {**spec.settings, "jitter_s_sd": 0.05}}), ctx)
        lengths.append(ctx.message)
    assert lengths[0] == lengths[1] and "planted noise" in lengths[0]
    with pytest.raises(ValueError, match="jitter_s_sd must be a number >= 0"):
        noop.run(spec.model_copy(update={"settings": {**spec.settings, "jitter_s_sd": -1}}), Ctx())
