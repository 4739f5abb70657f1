"""The DAG's shape decides whether a failed run is red: Airflow 3 sets a run's state from
its leaf tasks, so ``check_trials`` must be the leaf that sees every step."""

from __future__ import annotations

import signal
import time

import pytest

from gcbench.errors import PlanError, StoreError
from gcbench.factory.dag import build_dag, plan_pools
from gcbench.factory.tasks import fail_fast, trial_time_limit
from gcbench.plan.identifiers import trial_pool
from gcbench.plan.loader import plan_from_text

PLAN = """
name: shape
devices: [0, 1]
repetitions: 2
workloads:
  - name: one
    kind: tinylm
    matrix: {path: [torch, external-go]}
  - name: two
    kind: noop
    settings: {gpus: 2}
"""


@pytest.fixture(scope="module")
def dag():
    return build_dag(plan_from_text(PLAN, "shape.yaml"))


def test_check_trials_is_the_only_leaf(dag):
    leaves = {t.task_id for t in dag.tasks if not t.downstream_task_ids}
    assert leaves == {"check_trials"}


def test_scheduled_plans_have_the_regression_check_as_a_second_leaf():
    nightly = build_dag(plan_from_text(PLAN + 'schedule: "0 2 * * *"\n', "shape.yaml"))
    assert {t.task_id for t in nightly.tasks if not t.downstream_task_ids} == {"check_trials", "regression_check"}


def test_check_trials_runs_whatever_happened_and_sees_every_step(dag):
    check = dag.get_task("check_trials")
    assert check.trigger_rule == "all_done" and check.retries == 0
    assert {"expand_trials", "build_tokenizers", "collect", "validate", "report"} <= check.upstream_task_ids


def test_collect_runs_whatever_the_trials_did(dag):
    collect = dag.get_task("collect")
    assert collect.trigger_rule == "all_done"
    assert {"run_trial_gpu0", "run_trial_gpu0_1"} <= collect.upstream_task_ids


def test_trial_tasks_queue_in_single_gpu_pools(dag):
    pools = {t.task_id: t.pool for t in dag.tasks if t.task_id.startswith("run_trial_")}
    assert pools == {"run_trial_gpu0": "gcbench_gpu0", "run_trial_gpu0_1": "gcbench_gpu0"}  # not gcbench_gpu0_1
    assert plan_pools(plan_from_text(PLAN, "shape.yaml")) == ["gcbench_gpu0", "gcbench_gpu1"]
    assert trial_pool([2, 3]) == "gcbench_gpu2" and trial_pool([1], "h200a") == "gcbench_h200a_gpu1"


def test_trial_tasks_push_no_xcom_nothing_reads(dag):
    # collect reads the trial folders; a pushed return value would cost an API call per trial
    for task_id in ("run_trial_gpu0", "run_trial_gpu0_1"):  # mapped: the setting is a partial kwarg
        assert dag.get_task(task_id).partial_kwargs["do_xcom_push"] is False
    assert dag.get_task("collect").do_xcom_push is True  # check_trials reads collect's summary


def test_the_trial_task_timeout_is_a_backstop_above_the_gpu_wait_and_the_trial_limit(dag, monkeypatch):
    plan = plan_from_text(PLAN, "shape.yaml")
    run = dag.get_task("run_trial_gpu0")
    from gcbench.store.gpulock import DEFAULT_TIMEOUT_S

    assert run.execution_timeout.total_seconds() > plan.trial_timeout_s + DEFAULT_TIMEOUT_S
    monkeypatch.setenv("GCBENCH_GPU_LOCK_TIMEOUT_S", "60")
    short = build_dag(plan).get_task("run_trial_gpu0").execution_timeout.total_seconds()
    assert plan.trial_timeout_s + 60 < short < plan.trial_timeout_s + 60 + 600


@pytest.mark.parametrize(
    "error",
    [PlanError("p.yaml", 3, "variants", "unknown variant 'x'"), TypeError("2.0"), ValueError("bad"), KeyError("k")],
)
def test_errors_a_retry_would_meet_again_fail_at_once(error):
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match=f"expand_trials: {type(error).__name__}: "):
        with fail_fast("expand_trials"):
            raise error


