"""Several GPU hosts: a plan's ``hosts:`` gives per-host tasks on Celery queues and GPU pools."""

from __future__ import annotations

from collections import Counter

import pytest

from gcbench.errors import PlanError
from gcbench.factory.dag import build_dag, plan_pools
from gcbench.factory.tasks import place_trials
from gcbench.plan.identifiers import host_device_sets
from gcbench.plan.loader import plan_from_text
from gcbench.plan.trials import expand

PLAN = """
name: multi
devices: [0, 1]
repetitions: 4
hosts:
  alpha: {queue: gpu-alpha, devices: [0, 1]}
  beta: {queue: gpu-beta, devices: [0]}
workloads:
  - name: one
    kind: noop
    matrix: {tick_s: [0.01, 0.02]}
  - name: two
    kind: noop
    settings: {gpus: 2}
    repetitions: 2
"""


@pytest.fixture(scope="module")
def plan():
    return plan_from_text(PLAN, "multi.yaml")


@pytest.fixture(scope="module")
def dag(plan):
    return build_dag(plan, "multi.yaml")


def test_each_host_gets_its_own_gpu_tasks_queue_and_pools(dag):
    runs = {t.task_id: (t.queue, t.pool) for t in dag.tasks if t.task_id.startswith("run_trial_")}
    assert runs == {
        "run_trial_alpha_gpu0": ("gpu-alpha", "gcbench_alpha_gpu0"),
        "run_trial_alpha_gpu1": ("gpu-alpha", "gcbench_alpha_gpu1"),
        "run_trial_alpha_gpu0_1": ("gpu-alpha", "gcbench_alpha_gpu0"),  # its first GPU's pool; leases hold both
        "run_trial_beta_gpu0": ("gpu-beta", "gcbench_beta_gpu0"),  # beta has one GPU: no 2-GPU task
    }
    for host, queue in (("alpha", "gpu-alpha"), ("beta", "gpu-beta")):
        collect = dag.get_task(f"collect_{host}")
        assert collect.queue == queue and collect.trigger_rule == "all_done"
    central = {t.task_id: t.queue for t in dag.tasks if t.task_id in ("expand_trials", "validate", "report")}
    assert central == {"expand_trials": "default", "validate": "default", "report": "default"}
    assert "collect" not in dag.task_dict and "run_trial_gpu0" not in dag.task_dict


def test_every_host_gpu_has_one_pool(plan):
    assert plan_pools(plan) == ["gcbench_alpha_gpu0", "gcbench_alpha_gpu1", "gcbench_beta_gpu0"]


def test_multi_gpu_trials_wait_for_the_single_gpu_trials_of_their_host(dag):
    both = dag.get_task("run_trial_alpha_gpu0_1")
    assert {"run_trial_alpha_gpu0", "run_trial_alpha_gpu1"} <= both.upstream_task_ids
    assert "run_trial_beta_gpu0" not in both.upstream_task_ids
    assert dag.get_task("run_trial_beta_gpu0").upstream_task_ids == {"trials_beta_gpu0"}
    assert {"collect_alpha", "collect_beta"} == dag.get_task("validate").upstream_task_ids


def test_trials_are_spread_round_robin_over_every_host_gpu(plan):
    specs = expand(plan)
    placed = place_trials(plan, specs)
    singles = Counter((h, tuple(d)) for s, (h, d) in zip(specs, placed, strict=True) if len(s.devices) == 1)
    assert singles == {("alpha", (0,)): 3, ("alpha", (1,)): 3, ("beta", (0,)): 2}  # 8 single-GPU trials
    doubles = [(h, d) for s, (h, d) in zip(specs, placed, strict=True) if len(s.devices) == 2]
    assert doubles == [("alpha", [0, 1])] * 2
    assert host_device_sets(plan) == {"alpha": [[0], [1], [0, 1]], "beta": [[0]]}


def test_placement_does_not_change_trial_ids(plan):
    specs = expand(plan)
    for spec, (_, devices) in zip(specs, place_trials(plan, specs), strict=True):
        placed = spec.model_copy(update={"devices": devices})
        assert placed.compute_id() == spec.trial_id


def test_without_hosts_every_trial_task_queues_in_a_single_gpu_pool():
    plan = plan_from_text(PLAN.split("hosts:")[0] + "workloads:" + PLAN.split("workloads:")[1], "one.yaml")
    dag = build_dag(plan)
    runs = {t.task_id: (t.queue, t.pool) for t in dag.tasks if t.task_id.startswith("run_trial_")}
    assert runs == {"run_trial_gpu0": ("default", "gcbench_gpu0"), "run_trial_gpu0_1": ("default", "gcbench_gpu0")}
    assert plan_pools(plan) == ["gcbench_gpu0", "gcbench_gpu1"]


def test_a_trial_no_host_can_hold_is_a_plan_error():
    text = PLAN.replace("alpha: {queue: gpu-alpha, devices: [0, 1]}", "alpha: {queue: gpu-alpha, devices: [3]}")
    with pytest.raises(PlanError, match="trials need 2 GPUs but no host lists that many devices"):
        build_dag(plan_from_text(text, "multi.yaml"))


def test_scheduled_plans_get_a_regression_check_after_the_report(plan):
    from gcbench.notify import RegressionNotifier

    assert "regression_check" not in build_dag(plan).task_dict
    nightly = plan_from_text(PLAN + 'schedule: "0 2 * * *"\n', "multi.yaml")
    dag = build_dag(nightly)
    check = dag.get_task("regression_check")
    assert check.upstream_task_ids == {"report"} and check.retries == 0
    assert any(isinstance(cb, RegressionNotifier) for cb in check.on_failure_callback)