def test_infrastructure_errors_pass_through_to_be_retried():
    with pytest.raises(StoreError):
        with fail_fast("expand_trials"):
            raise StoreError("cannot connect to the results database")
    with pytest.raises(OSError):
        with fail_fast("expand_trials"):
            raise OSError("disk full")


def test_fail_fast_decorates_a_task_function():
    from airflow.sdk.exceptions import AirflowFailException

    @fail_fast("validate")
    def body(x: int) -> int:
        if x < 0:
            raise ValueError("negative")
        return x

    assert body(2) == 2 and body.__name__ == "body"
    with pytest.raises(AirflowFailException, match="validate: ValueError: negative"):
        body(-1)


def test_the_trial_time_limit_fires_and_keeps_the_task_timeout():
    from airflow.sdk.exceptions import AirflowTaskTimeout

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(time.monotonic()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)  # the task's execution_timeout
        started = time.monotonic()
        with pytest.raises(AirflowTaskTimeout, match="time limit of 0 s"):
            with trial_time_limit(0.3):
                time.sleep(5)
        assert time.monotonic() - started < 2
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 25 < left <= 30  # the outer timer is back, less the time spent
        with trial_time_limit(60):  # longer than the outer one: the outer one governs
            assert 25 < signal.getitimer(signal.ITIMER_REAL)[0] <= 30
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not fired


STEPS = ["expand_trials", "build_tokenizers", "collect", "validate", "report"]
OK = {t: "success" for t in STEPS}


def _summary(**counts):
    return {"trials": 0, "stored": 0, "unchanged": 0, "failed": 0, "not_run": 0, "not_started": 0, **counts}


def test_a_run_whose_steps_succeeded_and_stored_its_trials_is_green():
    from gcbench.factory.tasks import run_verdict

    reasons, total = run_verdict(STEPS, OK, {}, [_summary(trials=4, stored=4, failed=1)], None)
    assert reasons == [] and total["trials"] == 4  # a trial that ran and failed is stored with its reason


def test_a_failed_expansion_fails_the_run_with_its_own_reason():
    from gcbench.factory.tasks import run_verdict

    states = {
        **OK,
        "expand_trials": "failed",
        "build_tokenizers": "upstream_failed",
        "collect": "skipped",
        "validate": "skipped",
        "report": "skipped",
    }
    why = "expand_trials: PlanError: smoke: variants: unknown variant 'x'"
    reasons, _ = run_verdict(STEPS, states, {"expand_trials": why}, [], None)
    assert reasons == [why]


def test_an_upstream_failure_alone_is_named_when_no_step_failed_itself():
    from gcbench.factory.tasks import run_verdict

    reasons, _ = run_verdict(STEPS, {**OK, "report": "upstream_failed"}, {}, [_summary(trials=1, stored=1)], None)
    assert reasons == ["report upstream_failed (see the task log)"]


def test_trials_to_run_with_none_stored_fail_the_run():
    from gcbench.factory.tasks import run_verdict

    reasons, _ = run_verdict(STEPS, OK, {}, [_summary(trials=3, stored=0)], None)
    assert reasons == ["none of the 3 trial(s) to run was stored"]
    reasons, _ = run_verdict(STEPS, OK, {}, [_summary(trials=2, stored=0, not_run=2)], None)
    assert reasons == ["2 trial(s) never ran (see the run_trial task logs)", "none of the 2 trial(s) to run was stored"]


def test_nothing_to_run_is_green():
    from gcbench.factory.tasks import run_verdict

    assert run_verdict(STEPS, OK, {}, [_summary()], None)[0] == []


def test_an_interrupted_run_is_failed():
    from gcbench.factory.tasks import run_verdict

    reasons, _ = run_verdict(STEPS, OK, {}, [_summary(trials=1, stored=1, not_started=2)], "SIGINT (Ctrl-C)")
    assert reasons == ["interrupted by SIGINT (Ctrl-C); 2 trial(s) not started"]
